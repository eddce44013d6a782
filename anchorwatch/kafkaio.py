"""Thin Kafka adapters shared by the CLI, the connectors and the tests."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from anchorwatch.errors import AnchorwatchError
from anchorwatch.settings import KafkaSettings, TopicSettings


class KafkaIOError(AnchorwatchError):
    """Kafka could not be reached or refused what was asked."""


class KafkaAccessError(KafkaIOError):
    """The broker refused the client's credentials, or the client did not trust the broker's
    certificate: a setting is wrong, and retrying will not help."""


_LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

#: Room left, under a topic's max.message.bytes, for Kafka's framing of the record batch
#: around one record (batch and record headers) and for lz4's worst case on incompressible
#: bytes (1/255 of the size: 64 KiB for 16 MiB).
FRAMING_BYTES: Final = 128 * 1024


def record_limit(topics: TopicSettings) -> int:
    """The largest record (key + value) any producer of ours writes: the ingest service
    (librdkafka) and the drift job's Kafka sinks (Java). The chain: contract maximum <= this
    < the producer's limit (``producer_max_bytes``) <= each topic's max.message.bytes (set
    when topics are created; the ingest service checks it at start)."""
    return topics.max_message_bytes - FRAMING_BYTES


def producer_max_bytes(topics: TopicSettings) -> int:
    """librdkafka's message.max.bytes and the Java producer's max.request.size: both count
    a record's wire overhead (a few dozen bytes) against it, so it stays above the record
    limit."""
    return record_limit(topics) + 1024


def client_config(
    kafka: KafkaSettings, defaults: Mapping[str, Any] | None = None, /, **overrides: Any
) -> dict[str, Any]:
    """librdkafka configuration: bootstrap + our ``defaults`` + the user's client properties
    (which may change those) + ours (which they may not).
    librdkafka's own messages go through Python logging (JSON lines), not raw stderr."""
    return {
        "bootstrap.servers": kafka.bootstrap_servers,
        "logger": _LIBRDKAFKA_LOG,
        **(defaults or {}),
        **kafka.client_properties,
        **overrides,
    }


#: Where the Kafka client properties are set, for error messages.
_ENV = "ANCHORWATCH_KAFKA__CLIENT_PROPERTIES, or client_properties under [kafka] in the file"

#: librdkafka's errors that no retry fixes, and the settings that cause them.
_ACCESS_ERRORS: Final = {
    KafkaError._AUTHENTICATION: (
        "the broker refused the SASL login: check kafka.client_properties.sasl.username, "
        "kafka.client_properties.sasl.password and sasl.mechanism (" + _ENV + ")"
    ),
    KafkaError._SSL: (
        "TLS with the broker failed: check kafka.client_properties.ssl.ca.location ("
        + _ENV
        + "): a PEM file of the CA that signed the broker's certificate, which must also "
        "name the host in kafka.bootstrap_servers"
    ),
}

#: Each metadata request of the access check waits at most this long (seconds), so an
#: error reported in between is seen within it: a refused login takes ~0.3 s, a TLS one less.
_CHECK_STEP_S: Final = 0.5


def check_access(kafka: KafkaSettings, timeout_s: float = 10.0) -> None:
    """At a service's start: raise KafkaAccessError, naming the setting, when the broker
    refuses our SASL credentials or we do not trust its certificate. librdkafka itself
    retries both forever (the service would just never become ready).

    Returns when Kafka answers, when it is down (the caller's own handling of an absent
    Kafka applies), or after ``timeout_s`` without either. Without SASL or TLS in
    ``security.protocol`` there is nothing to check and no request is made."""
    protocol = kafka.client_properties.get("security.protocol", "plaintext").lower()
    if protocol == "plaintext":
        return
    errors: list[KafkaError] = []
    admin = AdminClient(client_config(kafka, error_cb=errors.append))
    deadline = time.monotonic() + timeout_s
    while True:
        step = min(_CHECK_STEP_S, max(deadline - time.monotonic(), 0.01))
        try:
            admin.list_topics(timeout=step)
            return
        except KafkaException:
            pass
        admin.poll(0)  # serves error_cb
        for error in errors:
            if error.code() in _ACCESS_ERRORS:
                # librdkafka's reason names no credential; the setting is ours to name.
                raise KafkaAccessError(
                    f"Kafka at {kafka.bootstrap_servers}: {_ACCESS_ERRORS[error.code()]}. "
                    f"librdkafka: {error.str()}"
                )
        down = any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors)
        if down or time.monotonic() >= deadline:
            return


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


_NO_LEADER_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


def _watermarks(consumer: Consumer, partition: TopicPartition, timeout_s: float) -> Any:
    """The partition's low and high offsets. A topic created a moment ago may not have its
    leaders elected yet (NOT_LEADER_FOR_PARTITION and the like are retriable): asked again
    until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            retriable = code in _NO_LEADER_YET or (
                isinstance(error, KafkaError) and error.retriable()
            )
            if not retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def read_topic(kafka: KafkaSettings, topic: str, *, timeout_s: float = 30) -> Iterator[Message]:
    """Every record currently in ``topic``, from the beginning up to the end offsets seen at
    the start (a bounded read, without joining a consumer group)."""
    consumer = Consumer(
        client_config(
            kafka,
            **{
                "group.id": f"anchorwatch-reader-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "isolation.level": "read_committed",
            },
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            raise KafkaIOError(f"topic {topic}: {info.error if info else 'not found'}")
        ends: dict[int, int] = {}
        assignment = []
        for p in info.partitions:
            low, high = _watermarks(consumer, TopicPartition(topic, p), timeout_s)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        if not assignment:
            return
        consumer.assign(assignment)
        remaining = dict(ends)
        while remaining:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise KafkaIOError(
                    f"topic {topic}: no record within {timeout_s}s, {remaining} left"
                )
            if msg.error():
                raise KafkaIOError(f"topic {topic}: {msg.error()}")
            part, offset = msg.partition(), msg.offset()
            # Both are set on every fetched record; the client's types allow None.
            assert part is not None
            assert offset is not None
            yield Message(part, offset, msg.key(), msg.value(), msg.timestamp()[1])
            # Transaction markers take offsets too: done once the next offset reaches the end.
            if part in remaining and offset + 1 >= remaining[part]:
                del remaining[part]
    except KafkaException as exc:
        raise KafkaIOError(f"reading {topic}: {exc}") from None
    finally:
        consumer.close()
