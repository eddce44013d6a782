"""A Kafka producer for tests that read back by offset or by arrival order."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer


def ordered_producer(bootstrap_servers: str, **config: Any) -> Producer:
    """A producer whose retries cannot reorder a partition: without idempotence librdkafka
    retries a failed batch (a leader not yet elected on a topic created a moment ago) after
    later batches have landed, and the records no longer sit at the offsets they were sent in."""
    return Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
                     "acks": "all", **config})  # fmt: skip
