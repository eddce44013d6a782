"""Validate raw snapshot records and produce them to Kafka; rejects go to the dead-letter topic.

Accepted events are keyed by doc type (one type's events stay in order on one partition)
and produced with an idempotent producer and ``acks=all``. Nothing is counted as delivered
until Kafka has acknowledged it; ``flush`` fails loudly if anything was not.
"""

from __future__ import annotations

import functools
import hashlib
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import annotated_types
import orjson
from confluent_kafka import KafkaError, Message, Producer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from anchorwatch.connectors.validation import Accepted
from anchorwatch.contracts import (
    AnchorSnapshot,
    ContractError,
    DeadLetter,
    SnapshotEvent,
    decode_snapshot,
    encode,
)
from anchorwatch.contracts.breakdown import KINDS, TOP_ANCHORS_PER_EVENT
from anchorwatch.contracts.models import KindFigures, TopAnchor
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import FRAMING_BYTES, client_config, producer_max_bytes, record_limit
from anchorwatch.settings import KafkaSettings, TopicSettings

MAX_MESSAGE_SETTING: Final = "topics.max_message_bytes (ANCHORWATCH_TOPICS__MAX_MESSAGE_BYTES)"


def check_record_limit(topics: TopicSettings) -> None:
    """Raise, naming the setting, when the largest event the contract allows would not fit."""
    need = contract_max_bytes() + FRAMING_BYTES
    if topics.max_message_bytes < need:
        raise AnchorwatchError(
            f"{MAX_MESSAGE_SETTING} is {topics.max_message_bytes}: the snapshot contract "
            f"allows events of up to {contract_max_bytes()} bytes (key included), which "
            f"with {FRAMING_BYTES} bytes of Kafka framing need at least {need}"
        )


# The longest JSON text of a float (orjson): 17 significant digits, a sign, an exponent.
_LONGEST_FLOAT: Final = -1.2345678901234567e-300
_PRINTABLE: Final = r"^[^\x00-\x1f\x7f]+$"


def _worst(model: type[BaseModel]) -> BaseModel:
    """An instance of ``model`` (not validated) whose every field takes the most bytes its
    bounds allow once encoded: an upper bound of the contract's largest record."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        args = typing.get_args(annotation)
        if type(None) in args:
            (annotation,) = (a for a in args if a is not type(None))
        metadata = list(info.metadata)
        if typing.get_origin(annotation) is Annotated:  # `ModelVersion | None`: bounds inside
            annotation, *inner = typing.get_args(annotation)
            metadata += [
                x for m in inner for x in (m.metadata if isinstance(m, FieldInfo) else [m])
            ]
        meta = {type(m): m for m in metadata}
        longest = meta.get(annotated_types.MaxLen)
        if annotation is str:
            if longest is None:
                raise AnchorwatchError(f"{model.__name__}.{name}: unbounded text, no size limit")
            # Printable text: 4-byte UTF-8 at worst; other text: a control character, which
            # JSON writes as 6 bytes (\u0001).
            printable = any(getattr(m, "pattern", None) == _PRINTABLE for m in metadata)
            values[name] = ("\U0001f600" if printable else "\x01") * longest.max_length
        elif annotation is int:
            le, lt = meta.get(annotated_types.Le), meta.get(annotated_types.Lt)
            values[name] = le.le if le else lt.lt - 1 if lt else 2**64 - 1  # orjson's largest
        elif annotation is float:
            values[name] = _LONGEST_FLOAT
        elif typing.get_origin(annotation) is Literal:
            values[name] = max(typing.get_args(annotation), key=lambda v: len(str(v)))
        elif typing.get_origin(annotation) is list and longest is not None:
            (item,) = typing.get_args(annotation)
            values[name] = [_worst(item)] * longest.max_length
        else:
            raise AnchorwatchError(f"{model.__name__}.{name}: cannot bound its size")
    return model.model_construct(**values)


@functools.cache
def contract_max_bytes() -> int:
    """An upper bound of the largest snapshot record the contract allows: the encoded event
    plus its key (the doc type, 4 bytes a character at most)."""
    assert AnchorSnapshot in typing.get_args(SnapshotEvent.model_fields["anchors"].annotation)
    doc_type = next(
        m for m in SnapshotEvent.model_fields["doc_type"].metadata
        if isinstance(m, annotated_types.MaxLen)
    )  # fmt: skip
    # The breakdown's figures are built from the anchors (validated: the worst anchors'
    # unvalidated values would fail), so they are bounded on their own: every kind, each
    # top anchor at its longest.
    worst = _worst(SnapshotEvent).model_dump(
        mode="json", exclude_none=True, exclude={"kinds", "top_anchors"}
    )
    worst["kinds"] = {kind: _worst(KindFigures).model_dump(mode="json") for kind in KINDS}
    worst["top_anchors"] = [_worst(TopAnchor).model_dump(mode="json")] * TOP_ANCHORS_PER_EVENT
    return len(orjson.dumps(worst)) + 4 * doc_type.max_length


class DeliveryError(AnchorwatchError):
    """Kafka did not acknowledge every record."""


@dataclass
class PublishStats:
    accepted: int = 0
    rejected: int = 0
    summaries: int = 0  # of accepted events, on the summaries topic (when it is set)
    delivered: int = 0  # records acknowledged: events, summaries and dead letters
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


def tight(data: bytes) -> bytes:
    """A copy of ``data`` in a buffer of its own size. orjson's output keeps the capacity it
    grew to, many times a dead letter's size, and a request holds thousands of them until
    Kafka acknowledges (figures: docs/benchmarks.md, "Ingest: design figures")."""
    return bytes(memoryview(data))


def dead_letter_value(
    raw: bytes, error: ContractError, source: str, now_ms: int, limit: int
) -> bytes:
    """The encoded dead letter, at most ``limit`` bytes. One too big for Kafka keeps the
    first bytes of ``raw`` that fit, and its reason ends with the original size and the
    sha256 of all of it; a rejected record always has its dead letter, never a retry."""
    value = encode(dead_letter(raw, error, source, now_ms))
    if len(value) <= limit:
        return tight(value)
    digest = hashlib.sha256(raw).hexdigest()
    reason = _cut(str(error), 1_700)
    keep = limit
    while True:
        keep = max(0, min(keep, len(raw)))
        note = f" [raw cut to its first {keep} of {len(raw)} bytes; sha256 of all: {digest}]"
        letter = dead_letter(raw[:keep], error, source, now_ms).model_copy(
            update={"reason": reason + note}
        )
        value = encode(letter)
        if len(value) <= limit or keep == 0:
            return tight(value)
        # JSON may write a byte as up to 6 (\u0001): shrink by the excess, in proportion.
        keep -= max(1, (len(value) - limit) * keep // len(value) + 1)


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
        check_record_limit(topics)
        self._limit = record_limit(topics)
        self._producer = Producer(
            client_config(
                kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 20,
                    "compression.type": "lz4",
                    "message.max.bytes": producer_max_bytes(topics),
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
        self.publish_record(Accepted(event.event_id, event.doc_type, encode(event)))

    def publish_record(self, record: Accepted) -> None:
        """Produce an event that is already validated and encoded."""
        key = record.doc_type.encode()
        self.stats.accepted += 1
        self._produce(self._topics.snapshots, key, record.value)
        if self._topics.summaries:
            self.stats.summaries += 1
            self._produce(self._topics.summaries, key, record.summary_record())

    def reject(self, raw: bytes, error: ContractError) -> None:
        self.stats.rejected += 1
        reasons = self.stats.reject_reasons
        reasons[error.first_field] = reasons.get(error.first_field, 0) + 1
        letter = dead_letter_value(raw, error, self._source, self._clock_ms(), self._limit)
        self._produce(self._topics.dead_letter, None, letter)

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
        expected = self.stats.accepted + self.stats.rejected + self.stats.summaries
        if left or self.stats.failed or self.stats.delivered != expected:
            raise DeliveryError(
                f"{self.stats.delivered} of {expected} records acknowledged by Kafka "
                f"({left} still queued, {self.stats.failed} failed: {self.stats.errors})"
            )
        return self.stats
