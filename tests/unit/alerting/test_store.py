"""The alerting state: one transaction per batch, the outbox's per-incident order,
references written by senders surviving the consumer's upserts, restart, pruning; on SQLite
and on PostgreSQL alike (``alerting_state``)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.database import INTEGRITY_ERRORS, StateLocation
from anchorwatch.alerting.leadership import PartitionFenced
from anchorwatch.alerting.store import (
    BatchWrite,
    DocTypeRow,
    Store,
    StoreError,
)
from tests.support.alerting_store import entry, row

State = Path | StateLocation


@pytest.fixture
def store(alerting_state: State) -> Store:
    return Store(alerting_state)


def batch(now_ms: int = 1_000, **fields: Any) -> BatchWrite:
    return BatchWrite(now_ms=now_ms, **fields)


def test_a_batch_is_restored_as_committed(store: Store, alerting_state: State) -> None:
    store.commit_batch(
        batch(
            offsets={("verdicts", 0): 11, ("verdicts", 3): 4},
            policy_version="p1",
            tracker_states={"invoice": [{"doc_type": "invoice", "rule": "drift", "run": 2}]},
            doc_types=[DocTypeRow("invoice", 120_000, [[120_000, 180_000, 0.9, 0.85, 40]], 3)],
            verdict_ids=["v-a", "v-b"],
            incidents=[row("i1"), row("i2", state="resolved", resolved_at_ms=9)],
            outbox=[entry("i1", 1)],
            meta={"watermarks": '{"3": 180000}'},
        ),
        keep_verdict_ids=100,
    )
    again = Store(alerting_state)
    restored = again.restore()
    assert restored.offsets == {("verdicts", 0): 11, ("verdicts", 3): 4}
    assert restored.policy_version == "p1"
    assert restored.tracker_states["invoice"][0]["run"] == 2
    assert restored.doc_types["invoice"].history == [[120_000, 180_000, 0.9, 0.85, 40]]
    assert [r.incident_id for r in restored.open_incidents] == ["i1"]
    assert restored.meta["watermarks"] == '{"3": 180000}'
    assert restored.doc_types["invoice"].partition == 3
    assert again.seen_verdicts(["v-a", "v-x"]) == {"v-a"}
    if again.dialect == "sqlite":
        assert again.path.with_name(again.path.name + "-wal").exists()  # WAL mode


def test_a_failing_batch_writes_nothing(store: Store) -> None:
    store.commit_batch(batch(outbox=[entry("i1", 1)], incidents=[row()]), keep_verdict_ids=10)
    with pytest.raises(INTEGRITY_ERRORS):
        # The same (incident, integration, seq) twice: the whole batch is rolled back.
        store.commit_batch(
            batch(offsets={("verdicts", 0): 99}, outbox=[entry("i1", 2), entry("i1", 1)]),
            keep_verdict_ids=10,
        )
    assert store.restore().offsets == {}
    assert [r["seq"] for r in store.outbox_rows()] == [1]


def test_recent_verdict_ids_are_bounded(store: Store) -> None:
    for i in range(5):
        store.commit_batch(batch(verdict_ids=[f"v{i}a", f"v{i}b"]), keep_verdict_ids=3)
    assert store.seen_verdicts([f"v{i}{x}" for i in range(5) for x in "ab"]) == {
        "v3b",
        "v4a",
        "v4b",
    }


def test_a_setting_of_zero_forgets_the_ids_an_earlier_setting_kept(store: Store) -> None:
    store.commit_batch(batch(verdict_ids=["v1", "v2"]), keep_verdict_ids=10)
    assert store.seen_verdicts(["v1", "v2"]) == {"v1", "v2"}
    store.commit_batch(batch(verdict_ids=["v3"]), keep_verdict_ids=0)
    assert store.seen_verdicts(["v1", "v2", "v3"]) == set()


def test_due_takes_only_the_lowest_unfinished_seq_of_each_incident(store: Store) -> None:
    store.commit_batch(
        batch(
            incidents=[row("i1"), row("i2")],
            outbox=[
                entry("i1", 1),
                entry("i2", 1),
                entry("i1", 2),
                entry("i1", 3),
                entry("i1", 1, integration="jira"),
            ],
        ),
        keep_verdict_ids=0,
    )
    first = store.due("slack", 2_000, 10)
    assert [(e.incident_id, e.seq) for e in first] == [("i1", 1), ("i2", 1)]
    assert first[0].payload == {"n": 1}
    store.mark_attempting([first[0].id], 2_000)
    # Attempting is not finished: it still holds back seq 2 and comes back as attempting.
    again = store.due("slack", 2_000, 10)
    assert [(e.seq, e.status, e.attempts) for e in again][:1] == [(1, "attempting", 1)]
    store.mark_done([first[0].id], "sent", 2_100, incident_id="i1", refs={"slack_ts": "1.2"})
    # A head that is not due holds back its successors.
    store.reschedule([first[1].id], 9_000, "503")
    assert [(e.incident_id, e.seq) for e in store.due("slack", 2_200, 10)] == [("i1", 2)]
    assert store.next_due_ms("slack") == 1_000
    # A failed entry does not block the next one.
    head = store.due("slack", 2_200, 10)[0]
    store.mark_failed(head.id, "channel_not_found", 2_300)
    assert [(e.incident_id, e.seq) for e in store.due("slack", 2_300, 10)] == [("i1", 3)]
    assert [(e.incident_id, e.seq) for e in store.due("slack", 9_000, 10)] == [
        ("i2", 1),
        ("i1", 3),
    ]
    assert store.pending_counts(["slack", "jira", "events"]) == {"slack": 2, "jira": 1, "events": 0}
    assert store.pending_counts() == {"slack": 2, "jira": 1}


def test_sender_references_survive_the_consumers_upserts(store: Store) -> None:
    store.commit_batch(batch(incidents=[row()], outbox=[entry("i1", 1)]), keep_verdict_ids=0)
    e = store.due("slack", 2_000, 1)[0]
    store.mark_done(
        [e.id], "sent", 2_000, incident_id="i1", refs={"slack_channel": "C1", "slack_ts": "1.5"}
    )
    store.commit_batch(
        batch(incidents=[row(severity="critical", next_seq=3)], outbox=[entry("i1", 2)]),
        keep_verdict_ids=0,
    )
    update = store.due("slack", 3_000, 1)[0]
    assert (update.refs.slack_channel, update.refs.slack_ts) == ("C1", "1.5")
    assert store.incident("i1") == row(severity="critical", next_seq=3)
    with pytest.raises(ValueError, match="unknown incident references"):
        store.mark_done([update.id], "sent", 1, incident_id="i1", refs={"state": "x"})


def test_superseding_looks_only_at_the_next_entry(store: Store) -> None:
    store.commit_batch(
        batch(
            incidents=[row()],
            outbox=[
                entry("i1", 1, kind="progress"),
                entry("i1", 2, kind="progress"),
                entry("i1", 3, kind="resolved", action="resolve"),
            ],
        ),
        keep_verdict_ids=0,
    )
    first = store.due("slack", 10**9, 1)[0]
    assert store.has_later_update(first)
    # The second is followed by a resolution, not an update; the third by nothing.
    assert not store.has_later_update(replace(first, seq=2))
    assert not store.has_later_update(replace(first, seq=3))


def test_prune_forgets_old_resolved_incidents_but_not_undelivered_ones(store: Store) -> None:
    store.commit_batch(
        batch(
            incidents=[
                row("old", state="resolved", updated_ms=10),
                row("stuck", state="resolved", updated_ms=10),
                row("open", updated_ms=10),
            ],
            outbox=[entry("old", 1), entry("stuck", 1)],
        ),
        keep_verdict_ids=0,
    )
    old = next(e for e in store.due("slack", 10**9, 10) if e.incident_id == "old")
    store.mark_done([old.id], "sent", 20)
    assert store.prune(before_ms=100) == 1
    assert store.incident("old") is None
    assert store.incident("stuck") is not None
    assert store.incident("open") is not None
    assert [r["incident_id"] for r in store.outbox_rows()] == ["stuck"]


def test_listing_shows_references_and_delivery_states(store: Store) -> None:
    store.commit_batch(
        batch(incidents=[row("i1"), row("i2", state="resolved")], outbox=[entry("i1", 1)]),
        keep_verdict_ids=0,
    )
    e = store.due("slack", 10**9, 1)[0]
    store.mark_done([e.id], "sent", 5, incident_id="i1", refs={"jira_key": "OPS-7"})
    open_only = store.list_incidents(open_only=True, limit=10)
    assert [(i.row.incident_id, i.refs.jira_key, i.deliveries) for i in open_only] == [
        ("i1", "OPS-7", {"slack": {"done": 1}})
    ]
    assert len(store.list_incidents(open_only=False, limit=10)) == 2


def test_a_missing_or_newer_state_is_a_clear_error(alerting_state: State) -> None:
    with pytest.raises(StoreError, match="no alerting state"):
        Store(alerting_state, create=False)
    store = Store(alerting_state)
    store.meta_set("schema_version", "99")
    store.close()
    with pytest.raises(StoreError, match="schema 99"):
        Store(alerting_state)


def test_readers_see_committed_state_while_a_writer_holds_it(alerting_state: State) -> None:
    writer, reader = Store(alerting_state), Store(alerting_state, create=False)
    writer.commit_batch(batch(incidents=[row()]), keep_verdict_ids=0)
    assert [i.row.incident_id for i in reader.list_incidents(open_only=True, limit=5)] == ["i1"]


def test_reads_in_one_view_do_not_see_a_commit_made_between_them(alerting_state: State) -> None:
    """A delivery marked done and the references it produced commit together; a reader
    that lists the incidents and then reads the outbox must see both or neither."""
    writer, reader = Store(alerting_state), Store(alerting_state, create=False)
    writer.commit_batch(batch(incidents=[row()], outbox=[entry("i1", 1)]), keep_verdict_ids=0)
    e = writer.due("slack", 10**9, 1)[0]
    with reader.reading():
        listed = reader.list_incidents(open_only=False, limit=5)
        writer.mark_done([e.id], "sent", 5, incident_id="i1", refs={"jira_key": "OPS-1"})
        statuses = [r["status"] for r in reader.outbox_rows("i1")]
    assert (listed[0].refs.jira_key, statuses) == (None, ["pending"])
    # Outside the view, the next reads see the commit whole.
    assert reader.list_incidents(open_only=False, limit=5)[0].refs.jira_key == "OPS-1"
    assert [r["status"] for r in reader.outbox_rows("i1")] == ["done"]


def test_outcome_before_is_the_finished_outcome_of_the_entry_just_before(store: Store) -> None:
    store.commit_batch(
        batch(
            incidents=[row("i1"), row("i2")],
            outbox=[
                entry("i1", 1),
                entry("i1", 2, kind="progress"),
                entry("i1", 3, kind="chart", action="chart"),
                entry("i1", 1, integration="jira"),
                entry("i2", 1),
            ],
        ),
        keep_verdict_ids=0,
    )
    first, other = store.due("slack", 10**9, 10)
    (jira,) = store.due("jira", 10**9, 10)
    assert store.outcome_before(first) is None  # nothing before it
    assert store.outcome_before(replace(first, seq=2)) is None  # seq 1 not finished yet
    store.mark_done([first.id], "sent", 5)
    second = store.due("slack", 10**9, 10)[0]
    assert store.outcome_before(second) == "sent"
    store.mark_done([second.id], "superseded", 6)
    chart = store.due("slack", 10**9, 10)[0]
    assert (chart.seq, store.outcome_before(chart)) == (3, "superseded")
    # Only the same incident's entries for the same integration count.
    assert store.outcome_before(jira) is None
    assert store.outcome_before(other) is None
    assert store.outcome_before(replace(jira, seq=2)) is None


def test_outbox_rows_of_one_incident_or_all_in_insertion_order(store: Store) -> None:
    store.commit_batch(
        batch(
            incidents=[row("i1"), row("i2")],
            outbox=[entry("i2", 1), entry("i1", 1), entry("i2", 2), entry("i1", 1, "jira")],
        ),
        keep_verdict_ids=0,
    )
    everything = [(r["incident_id"], r["seq"], r["integration"]) for r in store.outbox_rows()]
    assert everything == [
        ("i2", 1, "slack"),
        ("i1", 1, "slack"),
        ("i2", 2, "slack"),
        ("i1", 1, "jira"),
    ]
    assert [(r["seq"], r["status"]) for r in store.outbox_rows("i2")] == [
        (1, "pending"),
        (2, "pending"),
    ]
    assert [r["integration"] for r in store.outbox_rows("i1")] == ["slack", "jira"]
    assert store.outbox_rows("nope") == []


def test_an_entry_names_itself_in_log_lines(store: Store) -> None:
    store.commit_batch(batch(incidents=[row("i1")], outbox=[entry("i1", 4)]), keep_verdict_ids=0)
    (e,) = store.due("slack", 10**9, 1)
    assert e.log_fields() == {
        "integration": "slack",
        "action": "update",
        "kind": "updated",
        "incident_id": "i1",
        "seq": 4,
    }


def test_a_corrupt_state_file_is_named_with_sqlites_reason(tmp_path: Path) -> None:
    (tmp_path / "alerting.sqlite3").write_bytes(b"not a database, " * 512)
    with pytest.raises(StoreError) as raised:
        Store(tmp_path)
    assert str(raised.value) == (
        f"alerting state {tmp_path / 'alerting.sqlite3'}: file is not a database"
    )


class OwnsOnly:
    """A ``PartitionGuard`` owning the partitions given; what it was asked to fence."""

    def __init__(self, *owned: int) -> None:
        self.owned = frozenset(owned)
        self.fenced: list[set[int]] = []

    def fence_partitions(self, db: object, partitions: Collection[int]) -> None:
        self.fenced.append(set(partitions))
        if not set(partitions) <= self.owned:
            raise PartitionFenced(f"not owned: {sorted(set(partitions) - self.owned)}")

    def owned_now(self) -> frozenset[int]:
        return self.owned


def entry_ids_on_two_partitions(alerting_state: State) -> dict[str, int]:
    """Incident "on-0" of a type on partition 0, "on-1" on partition 1, each with an outbox
    entry: the entries' ids by incident."""
    writer = Store(alerting_state)
    writer.commit_batch(
        batch(
            doc_types=[DocTypeRow("invoice", 0, [], 0), DocTypeRow("contract", 0, [], 1)],
            incidents=[row("on-0"), row("on-1", doc_type="contract")],
            outbox=[entry("on-0", 1), entry("on-1", 1)],
        ),
        keep_verdict_ids=0,
    )
    try:
        return {r["incident_id"]: r["id"] for r in writer.outbox_rows()}
    finally:
        writer.close()


def test_with_the_work_split_senders_take_and_mark_only_their_partitions_entries(
    alerting_state: State,
) -> None:
    entry_ids_on_two_partitions(alerting_state)
    guard = OwnsOnly(1)
    mine = Store(alerting_state, guard=guard)
    due = mine.due("slack", 10_000, 10)
    assert [e.incident_id for e in due] == ["on-1"]
    assert mine.next_due_ms("slack") == 1_000
    mine.mark_attempting([due[0].id], 2_000)
    assert guard.fenced[-1] == {1}
    (theirs,) = [r for r in mine.outbox_rows() if r["incident_id"] == "on-0"]
    with pytest.raises(PartitionFenced, match=r"not owned: \[0\]"):
        mine.mark_attempting([theirs["id"]], 2_000)
    with pytest.raises(PartitionFenced):
        mine.commit_batch(batch(incidents=[row("on-0")], partitions={0, 1}), keep_verdict_ids=0)
    statuses = {r["incident_id"]: r["status"] for r in mine.outbox_rows()}
    assert statuses == {"on-0": "pending", "on-1": "attempting"}
    assert Store(alerting_state, guard=OwnsOnly()).due("slack", 10_000, 10) == []


def test_a_send_checks_the_fence_of_its_entries_before_its_last_step(
    alerting_state: State,
) -> None:
    ids = entry_ids_on_two_partitions(alerting_state)
    mine = Store(alerting_state, guard=OwnsOnly(1))
    mine.check_fence([ids["on-1"]])
    with pytest.raises(PartitionFenced, match=r"not owned: \[0\]"):
        mine.check_fence([ids["on-0"]])
