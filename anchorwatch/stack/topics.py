"""The project's topics, created with their settings."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from anchorwatch.settings import TopicSettings
from anchorwatch.stack.processes import StackError

_WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def topic_specs(topics: TopicSettings) -> list[TopicSpec]:
    n = topics.partitions
    return [
        TopicSpec(topics.snapshots, n, {"retention.ms": str(_WEEK_MS)}),
        # Rejects are evidence: keep them longer than the data they were meant to be.
        TopicSpec(topics.dead_letter, n, {"retention.ms": str(4 * _WEEK_MS)}),
        TopicSpec(topics.windows, n, {"retention.ms": str(8 * _WEEK_MS)}),
        TopicSpec(topics.verdicts, n, {"retention.ms": str(8 * _WEEK_MS)}),
        # One current baseline per doc type, kept forever: compacted, keyed by doc type.
        TopicSpec(
            topics.baselines,
            1,
            {
                "cleanup.policy": "compact",
                "min.cleanable.dirty.ratio": "0.1",
                "segment.ms": str(3600 * 1000),
            },
        ),
        TopicSpec(topics.drift_events, n, {"retention.ms": str(4 * _WEEK_MS)}),
    ]


def ensure_topics(
    admin: AdminClient, topics: TopicSettings, *, timeout_s: float = 30
) -> dict[str, str]:
    """Create the missing topics; returns {topic: "created" | "exists"}."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    specs = topic_specs(topics)
    missing = [s for s in specs if s.name not in existing]
    outcome = {s.name: "exists" for s in specs if s.name in existing}
    if not missing:
        return outcome
    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=topics.replication_factor,
                config=s.config,
            )
            for s in missing
        ],
        operation_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            outcome[name] = "created"
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == 36:  # TOPIC_ALREADY_EXISTS: lost a race
                outcome[name] = "exists"
                continue
            raise StackError(f"creating topic {name} failed: {exc}") from None
    return outcome
