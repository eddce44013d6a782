"""What the outbox's exactly-once rests on, each tested on its own: a batch's decisions and
its offsets commit in ONE SQLite transaction (a crash inside it leaves neither, and no
reader ever sees one without the other), a delivery's "done" and the references it produced
commit together, and verdicts the drift job sends again are never decided twice (by their
ids, and by their windows when an old window comes back under a new id)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.store import BatchWrite, IncidentRow, NewEntry, Store
from tests.support.alerting import LocalSlackWithHistory, lifecycle, verdict
from tests.support.alerting_harness import (
    Crash,
    Harness,
    assert_one_clean_lifecycle,
    settings_for,
)

T0 = 1_767_621_600_000


def outbox(h: Harness) -> list[tuple[Any, ...]]:
    """What was decided: every entry, without delivery columns."""
    return sorted(
        (r["incident_id"], r["seq"], r["integration"], r["action"], r["kind"], r["payload"])
        for r in h.store.outbox_rows()
    )


def decide(tmp_path: Path, clock: ManualClock, verdicts: list[Any], crash: str | None) -> Harness:
    """Consume every verdict (no integration sends anything), restarting after a crash."""
    h = Harness(settings_for(tmp_path, None, None), ManualClock(start=clock.now), crash=crash)
    h.publish(verdicts)
    for _ in range(5):
        try:
            h.consume(batch_max=3)
            return h
        except Crash:
            h.restart()
    raise AssertionError("kept crashing")


# --------------------------------------------------------------------------- one transaction


def _row(incident_id: str) -> IncidentRow:
    return IncidentRow(incident_id, "invoice", "drift", "open", "warning", T0, None, {}, 2, T0, 1)


def test_a_reader_never_sees_a_batch_without_its_offsets(tmp_path: Path, store: Store) -> None:
    """While a batch is written but not committed, another connection (the `incidents`
    command, a restart) sees the state before it: neither its offsets nor its outbox."""
    seen: list[tuple[dict[tuple[str, int], int], int]] = []

    def look() -> None:
        other = Store(tmp_path, create=False)  # reads only: no write lock to wait for
        try:
            seen.append((other.restore().offsets, len(other.outbox_rows())))
        finally:
            other.close()

    write = BatchWrite(
        now_ms=1,
        offsets={("verdicts", 0): 7},
        verdict_ids=["v1"],
        incidents=[_row("i1")],
        outbox=[NewEntry("i1", 1, "slack", "open", "opened", {}, 1)],
    )
    store.commit_batch(write, keep_verdict_ids=10, before_commit=look)
    assert seen == [({}, 0)]
    look()
    assert seen[-1] == ({("verdicts", 0): 7}, 1)


def test_a_crash_inside_the_commit_leaves_neither_offsets_nor_decisions(
    tmp_path: Path, store: Store
) -> None:

    def die() -> None:
        raise Crash

    write = BatchWrite(
        now_ms=1,
        offsets={("verdicts", 0): 7},
        verdict_ids=["v1"],
        incidents=[_row("i1")],
        outbox=[NewEntry("i1", 1, "slack", "open", "opened", {}, 1)],
    )
    with pytest.raises(Crash):
        store.commit_batch(write, keep_verdict_ids=10, before_commit=die)
    again = Store(tmp_path)
    assert again.restore().offsets == {}
    assert again.outbox_rows() == []
    assert again.seen_verdicts(["v1"]) == set()
    assert again.incident("i1") is None


@pytest.mark.parametrize("crash", ["batch_in_commit@1", "batch_in_commit@2", "batch_in_commit@4"])
def test_a_batch_cut_off_inside_its_commit_is_decided_again_exactly_once(
    tmp_path: Path, clock: ManualClock, crash: str
) -> None:
    verdicts = lifecycle("invoice") + lifecycle("report", first_minute=1)
    clean = decide(tmp_path / "clean", clock, verdicts, None)
    crashed = decide(tmp_path / "crashed", clock, verdicts, crash)
    assert crashed.crashes == 1
    assert outbox(crashed) == outbox(clean)
    assert len(outbox(clean)) == 2 * 3  # per incident, drift events: open, escalate, resolve
    assert crashed.engine.offsets == clean.engine.offsets
    processed = "anchorwatch_alerting_verdicts_total"
    assert crashed.value(processed, outcome="replay") == 0  # decided again, not skipped


@pytest.mark.parametrize("crash", ["done_in_commit:slack@1", "done_in_commit:slack@2"])
def test_a_delivery_cut_off_inside_its_done_commit_is_reconciled_not_repeated(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    crash: str,
) -> None:
    """Slack accepted the message; the transaction marking it done (and, for the parent,
    storing the thread it opened) never committed: the restart finds it in Slack."""
    h = Harness(settings_for(tmp_path, slack, jira), clock, crash=crash)
    h.publish(lifecycle("medical_report"))
    h.run()
    assert h.crashes == 1
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    slack_rows = [r for r in h.store.outbox_rows() if r["integration"] == "slack"]
    assert [r["outcome"] for r in slack_rows].count("reconciled") == 1


# --------------------------------------------------------------------------- replays


def test_verdicts_the_job_sends_again_are_decided_once(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    """The drift job's sink repeats itself after a restart: each window's verdict comes
    again, the same ids, interleaved with new ones. Nothing is decided twice."""
    a = lifecycle("medical_report")
    repeated = [v for i in range(len(a)) for v in (a[i], *a[max(0, i - 2) : i])]
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(repeated)
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    clean = decide(tmp_path / "clean", clock, a, None)
    assert outbox(decide(tmp_path / "again", clock, repeated, None)) == outbox(clean)
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="processed") == len(a)
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="replay") == len(repeated) - len(
        a
    )


def test_replays_after_a_restart_are_recognised_by_the_stored_ids(
    tmp_path: Path, clock: ManualClock
) -> None:
    """After a restart the memory of what was processed comes from the state file: the
    job's repeat of the whole lifecycle opens no second incident and writes nothing."""
    h = Harness(settings_for(tmp_path, None, None), clock)
    h.publish(lifecycle("invoice"))
    h.consume()
    before = outbox(h)
    h.restart()
    h.publish(lifecycle("invoice"))
    h.consume()
    assert outbox(h) == before
    assert len(h.store.list_incidents(open_only=False, limit=10)) == 1
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="replay") == 9


def test_an_old_window_judged_again_under_a_new_id_changes_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A window older than the type's last one (another job version re-judging it) is
    stale: a resolved incident is not reopened by it, an open one not escalated."""
    h = Harness(settings_for(tmp_path, None, None), clock)
    h.publish(lifecycle("invoice"))
    h.consume()
    before = outbox(h)
    h.publish([verdict("invoice", m, 0.99, job_version="j2") for m in range(1, 9)])
    h.consume()
    assert outbox(h) == before
    assert h.store.list_incidents(open_only=True, limit=10) == []
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="stale") == 8
