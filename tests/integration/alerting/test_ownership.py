"""Verdict partitions shared by alerting instances (``ownership.py``), against a real Kafka
group and a real PostgreSQL state: each partition owned by one instance at a time, and an
instance paused past its session fenced when it wakes, so it writes nothing more."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pydantic import SecretStr

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.leadership import LostLead, PartitionFenced
from anchorwatch.alerting.ownership import PartitionOwnership
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import BatchWrite, Store
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.postgres import PostgresDatabase
from anchorwatch.stack.processes import free_port
from tests.support.alerting_kafka import load_settings, service_config
from tests.support.alerting_store import row
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

LEASE_S = 2.0
#: The broker's smallest session (group.min.session.timeout.ms); a member that does not
#: poll for longer leaves the group.
SESSION_MS = 6000


class Member:
    """One instance's ownership, polled on a thread of its own until paused or stopped; the
    partitions of the verdicts it read, and the start offsets it was asked for."""

    def __init__(self, settings: AlertingSettings, state: StateLocation, name: str) -> None:
        self.read: dict[int, list[int]] = {}
        self.asked: list[int] = []
        self.released: list[int] = []
        self.ownership = PartitionOwnership(
            settings,
            state,
            on_owned=self._owned,
            on_released=self.released.append,
            holder=name,
            consumer_config={
                "session.timeout.ms": SESSION_MS,
                "max.poll.interval.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
            },
        )
        self.running = threading.Event()
        self.running.set()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _owned(self, partition: int) -> int:
        self.asked.append(partition)
        return 0  # from the start, as a state that has decided nothing yet

    def _loop(self) -> None:
        while not self.stopped.is_set():
            if not self.running.wait(0.1):
                continue  # paused: no poll, no renewal
            for message in self.ownership.poll(0.2):
                offset, partition = message.offset(), message.partition()
                assert offset is not None
                assert partition is not None
                self.read.setdefault(partition, []).append(offset)

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        self.running.set()
        self.thread.join(10)
        self.ownership.close()


@pytest.fixture
def state(tmp_path: Path, postgres_url: PostgresDatabase) -> StateLocation:
    return StateLocation(tmp_path / "state", postgres_url.url, SecretStr(postgres_url.password))


@pytest.fixture
def settings(job_settings: JobSettings, state: StateLocation, tmp_path: Path) -> AlertingSettings:
    config = service_config(job_settings, state.directory, None, None, lease_s=LEASE_S)
    config["alerting"]["group_id"] = f"ownership-{tmp_path.name}"
    return load_settings(config)


@contextmanager
def members(
    settings: AlertingSettings, state: StateLocation, *names: str
) -> Iterator[list[Member]]:
    started = [Member(settings, state, name) for name in names]
    try:
        yield started
    finally:
        for member in started:
            member.stop()


def wait_shared(a: Member, b: Member, everything: set[int]) -> None:
    """Until each of ``a`` and ``b`` owns some partitions and together they own them all."""
    wait_until(
        lambda: bool(a.ownership.owned) and bool(b.ownership.owned)
        and set(a.ownership.owned) | set(b.ownership.owned) == everything,
        60,
        "a and b share the partitions",
    )  # fmt: skip


def partitions_of(settings: AlertingSettings) -> set[int]:
    return set(range(settings.topics.partitions))


def produce(settings: AlertingSettings, per_partition: int) -> None:
    producer = Producer(client_config(settings.kafka, **{"enable.idempotence": True}))
    for partition in partitions_of(settings):
        for n in range(per_partition):
            producer.produce(
                settings.topics.verdicts, f"{partition}-{n}".encode(), partition=partition
            )
    assert producer.flush(30) == 0


def test_members_split_the_partitions_and_each_reads_only_its_own(
    settings: AlertingSettings, state: StateLocation
) -> None:
    everything = partitions_of(settings)
    assert len(everything) >= 2
    produce(settings, per_partition=5)
    with members(settings, state, "a") as (a,):
        wait_until(lambda: set(a.ownership.owned) == everything, 60, "a owns every partition")
        with members(settings, state, "b") as (b,):
            wait_shared(a, b, everything)
            assert not set(a.ownership.owned) & set(b.ownership.owned)
            # A partition moved to b was given up by a first, then read by b from the
            # offset b's state gave (0 here: every verdict again).
            moved = set(b.ownership.owned)
            assert set(a.released) == moved
            wait_until(
                lambda: all(len(b.read.get(p, [])) == 5 for p in moved), 30, "b read its partitions"
            )
            assert {p: b.read[p] for p in moved} == {p: list(range(5)) for p in moved}
            # Each lease is held by its owner, on the database's word.
            for member in (a, b):
                for lease in member.ownership.owned.values():
                    found = lease.holder_now()
                    assert found is not None
                    assert found[:2] == (member.ownership.holder, lease.epoch)
    assert a.read.keys() <= everything


def test_a_member_paused_past_its_session_is_fenced_when_it_wakes(
    settings: AlertingSettings, state: StateLocation
) -> None:
    everything = partitions_of(settings)
    with members(settings, state, "a", "b") as (a, b):
        wait_shared(a, b, everything)
        held = dict(a.ownership.owned)
        epochs = {p: lease.epoch for p, lease in held.items()}
        store = {p: Store(state, fence=a.ownership.fence(p)) for p in held}
        a.running.clear()  # SIGSTOP, as far as the group and the leases can tell
        paused = time.monotonic()
        wait_until(lambda: set(b.ownership.owned) == everything, 60, "b owns every partition")
        # b waited out a's session and then a's leases, and took them with new epochs.
        assert time.monotonic() - paused >= LEASE_S
        for p in held:
            assert (b.ownership.owned[p].epoch or 0) > (epochs[p] or 0)
        # a wakes up: before it has polled, it still thinks it owns its partitions, and
        # every write it makes for one of them is refused, whole.
        assert set(a.ownership.owned) == set(held)
        for p, s in store.items():
            with pytest.raises(LostLead, match="no longer leads"):
                s.commit_batch(BatchWrite(now_ms=1, incidents=[row(f"i{p}")]), keep_verdict_ids=10)
            s.close()
        # Its first poll tells it the partitions are lost: it gives them up (it may be
        # given some back by the next rebalance, under new leases).
        a.running.set()
        wait_until(lambda: set(a.released) >= set(held), 30, "a gives its partitions up")
        a.stop()
        # Stopped, it owns nothing: a write for any partition is refused.
        s = Store(state, fence=a.ownership.fence(next(iter(held))))
        with pytest.raises(LostLead, match="does not own"):
            s.commit_batch(BatchWrite(now_ms=2, incidents=[row("late")]), keep_verdict_ids=10)
        s.close()
        checked = Store(state)
        try:
            ids = {r.row.incident_id for r in checked.list_incidents(open_only=False, limit=100)}
        finally:
            checked.close()
        assert not ids  # nothing a paused member tried to write landed


def test_a_batch_for_partitions_not_all_owned_is_refused_whole(
    settings: AlertingSettings, state: StateLocation
) -> None:
    """The store's guard (the work split): a batch fenced by every partition it writes for."""
    with members(settings, state, "a") as (a,):
        wait_until(lambda: bool(a.ownership.owned), 60, "a to own its partitions")
        owned = sorted(a.ownership.owned)
        store = Store(state, guard=a.ownership)
        try:
            with pytest.raises(PartitionFenced, match="does not own verdict partition 99"):
                store.commit_batch(
                    BatchWrite(now_ms=1, incidents=[row("refused")], partitions={owned[0], 99}),
                    keep_verdict_ids=0,
                )
            store.commit_batch(
                BatchWrite(now_ms=1, incidents=[row("kept")], partitions={owned[0]}),
                keep_verdict_ids=0,
            )
            ids = {r.row.incident_id for r in store.list_incidents(open_only=False, limit=10)}
            assert ids == {"kept"}
            assert a.ownership.owned_now() == frozenset(owned)
        finally:
            store.close()


def test_the_readiness_probe_sees_a_cluster_that_does_not_answer(
    settings: AlertingSettings, state: StateLocation
) -> None:
    """The group's consumer reports a broker-wide error (``kafka_ok`` false, with its text);
    a member on a live cluster stays true."""
    with members(settings, state, "live") as (live,):
        wait_until(lambda: bool(live.ownership.owned), 60, "the live member to own partitions")
        assert live.ownership.kafka_ok
        assert live.ownership.last_error is None
    unreachable = f"127.0.0.1:{free_port()}"
    cut = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"bootstrap_servers": unreachable})}
    )
    with members(cut, state, "cut") as (member,):
        wait_until(lambda: not member.ownership.kafka_ok, 60, "the error to be reported")
        assert member.ownership.last_error is not None
        assert not member.ownership.owned
