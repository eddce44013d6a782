"""The first end-to-end slice: generated traffic -> Kafka -> Flink windows -> Kafka.

Used by `anchorwatch demo` and the integration tests. The expected result is computed
independently, in plain Python, from the same generated events, so a run proves the
plumbing by comparing Flink's windows with it.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from anchorwatch.connectors.publisher import PublishStats, SnapshotPublisher
from anchorwatch.contracts import SnapshotEvent, WindowAggregate, decode_window
from anchorwatch.generator import Traffic
from anchorwatch.jobs import window_counts
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config, read_topic
from anchorwatch.settings import TopicSettings
from anchorwatch.stack.jvm import JvmArtifacts, fetch
from anchorwatch.stack.topics import ensure_topics

log = logging.getLogger(__name__)

WindowKey = tuple[str, int]  # (doc type, window start ms)


@dataclass(frozen=True)
class ExpectedWindow:
    request_count: int
    mean_drift: float


def expected_windows(
    events: Iterable[SnapshotEvent], window_size_ms: int
) -> dict[WindowKey, ExpectedWindow]:
    """Count and mean request drift per (doc type, tumbling window), the reference result."""
    sums: dict[WindowKey, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in events:
        start = event.event_time_ms - event.event_time_ms % window_size_ms
        acc = sums[(event.doc_type, start)]
        acc[0] += 1
        acc[1] += event.mean_drift
    return {k: ExpectedWindow(int(n), total / n) for k, (n, total) in sums.items()}


def run_scoped_topics(base: TopicSettings, run_id: str) -> TopicSettings:
    """Topic names private to one run, so runs never read each other's records."""
    names = ("snapshots", "dead_letter", "windows", "verdicts", "baselines", "drift_events")
    return base.model_copy(update={n: f"{getattr(base, n)}.{run_id}" for n in names})


def new_run_id() -> str:
    return uuid.uuid4().hex[:10]


def publish_traffic(
    settings: JobSettings, traffic: Traffic, *, source: str = "generator"
) -> tuple[PublishStats, list[SnapshotEvent]]:
    """Send every generated record through validation into Kafka, in arrival order.
    Returns the publisher's stats and the events it accepted."""
    publisher = SnapshotPublisher(settings.kafka, settings.topics, source=source)
    accepted: list[SnapshotEvent] = []
    for record in traffic.records():
        outcome = publisher.publish_raw(record.raw)
        if isinstance(outcome, SnapshotEvent):
            accepted.append(outcome)
    return publisher.flush(), accepted


def read_windows(settings: JobSettings) -> list[WindowAggregate]:
    return [
        decode_window(m.value)
        for m in read_topic(settings.kafka, settings.topics.windows)
        if m.value is not None
    ]


@dataclass(frozen=True)
class Comparison:
    matched: int
    missing: list[WindowKey]
    unexpected: list[WindowKey]
    wrong: list[tuple[WindowKey, ExpectedWindow, WindowAggregate]]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.wrong)


def compare(expected: dict[WindowKey, ExpectedWindow], actual: list[WindowAggregate]) -> Comparison:
    seen: dict[WindowKey, WindowAggregate] = {}
    duplicates = []
    for w in actual:
        key = (w.doc_type, w.window_start_ms)
        if key in seen:
            duplicates.append(key)
        seen[key] = w
    wrong = [
        (k, expected[k], w)
        for k, w in seen.items()
        if k in expected
        and (
            w.request_count != expected[k].request_count
            or abs(w.mean_drift - expected[k].mean_drift) > 1e-9
        )
    ]
    return Comparison(
        matched=sum(1 for k in seen if k in expected) - len(wrong),
        missing=sorted(k for k in expected if k not in seen),
        unexpected=sorted([k for k in seen if k not in expected] + duplicates),
        wrong=wrong,
    )


def run_window_job(settings: JobSettings, connector_jar: Path) -> None:
    """Run the window job on the local mini-cluster over what the topic holds now."""
    window_counts.run(settings, connector_jar, bounded=True).wait()


def create_topics(settings: JobSettings) -> None:
    ensure_topics(AdminClient(client_config(settings.kafka)), settings.topics)


def delete_topics(settings: JobSettings) -> None:
    t = settings.topics
    names = [t.snapshots, t.dead_letter, t.windows, t.verdicts, t.baselines, t.drift_events]
    admin = AdminClient(client_config(settings.kafka))
    for future in admin.delete_topics(names, operation_timeout=30).values():
        try:
            future.result(timeout=30)
        except Exception as exc:  # already gone is fine; log anything else
            log.warning("could not delete topic", extra={"error": str(exc)})


def fetch_artifacts(settings: JobSettings) -> JvmArtifacts:
    return fetch(settings.jvm.cache_dir)[0]
