"""The project's topics, created with their settings."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from anchorwatch.settings import TopicSettings
from anchorwatch.stack.processes import StackError

_WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def replication_for(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of the topics on ``brokers`` nodes: three
    copies with two in sync from three nodes on (one node may die and acks=all writes still
    succeed), else a copy on every node and one in sync."""
    factor = min(brokers, 3)
    return factor, min_insync_replicas(factor)


def min_insync_replicas(replication_factor: int) -> int:
    return 2 if replication_factor >= 3 else 1


def topic_specs(topics: TopicSettings) -> list[TopicSpec]:
    n = topics.partitions
    # Every topic takes records up to the configured size, whatever the broker's default,
    # and a write acknowledged by all in-sync replicas (acks=all) is on at least two nodes
    # when there are three copies.
    size = {
        "max.message.bytes": str(topics.max_message_bytes),
        "min.insync.replicas": str(min_insync_replicas(topics.replication_factor)),
    }
    specs = [
        TopicSpec(topics.snapshots, n, {"retention.ms": str(_WEEK_MS)}),
        *(
            [TopicSpec(topics.summaries, n, {"retention.ms": str(_WEEK_MS)})]
            if topics.summaries
            else []
        ),
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
    return [TopicSpec(s.name, s.partitions, {**s.config, **size}) for s in specs]


def ensure_topics(
    admin: AdminClient, topics: TopicSettings, *, timeout_s: float = 30
) -> dict[str, str]:
    """Create the missing topics and raise the max.message.bytes of existing ones that
    allow less than ``topics.max_message_bytes``; returns {topic: "created" | "exists"}."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    specs = topic_specs(topics)
    missing = [s for s in specs if s.name not in existing]
    outcome = {s.name: "exists" for s in specs if s.name in existing}
    _raise_message_size(admin, [s.name for s in specs if s.name in existing], topics, timeout_s)
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
    wait_served(admin, {s.name: s.partitions for s in missing}, timeout_s=timeout_s)
    return outcome


def unserved(admin: AdminClient, partitions: dict[str, int], *, timeout_s: float) -> list[str]:
    """The topics of ``partitions`` ({name: count}) that the broker answering does not yet
    serve: unknown, short of partitions, or with a partition that has no leader."""
    out = []
    for name, count in partitions.items():
        topic = admin.list_topics(name, timeout=timeout_s).topics.get(name)
        if (
            topic is None
            or topic.error is not None
            or len(topic.partitions) < count
            or any(p.leader < 0 or p.error is not None for p in topic.partitions.values())
        ):
            out.append(name)
    return out


def wait_served(admin: AdminClient, partitions: dict[str, int], *, timeout_s: float) -> None:
    """Block until every topic of ``partitions`` is served with a leader per partition.

    CreateTopics answers once the controller has the topic; the brokers learn of it a
    moment later, and until then a metadata request may show it without partitions.
    """
    deadline = time.monotonic() + timeout_s
    waiting = dict(partitions)
    while True:
        try:
            left = set(unserved(admin, waiting, timeout_s=max(1.0, deadline - time.monotonic())))
        except KafkaException:  # a broker still coming up: ask again
            left = set(waiting)
        waiting = {n: c for n, c in waiting.items() if n in left}
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise StackError(
                f"topics created but not served with a leader per partition within "
                f"{timeout_s:.0f}s: {', '.join(sorted(waiting))}"
            )
        time.sleep(0.2)


def topic_message_bytes(admin: AdminClient, names: list[str], timeout_s: float) -> dict[str, int]:
    """Each topic's max.message.bytes as the broker applies it (its default included)."""
    out: dict[str, int] = {}
    for attempt in range(6):
        resources = [ConfigResource(ResourceType.TOPIC, n) for n in names if n not in out]
        described = admin.describe_configs(resources, request_timeout=timeout_s)
        for resource, future in described.items():
            try:
                configs = future.result(timeout=timeout_s)
            except KafkaException as exc:
                # A topic created a moment ago may not be known to the broker yet.
                if attempt == 5 or exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise
                continue
            out[resource.name] = int(configs["max.message.bytes"].value)
        if len(out) == len(names):
            break
        time.sleep(0.5)
    return out


def _raise_message_size(
    admin: AdminClient, names: list[str], topics: TopicSettings, timeout_s: float
) -> None:
    # Topics made before the setting existed (or with a smaller one) refuse large records.
    if not names:
        return
    want = topics.max_message_bytes
    low = [n for n, size in topic_message_bytes(admin, names, timeout_s).items() if size < want]
    if not low:
        return
    entry = ConfigEntry("max.message.bytes", str(want), incremental_operation=AlterConfigOpType.SET)
    resources = [ConfigResource(ResourceType.TOPIC, n, incremental_configs=[entry]) for n in low]
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise StackError(
                f"raising max.message.bytes of topic {resource.name} to {want} failed: {exc}"
            ) from None
