"""Validate raw snapshot records and produce them to Kafka; rejects go to the dead-letter topic.

Accepted events are keyed by doc type (one type's events stay in order on one partition)
and produced with an idempotent producer and ``acks=all``. Nothing is counted as delivered
until Kafka has acknowledged it; ``flush`` fails loudly if anything was not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from anchorwatch.connectors.validation import Accepted
from anchorwatch.contracts import ContractError, DeadLetter, SnapshotEvent, decode_snapshot, encode
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import client_config
from anchorwatch.settings import KafkaSettings, TopicSettings


class DeliveryError(AnchorwatchError):
    """Kafka did not acknowledge every record."""


@dataclass
class PublishStats:
    accepted: int = 0
    rejected: int = 0
    delivered: int = 0
    failed: int = 0
    reject_reasons: dict[str, int] = field(default_factory=dict)  # first bad field -> count
    errors: list[str] = field(default_factory=list)  # first few delivery errors


def dead_letter(raw: bytes, error: ContractError, source: str, now_ms: int) -> DeadLetter:
    # Cut to the contract's bounds: a record with thousands of bad fields still gets its
    # dead letter (the raw bytes keep everything).
    return DeadLetter(
        raw=raw.decode("utf-8", errors="replace"),
        reason=_cut(str(error), 2_000),
        field=_cut(error.first_field, 500),
        source=_cut(source, 200),
        rejected_at_ms=now_ms,
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SnapshotPublisher:
    def __init__(
        self,
        kafka: KafkaSettings,
        topics: TopicSettings,
        *,
        source: str,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        self._topics = topics
        self._source = source
        self._clock_ms = clock_ms
        self.stats = PublishStats()
        self._producer = Producer(
            client_config(
                kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 20,
                    "compression.type": "lz4",
                    **(producer_overrides or {}),
                },
            )
        )

    def publish_raw(self, raw: bytes) -> SnapshotEvent | ContractError:
        """Validate one NDJSON line; produce it or its dead letter. Returns what happened."""
        try:
            event = decode_snapshot(raw)
        except ContractError as error:
            self.reject(raw, error)
            return error
        self.publish(event)
        return event

    def publish(self, event: SnapshotEvent) -> None:
        self.stats.accepted += 1
        self._produce(self._topics.snapshots, event.doc_type.encode(), encode(event))

    def publish_record(self, record: Accepted) -> None:
        """Produce an event that is already validated and encoded."""
        self.stats.accepted += 1
        self._produce(self._topics.snapshots, record.doc_type.encode(), record.value)

    def reject(self, raw: bytes, error: ContractError) -> None:
        self.stats.rejected += 1
        reasons = self.stats.reject_reasons
        reasons[error.first_field] = reasons.get(error.first_field, 0) + 1
        letter = dead_letter(raw, error, self._source, self._clock_ms())
        self._produce(self._topics.dead_letter, None, encode(letter))

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=self._on_delivery)
                break
            except BufferError:
                # Local queue full: wait for acknowledgements instead of buffering without bound.
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.stats.delivered += 1
        else:
            self.stats.failed += 1
            if len(self.stats.errors) < 5:
                self.stats.errors.append(str(err))

    def flush(self, timeout_s: float = 60) -> PublishStats:
        """Wait for every acknowledgement; raise DeliveryError if any record is not in Kafka."""
        left = self._producer.flush(timeout_s)
        expected = self.stats.accepted + self.stats.rejected
        if left or self.stats.failed or self.stats.delivered != expected:
            raise DeliveryError(
                f"{self.stats.delivered} of {expected} records acknowledged by Kafka "
                f"({left} still queued, {self.stats.failed} failed: {self.stats.errors})"
            )
        return self.stats
