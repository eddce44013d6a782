"""The service's Kafka consumers: the verdicts (explicitly assigned, positioned from the
offsets the state holds), the compacted baselines topic (read from the beginning at every
start and kept current), and the recent verdicts a restart reads back for refits.

Partitions are assigned explicitly (all partitions of the topic, from the stored offsets)
rather than through group rebalancing: the state is local to this process, so a second
member of a group would take partitions without their state, and a restart after
``kill -9`` would wait for the dead member's session to time out. Offsets are committed to
the group only for lag monitoring; the service resumes from its own state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from anchorwatch.alerting.engine import RawMessage
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.contracts import (
    Baseline,
    ContractError,
    WindowAggregate,
    decode_baseline,
    decode_verdict,
)
from anchorwatch.kafkaio import client_config

log = logging.getLogger(__name__)


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int] | None:
    """The topic's partitions; None when it does not exist (yet)."""
    info = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if info is None or info.error is not None:
        return None
    return sorted(info.partitions)


def raw_message(m: Message) -> RawMessage:
    """A fetched verdict record, as the engine takes it."""
    partition, offset, topic = m.partition(), m.offset(), m.topic()
    assert partition is not None
    assert offset is not None
    assert topic is not None
    kind, ts = m.timestamp()
    stamp = ts if kind != TIMESTAMP_NOT_AVAILABLE and ts > 0 else None
    return RawMessage(topic, partition, offset, m.value(), stamp)


#: The verdicts a consumer fetches ahead of the engine, at most (KiB): thousands of verdicts,
#: many batches ahead.
PREFETCH_KIB: Final = 8192


def verdict_consumer_config(
    settings: AlertingSettings, on_error: Callable[[KafkaError], None]
) -> dict[str, Any]:
    """The verdict consumer's librdkafka settings. librdkafka prefetches up to 64 MiB per
    consumer by default: with a backlog, a third of the service's memory at 10,000 types.
    Ours is PREFETCH_KIB unless the user's client_properties set it."""
    a = settings.alerting
    return client_config(
        settings.kafka,
        {"queued.max.messages.kbytes": PREFETCH_KIB},
        **{
            "group.id": a.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": a.start_offset,
            "isolation.level": "read_committed",
            "error_cb": on_error,
        },
    )


#: Consumer errors that say the cluster is out of reach (the readiness probe's ``kafka``).
BROKER_WIDE_ERRORS: Final = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT)


class VerdictConsumer:
    """Explicitly assigned verdict partitions, positioned from the stored offsets."""

    def __init__(self, settings: AlertingSettings, stored: dict[tuple[str, int], int]) -> None:
        self.topic = settings.topics.verdicts
        a = settings.alerting
        self._start = OFFSET_BEGINNING if a.start_offset == "earliest" else OFFSET_END
        self._stored = {p: o for (t, p), o in stored.items() if t == self.topic}
        self.assigned: set[int] = set()
        self.kafka_ok = False
        self.last_error: str | None = None
        self._consumer = Consumer(verdict_consumer_config(settings, self._on_error))

    def _on_error(self, error: KafkaError) -> None:
        self.last_error = str(error)
        if error.code() in BROKER_WIDE_ERRORS:
            self.kafka_ok = False
        log.warning("kafka consumer error", extra={"error": str(error)})

    def refresh(self) -> None:
        """Assign partitions not assigned yet (at start, and when the topic grows)."""
        try:
            partitions = _partitions(self._consumer, self.topic, 5.0)
        except KafkaException as exc:
            self.kafka_ok, self.last_error = False, str(exc)
            return
        self.kafka_ok = True
        if partitions is None:
            self.last_error = f"topic {self.topic} does not exist"
            log.warning("verdicts topic not found", extra={"topic": self.topic})
            return
        new = [p for p in partitions if p not in self.assigned]
        if not new:
            return
        unknown = [TopicPartition(self.topic, p) for p in new if p not in self._stored]
        committed: dict[int, int] = {}
        if unknown:
            try:
                for tp in self._consumer.committed(unknown, timeout=10):
                    if tp.offset >= 0:
                        committed[tp.partition] = tp.offset
            except KafkaException as exc:
                self.kafka_ok, self.last_error = False, str(exc)
                return
        assignment = [
            TopicPartition(self.topic, p, self._stored.get(p, committed.get(p, self._start)))
            for p in new
        ]
        self._consumer.incremental_assign(assignment)
        self.assigned.update(new)
        log.info(
            "verdict partitions assigned",
            extra={
                "topic": self.topic,
                "offsets": {str(tp.partition): tp.offset for tp in assignment},
            },
        )

    def poll(self, max_messages: int, timeout_s: float) -> list[RawMessage]:
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        batch = [first]
        if max_messages > 1:
            batch += self._consumer.consume(max_messages - 1, timeout=0)
        out = []
        for m in batch:
            if (error := m.error()) is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.last_error = str(error)
                    log.warning("kafka consume error", extra={"error": str(error)})
                continue
            out.append(raw_message(m))
        if out:
            self.kafka_ok = True
        return out

    def commit(self, offsets: dict[tuple[str, int], int], *, wait: bool = False) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if t == self.topic]
        if not tps:
            return
        try:
            if wait:
                self._consumer.commit(offsets=tps, asynchronous=False)
            else:
                self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:  # only lag monitoring depends on it
            log.warning("offset commit to kafka failed", extra={"error": str(exc)})

    def close(self) -> None:
        self._consumer.close()


class BaselineConsumer:
    """The compacted baselines topic, read from the beginning at every start."""

    def __init__(self, settings: AlertingSettings, on_invalid: Callable[[], None]) -> None:
        self.topic = settings.topics.baselines
        self._on_invalid = on_invalid
        self._consumer = Consumer(
            client_config(
                settings.kafka,
                **{
                    "group.id": f"{settings.alerting.group_id}-baselines",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self._ends: dict[int, int] | None = None  # high watermarks seen at start
        self._next: dict[int, int] = {}

    @property
    def caught_up(self) -> bool:
        return self._ends is not None and all(
            self._next.get(p, 0) >= end for p, end in self._ends.items()
        )

    def start(self) -> bool:
        """Assign every partition from the beginning; False if Kafka did not answer."""
        if self._ends is not None:
            return True
        try:
            partitions = _partitions(self._consumer, self.topic, 5.0)
            if partitions is None:
                log.warning(
                    "baselines topic not found: windows are judged without pooled evidence",
                    extra={"topic": self.topic},
                )
                self._ends = {}
                return True
            ends = {}
            for p in partitions:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=5.0
                )
                ends[p] = high
                self._next[p] = low
        except KafkaException as exc:
            log.warning("baselines not readable yet", extra={"error": str(exc)})
            return False
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
        self._ends = ends
        return True

    def poll(self, timeout_s: float = 0.0, max_messages: int = 1000) -> list[Baseline]:
        if self._ends is None and not self.start():
            return []
        out = []
        for m in self._consumer.consume(max_messages, timeout=timeout_s):
            if m.error() is not None:
                continue
            partition, offset = m.partition(), m.offset()
            assert partition is not None
            assert offset is not None
            self._next[partition] = offset + 1
            try:
                out.append(decode_baseline(m.value() or b""))
            except ContractError as exc:
                log.error("invalid baseline skipped", extra={"error": str(exc)[:1000]})
                self._on_invalid()
        if not self.caught_up and self._ends:
            # The position also moves past records a consumer never sees (transaction
            # markers), which the last offset consumed would wait for in vain.
            tps = [TopicPartition(self.topic, p) for p in self._ends]
            for tp in self._consumer.position(tps):
                if tp.offset >= 0:
                    self._next[tp.partition] = max(self._next.get(tp.partition, 0), tp.offset)
        return out

    def close(self) -> None:
        self._consumer.close()


def read_recent_windows(
    settings: AlertingSettings, since_ms: int, add: Callable[[WindowAggregate], None]
) -> int:
    """The windows of the verdicts produced since ``since_ms``, each handed to ``add``
    (bounded: from the offsets of records produced since then to the end offsets at start,
    and five minutes at most). Returns how many were read."""
    consumer = Consumer(
        client_config(
            settings.kafka,
            **{
                "group.id": f"{settings.alerting.group_id}-refit",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    topic = settings.topics.verdicts
    read = 0
    try:
        partitions = _partitions(consumer, topic, 10.0)
        if partitions is None:
            return 0
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, p, since_ms) for p in partitions], timeout=10.0
        )
        ends: dict[int, int] = {}
        assignment = []
        for tp in starts:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), 10.0)
            # offset -1: nothing produced since since_ms on that partition.
            if 0 <= tp.offset < high:
                ends[tp.partition] = high
                assignment.append(TopicPartition(topic, tp.partition, tp.offset))
        consumer.assign(assignment)
        deadline = time.monotonic() + 300
        while ends and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                if m.error() is not None or m.partition() not in ends:
                    continue
                try:
                    add(decode_verdict(m.value() or b"").window)
                    read += 1
                except ContractError:
                    continue  # counted when the engine meets it
            # The position also moves past transaction markers (the drift job writes
            # transactionally), which no record's offset would reach.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        if ends:
            log.warning(
                "refit history read back in part: reading took too long",
                extra={"partitions": sorted(ends)},
            )
    except KafkaException as exc:
        log.warning("refit history not read back", extra={"error": str(exc)})
    finally:
        consumer.close()
    return read


class VerdictSource(Protocol):
    """Where the service's verdicts come from: a ``VerdictConsumer``, or the partitions of an
    instance that shares the work (``split_work.SplitWork``)."""

    @property
    def kafka_ok(self) -> bool: ...

    @property
    def last_error(self) -> str | None: ...

    def commit(self, offsets: dict[tuple[str, int], int], *, wait: bool = False) -> None: ...

    def close(self) -> None: ...


def close_consumers(
    verdicts: VerdictSource | None,
    baselines: BaselineConsumer | None,
    offsets: dict[tuple[str, int], int] | None,
    deadline: float,
) -> bool:
    """Commit ``offsets`` (None: none) and close the consumers, on a helper thread given
    until ``deadline``: librdkafka may block far longer while the brokers are gone. True
    when it finished."""

    def close() -> None:
        try:
            if verdicts is not None:
                if offsets is not None and verdicts.kafka_ok:
                    verdicts.commit(offsets, wait=True)
                verdicts.close()
            if baselines is not None:
                baselines.close()
        except Exception as exc:  # lag monitoring only: the state holds the offsets
            log.warning("kafka clients not closed cleanly", extra={"error": str(exc)})

    closer = threading.Thread(target=close, name="alerting-kafka-close", daemon=True)
    closer.start()
    closer.join(timeout=max(0.0, deadline - time.monotonic()))
    if closer.is_alive():
        log.warning(
            "kafka clients not closed in time: left behind",
            extra={"kafka_error": verdicts.last_error if verdicts else None},
        )
        return False
    return True
