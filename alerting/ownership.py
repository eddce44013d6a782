"""Which verdict partitions an alerting instance owns when several instances share the work
on one PostgreSQL state (``alerting.state_url``).

The instances join one Kafka consumer group on the verdicts topic (``alerting.group_id``).
Its assignment says which partitions each should own; ``cooperative-sticky``, so a member
joining or leaving moves only the partitions that must move. The drift job keys verdicts
by doc type, so a partition's owner owns its types.

Kafka's word alone is not ownership: a member paused past its session (SIGSTOP, a long GC,
a partition of the network) still believes it holds its partitions when it wakes, until
its next poll tells it otherwise. So each partition is also a lease in the shared state
(``leadership.Lease``, row ``verdicts-<partition>``): the instance owns a partition from
taking its lease until it releases it (revoked) or loses it, and each write made for the
partition is fenced by that lease's epoch (``fence``). A partition assigned while another
instance still holds its lease (crashed or paused, so it never released it) is *pending*,
its fetching paused, until that lease has expired.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from anchorwatch.alerting.consumers import BROKER_WIDE_ERRORS, PREFETCH_KIB
from anchorwatch.alerting.database import DATABASE_ERRORS, Database, StateLocation
from anchorwatch.alerting.leadership import (
    Lease,
    LostLead,
    PartitionFenced,
    create_lease_table,
    instance_name,
)
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA
from anchorwatch.kafkaio import client_config

log = logging.getLogger(__name__)


def lease_name(partition: int) -> str:
    return f"verdicts-{partition}"


class PartitionOwnership:
    """This instance's verdict partitions: group membership, a lease per partition, and the
    verdicts of the partitions it owns (``poll``). One thread (the consumer's) calls it.

    ``on_owned(partition)`` is called when a partition's lease has been taken, and returns
    the offset to read it from (the state's, or None for the group's position);
    ``on_released(partition)`` when it is given up or lost, before its lease is released,
    so that nothing more is decided for it."""

    def __init__(
        self,
        settings: AlertingSettings,
        location: StateLocation,
        *,
        on_owned: Callable[[int], int | None] = lambda partition: None,
        on_released: Callable[[int], None] = lambda partition: None,
        holder: str | None = None,
        consumer_config: dict[str, Any] | None = None,
    ) -> None:
        a = settings.alerting
        self.topic = settings.topics.verdicts
        self.holder = holder or instance_name()
        self.location = location
        self.lease_s = a.lease_s
        self.owned: dict[int, Lease] = {}
        self._owned_now: frozenset[int] = frozenset()  # read by other threads
        self.pending: set[int] = set()
        self._on_owned = on_owned
        self._on_released = on_released
        db = Database(location, filename=FILENAME, schema=PG_SCHEMA)
        create_lease_table(db)
        self._shared = (db, threading.Lock())
        self._renewed = time.monotonic()
        self._assigned_now = False
        #: For the readiness probe: False from a broker-wide error (all brokers down, the
        #: transport) until the cluster answers again; ``last_error``: its text.
        self.kafka_ok = True
        self.last_error: str | None = None
        self._consumer = Consumer(
            client_config(
                settings.kafka,
                {
                    "queued.max.messages.kbytes": PREFETCH_KIB,
                    # A member that died is noticed within about a lease, as its leases end.
                    "session.timeout.ms": int(min(max(a.lease_s, 6.0), 45.0) * 1000),
                },
                **{
                    "group.id": a.group_id,
                    "partition.assignment.strategy": "cooperative-sticky",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": a.start_offset,
                    "isolation.level": "read_committed",
                    "error_cb": self._on_error,
                    **(consumer_config or {}),
                },
            )
        )
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._revoked,
        )

    def _on_error(self, error: KafkaError) -> None:
        self.last_error = str(error)[:300]
        if error.code() in BROKER_WIDE_ERRORS:
            self.kafka_ok = False
        log.warning("verdict consumer error", extra={"error": self.last_error})

    def _check_kafka(self) -> None:
        """After a broker-wide error: whether the cluster answers again (a metadata request;
        an idle consumer has no other sign of it)."""
        try:
            self._consumer.list_topics(self.topic, timeout=min(self.lease_s, 5.0))
        except KafkaException as exc:
            self.last_error = str(exc)[:300]
            return
        self.kafka_ok = True

    # ------------------------------------------------------------------ the group's word

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        # Nothing is fetched for a partition before its lease is this instance's. The
        # leases are taken in poll(), outside the callback, where the assignment can be
        # repositioned.
        consumer.pause(partitions)
        self.pending.update(tp.partition for tp in partitions)
        self._assigned_now = True

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Revoked, or lost (Kafka moved them already: this member missed its session). A
        release ends a lease only while this instance still holds it, so it cannot end a
        new owner's: both cases give the partitions up alike."""
        for tp in partitions:
            self._give_up(tp.partition, release=True)
        consumer.incremental_unassign(partitions)

    # ------------------------------------------------------------------ leases

    def _take_pending(self) -> None:
        for partition in sorted(self.pending):
            lease = Lease(
                self.location,
                lease_s=self.lease_s,
                holder=self.holder,
                name=lease_name(partition),
                shared=self._shared,
            )
            try:
                taken = lease.try_acquire()
            except DATABASE_ERRORS as exc:
                log.warning("alerting state unreachable", extra={"error": str(exc)[:300]})
                return
            if not taken:
                continue
            self.pending.discard(partition)
            self.owned[partition] = lease
            self._owned_now = frozenset(self.owned)
            start = self._on_owned(partition)
            if start is not None:
                # At the state's offset: a seek is refused until the partition's fetcher
                # has started. The pause outlives the reassignment.
                self._assign_at(partition, start)
            self._consumer.resume([TopicPartition(self.topic, partition)])
            log.info(
                "verdict partition owned",
                extra={"partition": partition, "epoch": lease.epoch, "holder": self.holder},
            )

    def _give_up(self, partition: int, *, release: bool) -> None:
        self.pending.discard(partition)
        lease = self.owned.pop(partition, None)
        if lease is None:
            return
        self._owned_now = frozenset(self.owned)
        self._on_released(partition)
        if release:
            lease.release()
        log.info("verdict partition given up", extra={"partition": partition})

    def renew(self) -> list[int]:
        """Renews the owned partitions' leases; the partitions lost (another instance took
        them while this one could not renew), given up here."""
        lost = []
        for partition, lease in list(self.owned.items()):
            try:
                if lease.renew():
                    continue
            except DATABASE_ERRORS as exc:
                log.warning("alerting state unreachable", extra={"error": str(exc)[:300]})
                continue
            lost.append(partition)
            self._give_up(partition, release=False)
            self._consumer.pause([TopicPartition(self.topic, partition)])
            # Still assigned by the group: taken again if that lease ends unrenewed.
            self.pending.add(partition)
        return lost

    def fence(self, partition: int) -> Callable[[Database], None]:
        """The fence of a write made for ``partition``: ``LostLead`` inside the write's
        transaction unless this instance still holds the partition's lease."""
        lease = self.owned.get(partition)
        if lease is not None:
            return lease.fence

        def refuse(db: Database) -> None:
            raise PartitionFenced(
                f"this instance ({self.holder}) does not own verdict partition {partition}"
            )

        return refuse

    def fence_partitions(self, db: Database, partitions: Collection[int]) -> None:
        """The fence of a write made for several partitions (``store.PartitionGuard``):
        ``PartitionFenced`` unless this instance holds every one's lease."""
        for partition in sorted(partitions):
            try:
                self.fence(partition)(db)
            except PartitionFenced:
                raise
            except LostLead as exc:
                raise PartitionFenced(str(exc)) from None

    def owned_now(self) -> frozenset[int]:
        """The partitions owned now (any thread may ask)."""
        return self._owned_now

    # ------------------------------------------------------------------ the loop

    def poll(self, timeout_s: float, max_messages: int = 500) -> list[Message]:
        """Verdicts of the owned partitions (the group's callbacks run in here). Renews the
        leases every third of ``lease_s`` and takes pending ones whose lease has ended."""
        if time.monotonic() - self._renewed >= self.lease_s / 3:
            self.renew()
            self._renewed = time.monotonic()
            self._take_pending()
            if not self.kafka_ok:
                self._check_kafka()
        messages = self._consumer.consume(max_messages, timeout_s)
        if self._assigned_now:
            # Just assigned: taken now if free; else retried at each renewal.
            self._assigned_now = False
            self._take_pending()
        out = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("verdict consumer", extra={"error": str(error)[:300]})
                continue
            if message.partition() in self.owned:
                out.append(message)
        return out

    def rewind(self, starts: dict[int, int]) -> None:
        """Reads the owned ones of these partitions again from these offsets (a batch that
        was not committed)."""
        for partition, offset in sorted(starts.items()):
            if partition not in self.owned:
                continue  # given up: its next owner starts from the state's offset
            try:
                self._consumer.seek(TopicPartition(self.topic, partition, offset))
            except KafkaException as exc:
                # Not fetching yet: assigned anew at the offset, as when it is taken.
                log.info("verdict partition re-assigned", extra={"error": str(exc)[:300]})
                self._assign_at(partition, offset)
            log.info("verdict partition read again", extra={"partition": partition, "from": offset})

    def _assign_at(self, partition: int, offset: int) -> None:
        """The partition assigned anew, to be read from ``offset``."""
        self._consumer.incremental_unassign([TopicPartition(self.topic, partition)])
        self._consumer.incremental_assign([TopicPartition(self.topic, partition, offset)])

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        """The owned partitions' next offsets, committed to the group (lag monitoring only:
        the state holds the offsets the work resumes from)."""
        tps = [
            TopicPartition(t, p, o)
            for (t, p), o in offsets.items()
            if t == self.topic and p in self.owned
        ]
        if not tps:
            return
        try:
            self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            log.warning("offset commit to kafka failed", extra={"error": str(exc)[:300]})

    def close(self) -> None:
        """Leaves the group and releases every lease (a clean stop: the partitions move at
        once, not after their leases expire)."""
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.warning("verdict consumer not closed", extra={"error": str(exc)[:300]})
        for partition in list(self.owned):
            self._give_up(partition, release=True)
        db, guard = self._shared
        with guard:
            db.close()
