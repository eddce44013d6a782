"""Publishing baselines to the compacted baselines topic: used by `anchorwatch baseline fit`
and by the alerting service's refits. Kept apart from the Flink fit so the services image,
which has no pyflink, can publish too."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, Message, Producer

from anchorwatch.contracts import Baseline, encode
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import client_config
from anchorwatch.settings import KafkaSettings


class BaselinePublishError(AnchorwatchError):
    """Kafka did not acknowledge every baseline."""


def publish_baselines(
    kafka: KafkaSettings, topic: str, baselines: Iterable[Baseline], *, timeout_s: float = 60
) -> int:
    """Produce each baseline keyed by its doc type (idempotent, acks=all); wait until Kafka
    has acknowledged every one, or raise."""
    producer = Producer(client_config(kafka, **{"enable.idempotence": True, "acks": "all"}))
    errors: list[str] = []
    sent = 0

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(str(err))

    for baseline in baselines:
        producer.produce(topic, encode(baseline), baseline.doc_type.encode(), on_delivery=delivered)
        producer.poll(0)
        sent += 1
    left = producer.flush(timeout_s)
    if left or errors:
        raise BaselinePublishError(
            f"{sent - left - len(errors)} of {sent} baselines acknowledged by Kafka on {topic} "
            f"({left} still queued; errors: {errors[:3]})"
        )
    return sent
