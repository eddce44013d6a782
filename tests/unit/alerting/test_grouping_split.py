"""Grouping shared by instances that split the work (``engine_shared.py``): two engines on
one state, one owning verdict partition 0 (the coordinator), one partition 1. Data-quality
incidents of types both own become one group, posted by the coordinator alone; a write that
raced a group decision is refused (``GroupsChanged``) and decided again from the state."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from anchorwatch.alerting.crash import CrashHook, no_crash
from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.group_epoch import GROUP_EPOCH, GroupsChanged
from anchorwatch.alerting.grouping import GROUP_RULE, GROUP_WAIT
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.refit import follow_incidents
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import IncidentRow, Store
from anchorwatch.contracts import Verdict, encode
from tests.support.alerting import LIFECYCLE, T0, dq_verdict
from tests.support.alerting_harness import settings_for

TOPIC = "verdicts"
INTEGRATIONS = ["slack", "jira", "events"]


def partition_of(doc_type: str) -> int:
    return sum(doc_type.encode()) % 2


def types_on(partition: int, n: int) -> list[str]:
    return [t for t in (f"form_{i}" for i in range(40)) if partition_of(t) == partition][:n]


class Instance:
    """An engine of some partitions on the shared state, fed its partitions' verdicts."""

    def __init__(self, settings: AlertingSettings, clock: ManualClock, *partitions: int) -> None:
        self.settings, self.clock, self.partitions = settings, clock, frozenset(partitions)
        self.offsets = dict.fromkeys(partitions, 0)
        self.engine = self._build()

    def _build(self, crash: CrashHook = no_crash) -> Engine:
        return Engine(
            self.settings,
            Store(self.settings.alerting.state_location()),
            ServiceMetrics(CollectorRegistry()),
            INTEGRATIONS,
            clock=self.clock,
            partitions=self.partitions,
            crash=crash,
        )

    def rebuild(self, crash: CrashHook = no_crash) -> None:
        self.engine.close()
        self.engine = self._build(crash)

    def feed(self, verdicts: list[Verdict]) -> None:
        """Its partitions' verdicts among ``verdicts`` (the offsets as if each partition held
        only what this test feeds), in one batch."""
        messages, next_offsets = [], dict(self.offsets)
        for v in verdicts:
            p = partition_of(v.window.doc_type)
            if p in self.partitions:
                messages.append(RawMessage(TOPIC, p, next_offsets[p], encode(v)))
                next_offsets[p] += 1
        if messages:
            self.engine.process(messages, self.clock.ms())
            self.offsets = next_offsets


@pytest.fixture
def settings(tmp_path: Path) -> AlertingSettings:
    # Posting integrations on, never reached: the engine only queues their entries.
    slack = SimpleNamespace(api_url="http://127.0.0.1:9/api/")
    jira = SimpleNamespace(url="http://127.0.0.1:9")
    return settings_for(tmp_path, cast(Any, slack), cast(Any, jira))


def minutes(types: list[str], first: int, last: int) -> list[Verdict]:
    return [
        dq_verdict(t, m, LIFECYCLE[m], 0.6 if LIFECYCLE[m] > 0.85 else 0.0)
        for m in range(first, last)
        for t in sorted(types)
    ]


def rows(store: Store) -> list[IncidentRow]:
    return store.incidents_where("1 = 1")


def posts(store: Store, integration: str) -> list[tuple[str, str]]:
    """(incident id, kind) of each entry queued for ``integration``, in order."""
    return [
        (r["incident_id"], r["kind"])
        for r in store.outbox_rows()
        if r["integration"] == integration
    ]


def two(settings: AlertingSettings) -> tuple[Instance, Instance, ManualClock]:
    clock = ManualClock(T0 / 1000 + 3600)
    return Instance(settings, clock, 0), Instance(settings, clock, 1), clock


def test_types_both_instances_own_become_one_group_posted_once(
    settings: AlertingSettings,
) -> None:
    coordinator, other, clock = two(settings)
    types = types_on(0, 2) + types_on(1, 2)
    hit = minutes(types, 0, 4)  # each type's data-quality incident opens
    coordinator.feed(hit)
    other.feed(hit)
    store = coordinator.engine.store
    waiting = [r for r in rows(store) if r.held_by == GROUP_WAIT]
    assert sorted(r.doc_type for r in waiting) == sorted(types)

    clock.now += 11  # the group wait is over
    assert other.engine.release_held(clock.ms()) == 0  # a cluster of 4: not its to decide
    assert coordinator.engine.release_held(clock.ms()) == 4
    entries = len(store.outbox_rows())
    clock.now += 5
    coordinator.engine.release_held(clock.ms())  # the other's members: listed, not joined again
    assert len(store.outbox_rows()) == entries
    (group,) = [r for r in rows(store) if r.rule == GROUP_RULE]
    members = group.record["members"]
    assert sorted(m["doc_type"] for m in members.values()) == sorted(types)
    # The coordinator made its own rows members; the other's wait until it syncs.
    by_type = {r.doc_type: r for r in rows(store) if r.rule != GROUP_RULE}
    assert {t for t in types if by_type[t].group_id == group.incident_id} == set(types[:2])
    other.engine.release_held(clock.ms())
    by_type = {r.doc_type: r for r in rows(store) if r.rule != GROUP_RULE}
    assert all(by_type[t].group_id == group.incident_id for t in types)
    assert all(by_type[t].held_by is None for t in types)

    # A member's progress alone (its peak) decides nothing: no check, the epoch stays.
    epoch = store.meta_get(GROUP_EPOCH)
    other.feed(minutes(types, 4, 5))
    assert store.meta_get(GROUP_EPOCH) == epoch
    coordinator.feed(minutes(types, 4, len(LIFECYCLE)))
    other.feed(minutes(types, 5, len(LIFECYCLE)))
    for _ in range(2):
        coordinator.engine.release_held(clock.ms())
    for integration in ("slack", "jira"):
        queued = posts(store, integration)
        # Only the group is posted for people: opened once, resolved once, nothing of a member.
        assert {i for i, _ in queued} == {group.incident_id}
        kinds = [k for _, k in queued]
        assert (kinds.count("opened"), kinds.count("resolved")) == (1, 1)
        assert (kinds[0], kinds[-1]) == ("opened", "resolved")
    events = posts(store, "events")
    assert {i for i, _ in events} == {r.incident_id for r in by_type.values()}
    assert [r.state for r in rows(store) if r.rule == GROUP_RULE] == ["resolved"]


def test_a_small_cluster_across_instances_posts_each_on_its_own(
    settings: AlertingSettings,
) -> None:
    coordinator, other, clock = two(settings)
    types = types_on(0, 1) + types_on(1, 1)  # two: below min_types 3
    hit = minutes(types, 0, 4)
    coordinator.feed(hit)
    other.feed(hit)
    clock.now += 11
    assert other.engine.release_held(clock.ms()) == 1
    assert coordinator.engine.release_held(clock.ms()) == 1
    store = coordinator.engine.store
    assert not [r for r in rows(store) if r.rule == GROUP_RULE]
    opened = [i for i, k in posts(store, "slack") if k == "opened"]
    assert sorted(opened) == sorted(r.incident_id for r in rows(store))


def test_a_write_that_raced_a_group_decision_is_refused_and_decided_again(
    settings: AlertingSettings,
) -> None:
    """The other instance decides a batch that resolves its waiting incidents on their own;
    the coordinator groups them before that batch commits. The batch is refused; decided
    again from the state, the incidents resolve as members of the group."""
    coordinator, other, clock = two(settings)
    types = types_on(0, 1) + types_on(1, 2)
    hit = minutes(types, 0, 4)
    coordinator.feed(hit)
    other.feed(hit)
    clock.now += 11
    store = coordinator.engine.store
    epoch = store.meta_get(GROUP_EPOCH)

    def group_meanwhile(point: str, _: str) -> None:
        if point == "batch_before_commit":
            coordinator.engine.release_held(clock.ms())

    other.rebuild(crash=group_meanwhile)
    recovered = [dq_verdict(t, m, 0.5, 0.0) for m in range(4, 12) for t in sorted(types)]
    with pytest.raises(GroupsChanged):
        other.feed(recovered)
    assert store.meta_get(GROUP_EPOCH) != epoch
    (group,) = [r for r in rows(store) if r.rule == GROUP_RULE]
    theirs = [r for r in rows(store) if partition_of(r.doc_type) == 1 and r.rule != GROUP_RULE]
    assert all(r.state == "open" and r.held_by == GROUP_WAIT for r in theirs)  # nothing written

    other.rebuild()
    other.feed(recovered)
    coordinator.feed(recovered)
    coordinator.engine.release_held(clock.ms())
    theirs = [r for r in rows(store) if partition_of(r.doc_type) == 1 and r.rule != GROUP_RULE]
    assert all(r.group_id == group.incident_id and r.state == "resolved" for r in theirs)
    slack = posts(store, "slack")
    assert {i for i, _ in slack} == {group.incident_id}  # no member posted on its own
    assert [k for _, k in slack].count("resolved") == 1


def test_the_next_owner_of_partition_0_finishes_the_group(settings: AlertingSettings) -> None:
    """The coordinator dies with the group open; the other instance takes partition 0 too
    and follows the members from the state: every recovery told, the resolution once."""
    coordinator, other, clock = two(settings)
    types = types_on(0, 2) + types_on(1, 2)
    hit = minutes(types, 0, 4)
    coordinator.feed(hit)
    other.feed(hit)
    clock.now += 11
    coordinator.engine.release_held(clock.ms())
    coordinator.engine.close()

    both = Instance(settings, clock, 0, 1)
    both.offsets = {0: coordinator.offsets[0], 1: other.offsets[1]}
    other.engine.close()
    store = both.engine.store
    (group,) = [r for r in rows(store) if r.rule == GROUP_RULE]
    both.feed(minutes(types, 4, len(LIFECYCLE)))
    both.engine.release_held(clock.ms())
    members = [r for r in rows(store) if r.rule != GROUP_RULE]
    assert all(r.group_id == group.incident_id and r.state == "resolved" for r in members)
    slack = [k for i, k in posts(store, "slack") if i == group.incident_id]
    assert (slack[0], slack[-1], slack.count("resolved")) == ("opened", "resolved", 1)
    assert {i for i, _ in posts(store, "slack")} == {group.incident_id}


class _History:
    """What ``follow_incidents`` applies, recorded."""

    def __init__(self) -> None:
        self.incidents: list[str] = []

    def incident(self, doc_type: str, incident_id: str, **_: object) -> None:
        self.incidents.append(incident_id)

    def flush(self) -> None:
        pass


def test_the_refit_history_follows_the_members_not_the_group(settings: AlertingSettings) -> None:
    """An engine built anew (each rebuild of the work split, each start with refits on)
    applies the state's incidents to the refit history: a group's record has no breach of
    a type, so it is left out (it once stopped the service with a KeyError)."""
    coordinator, other, clock = two(settings)
    types = types_on(0, 2) + types_on(1, 2)
    coordinator.feed(minutes(types, 0, 4))
    other.feed(minutes(types, 0, 4))
    clock.now += 11
    coordinator.engine.release_held(clock.ms())
    store = coordinator.engine.store
    followed = _History()
    follow_incidents(cast(Any, followed), store)
    members = sorted(r.incident_id for r in rows(store) if r.rule != GROUP_RULE)
    assert sorted(followed.incidents) == members
    assert len(members) == len(types)
