"""End to end on one machine: generated traffic -> Kafka -> the drift job -> verdicts.

Used by `anchorwatch demo` and the integration tests. The expected windows are computed
independently, in plain Python, from the same generated events, so a run proves the whole
path by comparing the job's verdicts with them.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from anchorwatch.connectors.publisher import PublishStats, SnapshotPublisher
from anchorwatch.contracts import SnapshotEvent, Verdict, WindowAggregate, decode_verdict
from anchorwatch.demo.generator import Traffic
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config, read_topic
from anchorwatch.settings import TopicSettings
from anchorwatch.stack.jvm import JvmArtifacts, fetch
from anchorwatch.stack.topics import ensure_topics, topic_specs

log = logging.getLogger(__name__)

WindowKey = tuple[str, int]  # (doc type, window start ms)


def run_scoped_topics(base: TopicSettings, run_id: str) -> TopicSettings:
    """Topic names private to one run, so runs never read each other's records."""
    names = ("snapshots", "summaries", "dead_letter", "windows", "verdicts", "baselines",
             "drift_events")  # fmt: skip
    # An empty name (summaries not written) stays empty.
    return base.model_copy(
        update={n: f"{getattr(base, n)}.{run_id}" for n in names if getattr(base, n)}
    )


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


def read_verdicts(settings: JobSettings) -> list[Verdict]:
    return [
        decode_verdict(m.value)
        for m in read_topic(settings.kafka, settings.topics.verdicts)
        if m.value is not None
    ]


def reference_windows(
    events: Iterable[SnapshotEvent], window_size_ms: int
) -> dict[WindowKey, WindowAggregate]:
    """Every figure the job computes per window, computed the plain way."""
    groups: dict[WindowKey, list[SnapshotEvent]] = defaultdict(list)
    for event in events:
        groups[(event.doc_type, event.event_time_ms - event.event_time_ms % window_size_ms)].append(
            event
        )
    out = {}
    for (doc_type, start), group in groups.items():
        n = len(group)
        drifts = [e.mean_drift for e in group]
        mean = sum(drifts) / n
        anchors = sum(e.anchor_count for e in group)
        out[(doc_type, start)] = WindowAggregate(
            doc_type=doc_type,
            window_start_ms=start,
            window_end_ms=start + window_size_ms,
            request_count=n,
            mean_drift=mean,
            max_drift=max(drifts),
            p95_drift=percentile([round(d, 3) for d in drifts], 0.95),
            stddev_drift=(sum((d - mean) ** 2 for d in drifts) / n) ** 0.5,
            anchor_count=anchors,
            disabled_share=sum(e.snapshot_status == "disabled" for e in group) / n,
            zero_anchor_share=sum(e.anchor_count == 0 for e in group) / n,
            resample_share=sum(e.resample_count for e in group) / anchors if anchors else None,
            mean_kl_divergence=sum(e.max_kl_divergence for e in group) / n,
        )
    return out


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as Flink's PERCENTILE does."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Comparison:
    matched: int
    missing: list[WindowKey]
    unexpected: list[WindowKey]
    wrong: list[tuple[WindowKey, str]]  # (window, what differs)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.wrong)


# p95 is taken over drift rounded to 0.001 (see the job), so it may differ by a rounding step.
_TOLERANCE = {"p95_drift": 1.001e-3}


def differences(expected: WindowAggregate, actual: WindowAggregate) -> list[str]:
    """Figures of ``actual`` that differ from ``expected`` (late_count is not compared)."""
    out = []
    for name in WindowAggregate.model_fields:
        want, got = getattr(expected, name), getattr(actual, name)
        if name == "late_count" or want == got:
            continue
        close = isinstance(want, float) and isinstance(got, float)
        if close and abs(want - got) <= _TOLERANCE.get(name, 1e-9):
            continue
        out.append(f"{name}: expected {want!r}, got {got!r}")
    return out


def compare(
    expected: dict[WindowKey, WindowAggregate], actual: list[WindowAggregate]
) -> Comparison:
    seen: dict[WindowKey, WindowAggregate] = {}
    duplicates = []
    for w in actual:
        key = (w.doc_type, w.window_start_ms)
        if key in seen:
            duplicates.append(key)
        seen[key] = w
    wrong = [
        (k, "; ".join(diff))
        for k, w in seen.items()
        if k in expected and (diff := differences(expected[k], w))
    ]
    return Comparison(
        matched=sum(1 for k in seen if k in expected) - len(wrong),
        missing=sorted(k for k in expected if k not in seen),
        unexpected=sorted([k for k in seen if k not in expected] + duplicates),
        wrong=wrong,
    )


# The longest out-of-orderness the job settings allow.
_MAX_WATERMARK_DELAY_MS = 3_600_000


def run_drift_job(
    settings: JobSettings, connector_jar: Path, events: list[SnapshotEvent] | None = None
) -> None:
    """Run the drift job on the local mini-cluster over what the topics hold now.

    With ``events`` (what the topics hold), the replay allows out-of-orderness of their
    whole event-time span. Everything was produced before the job started, so the order in
    which the source reads the partitions would otherwise decide what is late: Flink's Kafka
    source holds the watermark back only for partitions it has read from, and one read first
    moves it past another's older events (seen: a sparse doc type's first windows counted as
    late in one run of several). Windows then all close at the end of the input, with the
    same figures."""
    if events:
        span = max(e.event_time_ms for e in events) - min(e.event_time_ms for e in events)
        delay = min(span + settings.job.window_size_s * 1000, _MAX_WATERMARK_DELAY_MS)
        job = settings.job.model_copy(update={"watermark_delay_ms": delay})
        settings = settings.model_copy(update={"job": job})
    drift_job.run(settings, connector_jar, bounded=True).wait()


def create_topics(settings: JobSettings) -> None:
    ensure_topics(AdminClient(client_config(settings.kafka)), settings.topics)


@contextmanager
def private_topics(base: JobSettings) -> Iterator[JobSettings]:
    """``base`` with topics of a run of its own, created on entry and deleted on exit."""
    settings = base.model_copy(update={"topics": run_scoped_topics(base.topics, new_run_id())})
    create_topics(settings)
    try:
        yield settings
    finally:
        delete_topics(settings)


def delete_topics(settings: JobSettings) -> None:
    names = [spec.name for spec in topic_specs(settings.topics)]
    admin = AdminClient(client_config(settings.kafka))
    for future in admin.delete_topics(names, operation_timeout=30).values():
        try:
            future.result(timeout=30)
        except Exception as exc:  # already gone is fine; log anything else
            log.warning("could not delete topic", extra={"error": str(exc)})


def fetch_artifacts(settings: JobSettings) -> JvmArtifacts:
    return fetch(settings.jvm.cache_dir)[0]
