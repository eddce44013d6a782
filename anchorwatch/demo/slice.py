"""End to end on one machine: generated traffic -> Kafka -> the drift job -> verdicts.

Used by `anchorwatch demo` and the integration tests. The expected windows are computed
independently, in plain Python, from the same generated events, so a run proves the whole
path by comparing the job's verdicts with them: the figures of every window and its
breakdown (per anchor kind, the worst anchors, per model, latency), by the rules of
``contracts.breakdown``. A window from a drift job that computes no breakdown carries none
of those fields: it is compared without them and counted (``Comparison.without_breakdown``).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import AdminClient

from anchorwatch.connectors.publisher import PublishStats, SnapshotPublisher
from anchorwatch.contracts import SnapshotEvent, Verdict, WindowAggregate, decode_verdict
from anchorwatch.contracts import breakdown as rules
from anchorwatch.contracts.models import KindFigures, ModelFigures, OtherModels, TopAnchor
from anchorwatch.demo.generator import Traffic
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config, read_topic
from anchorwatch.settings import TopicSettings
from anchorwatch.stack.jvm import JvmArtifacts, fetch
from anchorwatch.stack.topics import ensure_topics, topic_specs

log = logging.getLogger(__name__)

WindowKey = tuple[str, int]  # (doc type, window start ms)
AnchorKey = tuple[str, int, float]  # (anchor id, position, drift score) of a top anchor
#: The requests holding each top-anchor key, per window (``anchor_holders``).
Holders = dict[WindowKey, dict[AnchorKey, set[str]]]
#: The window figures of the breakdown: all None from a job that computes none.
BREAKDOWN_FIELDS: Final = (
    "kinds",
    "top_anchors",
    "models",
    "other_models",
    "latency_count",
    "latency_p50_ms",
    "latency_p95_ms",
)


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
    out = {}
    for (doc_type, start), group in _groups(events, window_size_ms).items():
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
            **window_breakdown(group),
        )
    return out


def _groups(
    events: Iterable[SnapshotEvent], window_size_ms: int
) -> dict[WindowKey, list[SnapshotEvent]]:
    groups: dict[WindowKey, list[SnapshotEvent]] = defaultdict(list)
    for e in events:
        groups[(e.doc_type, e.event_time_ms - e.event_time_ms % window_size_ms)].append(e)
    return groups


def window_breakdown(group: list[SnapshotEvent]) -> dict[str, Any]:
    """A window's breakdown fields from its requests (in arrival order), by the rules of
    ``contracts.breakdown``."""
    count: dict[str, int] = {}
    total: dict[str, float] = {}  # sum of count * mean
    top: dict[str, float] = {}
    for e in group:
        for kind, f in e.kinds.items():
            count[kind] = count.get(kind, 0) + f.anchor_count
            total[kind] = total.get(kind, 0.0) + f.anchor_count * f.mean_drift
            top[kind] = max(top.get(kind, 0.0), f.max_drift)
    ranked = sorted(
        ((a, e.event_id) for e in group for a in e.top_anchors),
        key=lambda x: rules.anchor_order(x[0].drift_score, x[0].position, x[0].anchor_id),
    )
    latencies = [e.latency_ms for e in group if e.latency_ms is not None]
    return {
        "kinds": {
            k: KindFigures(anchor_count=count[k], mean_drift=total[k] / count[k], max_drift=top[k])
            for k in rules.KINDS
            if k in count
        },
        "top_anchors": [
            a.model_copy(update={"event_id": event_id})
            for a, event_id in ranked[: rules.TOP_ANCHORS_PER_WINDOW]
        ],
        **_models(group),
        "latency_count": len(latencies),
        "latency_p50_ms": rules.latency_quantile(latencies, 0.5),
        "latency_p95_ms": rules.latency_quantile(latencies, 0.95),
    }


def _models(group: list[SnapshotEvent]) -> dict[str, Any]:
    """``models`` and ``other_models``: the first MODELS_TRACKED_PER_WINDOW distinct models
    counted one by one, the TOP_MODELS_PER_WINDOW with most requests listed (then by name,
    the unknown model last), every other request summed. Like the job, which keeps no name
    past the tracked ones, each request of an untracked model counts as one more model."""
    requests: dict[str | None, int] = {}  # tracked model -> requests
    drift: dict[str | None, float] = {}  # tracked model -> sum of mean drift
    untracked, untracked_drift = 0, 0.0
    for e in group:
        if e.model in requests or len(requests) < rules.MODELS_TRACKED_PER_WINDOW:
            requests[e.model] = requests.get(e.model, 0) + 1
            drift[e.model] = drift.get(e.model, 0.0) + e.mean_drift
        else:
            untracked += 1
            untracked_drift += e.mean_drift
    order = sorted(requests, key=lambda m: (-requests[m], m is None, m or ""))
    listed = order[: rules.TOP_MODELS_PER_WINDOW]
    rest = [m for m in requests if m not in listed]  # in the order first seen
    others = sum(requests[m] for m in rest) + untracked
    rest_drift = sum(drift[m] for m in rest) + untracked_drift
    return {
        "models": [
            ModelFigures(model=m, request_count=requests[m], mean_drift=drift[m] / requests[m])
            for m in listed
        ],
        "other_models": OtherModels(
            model_count=len(rest) + untracked, request_count=others, mean_drift=rest_drift / others
        )
        if others
        else None,
    }


def anchor_holders(events: Iterable[SnapshotEvent], window_size_ms: int) -> Holders:
    """Per window, the requests whose top anchors have each key: a window's top anchors
    are defined up to ties (the same anchor id, position and drift in two requests), so
    the request a job names for one is right when it is any of them."""
    out: Holders = {}
    for key, group in _groups(events, window_size_ms).items():
        holders: dict[AnchorKey, set[str]] = {}
        for e in group:
            for a in e.top_anchors:
                holders.setdefault((a.anchor_id, a.position, a.drift_score), set()).add(e.event_id)
        out[key] = holders
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
    # Windows compared without their breakdown: the job wrote none of its fields.
    without_breakdown: list[WindowKey] = field(default_factory=list)

    @property
    def breakdown_partial(self) -> bool:
        """Some windows carry a breakdown and some none: a job writes it on all or none."""
        return 0 < len(self.without_breakdown) < self.matched + len(self.wrong)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.wrong or self.breakdown_partial)


# p95 is taken over drift rounded to 0.001 (see the job), so it may differ by a rounding step.
_TOLERANCE = {"p95_drift": 1.001e-3}


def has_breakdown(window: WindowAggregate) -> bool:
    return any(getattr(window, name) is not None for name in BREAKDOWN_FIELDS)


def differences(
    expected: WindowAggregate,
    actual: WindowAggregate,
    holders: dict[AnchorKey, set[str]] | None = None,
) -> list[str]:
    """Figures of ``actual`` that differ from ``expected`` (late_count is not compared; the
    breakdown only when ``actual`` has one). ``holders``: the requests holding each top
    anchor (``anchor_holders``), any of which a job may name; without, the one
    ``expected`` names."""
    out = []
    compared = [n for n in WindowAggregate.model_fields if n != "late_count"]
    if not has_breakdown(actual):
        compared = [n for n in compared if n not in BREAKDOWN_FIELDS]
    for name in compared:
        want, got = getattr(expected, name), getattr(actual, name)
        if name == "top_anchors" and want is not None and got is not None:
            problem = _top_anchors_differ(want, got, holders)
        elif _close(_plain(want), _plain(got), _TOLERANCE.get(name, 1e-9)):
            problem = None
        else:
            problem = f"expected {want!r}, got {got!r}"
        if problem:
            out.append(f"{name}: {problem}")
    return out


def _plain(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else value


def _close(want: Any, got: Any, tolerance: float) -> bool:
    """Equal, floats within ``tolerance`` (sums in another order), all the way down."""
    if isinstance(want, float) and isinstance(got, float):
        return want == got or abs(want - got) <= tolerance
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(
            _close(_plain(want[k]), _plain(got[k]), tolerance) for k in want
        )
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(
            _close(_plain(w), _plain(g), tolerance) for w, g in zip(want, got, strict=True)
        )
    return bool(want == got)


def _top_anchors_differ(
    want: list[TopAnchor], got: list[TopAnchor], holders: dict[AnchorKey, set[str]] | None
) -> str | None:
    def keys(anchors: list[TopAnchor]) -> list[AnchorKey]:
        return [(a.anchor_id, a.position, a.drift_score) for a in anchors]

    if keys(want) != keys(got):
        return f"expected {keys(want)}, got {keys(got)}"
    for w, g in zip(want, got, strict=True):
        held = (holders or {}).get((w.anchor_id, w.position, w.drift_score))
        allowed = held or {w.event_id or ""}
        if (g.event_id or "") not in allowed:
            return f"{g.anchor_id} named in request {g.event_id!r}, held by {sorted(allowed)}"
    return None


def compare(
    expected: dict[WindowKey, WindowAggregate],
    actual: list[WindowAggregate],
    holders: Holders | None = None,
) -> Comparison:
    """``actual`` against ``expected``; ``holders`` (``anchor_holders`` of the same events)
    lets a top anchor tied between requests name any of them."""
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
        if k in expected and (diff := differences(expected[k], w, (holders or {}).get(k)))
    ]
    return Comparison(
        matched=sum(1 for k in seen if k in expected) - len(wrong),
        missing=sorted(k for k in expected if k not in seen),
        unexpected=sorted([k for k in seen if k not in expected] + duplicates),
        wrong=wrong,
        without_breakdown=sorted(
            k for k, w in seen.items() if k in expected and not has_breakdown(w)
        ),
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
