"""The drift job's breakdown against the real broker and the embedded mini-cluster: per
window, the anchor kinds, the top anchors (with the request they came from), the models
(more than 32 in one window, the unknown model among them) and the latency quantiles equal
an independent computation by the rules of ``anchorwatch.contracts.breakdown``, read from
the snapshots (JSON) and from the summaries (Avro v2, with v1 records among them).
Records from a writer before the breakdown still count, with none; a foreign producer's
breakdown that breaks the contract is dropped for that record alone."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fastavro
import orjson
import pytest

from anchorwatch.contracts import AnchorSnapshot, SnapshotEvent, encode
from anchorwatch.contracts import breakdown as rules
from anchorwatch.contracts.avro import MARKER, SCHEMA_FILE_V1, encode_summary
from anchorwatch.contracts.models import TopAnchor
from anchorwatch.demo import slice as flow
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.judge import BREAKDOWN_FIELDS
from anchorwatch.jobs.settings import JobSettings
from tests.support.drift_job import MIN, T0, has, wait_for, windows_of
from tests.support.kafka import ordered_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC = "contract"
IDS = [
    "SECTION_001",
    "SECTION_002",
    "TABLE_001",
    "ENTITY_003",
    "LIST_001",
    "CONDITION_2",
    "TIMELINE_1",
    "REFERENCE_4",
    "CLAUSE_7",
    "section_9",
    'SECTION_"7',
    "TABLE_\u00e9",
]
DRIFTS = [0.1, 0.25, 0.5, 0.75, 0.9, 1.0]


@dataclass
class Seen:
    """A record as the job must read it: its breakdown, model and latency, or none."""

    event_id: str
    drift: float
    kinds: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    top: list[TopAnchor] = field(default_factory=list)
    model: str | None = None
    latency: int | None = None


def request(rng: random.Random, n: int, t: int, model: str | None) -> SnapshotEvent:
    anchors = [
        AnchorSnapshot(
            anchor_id=rng.choice(IDS),
            position=rng.randint(0, 4) * 10,
            l2_norm=1.0,
            cosine_angle=0.9,
            kl_divergence=0.05,
            drift_score=rng.choice([*DRIFTS, rng.random()]),
            recommendation="none",
        )
        for _ in range(rng.randint(0, 6))
    ]
    latency = None if rng.random() < 0.2 else int(rng.lognormvariate(6, 1.5)) % 3_600_001
    return SnapshotEvent(
        event_id=f"{DOC}-{n}",
        event_time_ms=t,
        doc_type=DOC,
        snapshot_status="active",
        anchor_count=len(anchors),
        anchors=anchors,
        model=model,
        latency_ms=latency,
    )


def seen(e: SnapshotEvent) -> Seen:
    kinds: dict[str, tuple[int, float, float]] = {
        k: (f.anchor_count, f.mean_drift, f.max_drift) for k, f in e.kinds.items()
    }
    return Seen(e.event_id, e.mean_drift, kinds, list(e.top_anchors), e.model, e.latency_ms)


def json_of(e: SnapshotEvent, **changes: Any) -> bytes:
    """The event's JSON with fields changed; a change to None drops the field."""
    fields = {**orjson.loads(encode(e)), **changes}
    return orjson.dumps({k: v for k, v in fields.items() if v is not None})


def summary_of(e: SnapshotEvent, **changes: Any) -> bytes:
    fields = {**orjson.loads(encode(e)), **changes}
    return encode_summary({k: v for k, v in fields.items() if k != "anchors"})


def summary_v1(e: SnapshotEvent) -> bytes:
    """What the connectors wrote before v2."""
    schema = fastavro.parse_schema(json.loads(SCHEMA_FILE_V1.read_text()))
    out = io.BytesIO()
    fields = {**orjson.loads(encode(e)), "source": None}
    fastavro.schemaless_writer(out, schema, fields)
    return MARKER + bytes.fromhex("e5a6bb2226cf1a64") + out.getvalue()


def traffic(avro: bool) -> tuple[list[bytes], dict[int, list[Seen]]]:
    """Two windows of one doc type, in arrival order: window 0 with 45 named models and the
    unknown one; window 1 with three. Among them records from before the breakdown and a
    foreign producer's. Returns the records and, per window, what the job must count."""
    rng = random.Random(34)
    records: list[bytes] = []
    windows: dict[int, list[Seen]] = {0: [], 1: []}
    for w, n_events, models in ((0, 400, 45), (1, 120, 3)):
        for i in range(n_events):
            n = w * 1000 + i
            t = T0 + w * MIN + 1_000 + i * 100
            # Every model in the first requests, then most requests to a few of them.
            pick = i if i <= models else min(int(rng.expovariate(0.15)), models)
            model = None if pick == models else f"mod\u00e8le-{pick}" if pick == 1 else f"m-{pick}"
            e = request(rng, n, t, model)
            case = rng.random()
            if case < 0.05:  # a writer before the breakdown: no model, latency, kinds or top
                records.append(
                    summary_v1(e)
                    if avro
                    else json_of(e, model=None, latency_ms=None, kinds=None, top_anchors=None)
                )
                windows[w].append(Seen(e.event_id, e.mean_drift))
            elif case < 0.08:  # a foreign producer's breakdown the contract refuses
                bad = {
                    "kinds": {"FOO": {"anchor_count": 1, "mean_drift": 0.5, "max_drift": 0.5}},
                    "top_anchors": [{"anchor_id": "X", "position": 0, "drift_score": 0.5}] * 4,
                    "model": "m\u200b",
                    "latency_ms": -5,
                }
                records.append(summary_of(e, **bad) if avro else json_of(e, **bad))
                windows[w].append(Seen(e.event_id, e.mean_drift))
            elif case < 0.1:  # kinds of a huge count: summed past 32 bits
                huge = {
                    "SECTION": {"anchor_count": 2_000_000_000, "mean_drift": 0.5, "max_drift": 0.75}
                }
                records.append(summary_of(e, kinds=huge) if avro else json_of(e, kinds=huge))
                s = seen(e)
                s.kinds = {"SECTION": (2_000_000_000, 0.5, 0.75)}
                windows[w].append(s)
            else:
                records.append(summary_of(e) if avro else encode(e))
                windows[w].append(seen(e))
    return records, windows


def expected(counted: list[Seen]) -> dict[str, Any]:
    """The window's breakdown by the rules, from the records in arrival order."""
    kinds = {}
    for kind in rules.KINDS:
        figures = [s.kinds[kind] for s in counted if kind in s.kinds]
        if figures:
            n = sum(c for c, _, _ in figures)
            weighted = sum(c * mean for c, mean, _ in figures)
            kinds[kind] = {
                "anchor_count": n,
                "mean_drift": weighted / n,
                "max_drift": max(top for _, _, top in figures),
            }
    ranked = sorted(
        ((a, s.event_id) for s in counted for a in s.top),
        key=lambda x: rules.anchor_order(x[0].drift_score, x[0].position, x[0].anchor_id),
    )
    top = [
        {
            "anchor_id": a.anchor_id,
            "position": a.position,
            "drift_score": a.drift_score,
            "event_id": event_id,
        }
        for a, event_id in ranked[: rules.TOP_ANCHORS_PER_WINDOW]
    ]
    tracked: dict[str | None, list[float]] = {}
    untracked: list[float] = []
    for s in counted:
        if s.model in tracked or len(tracked) < rules.MODELS_TRACKED_PER_WINDOW:
            tracked.setdefault(s.model, []).append(s.drift)
        else:
            untracked.append(s.drift)
    order = sorted(tracked, key=lambda m: (-len(tracked[m]), m is None, m or ""))
    listed = order[: rules.TOP_MODELS_PER_WINDOW]
    out: dict[str, Any] = {
        "kinds": kinds,
        "top_anchors": top,
        "models": [
            {
                "model": m,
                "request_count": len(tracked[m]),
                "mean_drift": sum(tracked[m]) / len(tracked[m]),
            }
            for m in listed
        ],
    }
    rest = [m for m in tracked if m not in listed]  # in the order first seen
    requests = sum(len(tracked[m]) for m in rest) + len(untracked)
    if requests:
        total = 0.0
        for m in rest:
            total += sum(tracked[m])
        total += sum(untracked)
        out["other_models"] = {
            "model_count": len(rest) + len(untracked),
            "request_count": requests,
            "mean_drift": total / requests,
        }
    latencies = [s.latency for s in counted if s.latency is not None]
    out["latency_count"] = len(latencies)
    if latencies:
        out["latency_p50_ms"] = rules.latency_quantile(latencies, 0.5)
        out["latency_p95_ms"] = rules.latency_quantile(latencies, 0.95)
    return out


@pytest.fixture
def streaming(job_settings: JobSettings) -> Iterator[Callable[[bool], JobSettings]]:
    """Start the drift job unbounded on the mini-cluster over the snapshots, or over the
    summaries (a topic of their own); cancelled at the end of the test."""
    results, made = [], []

    def start(avro: bool) -> JobSettings:
        topics = job_settings.topics
        if avro:
            topics = topics.model_copy(update={"summaries": f"{topics.snapshots}.summaries"})
        settings = job_settings.model_copy(
            update={
                "topics": topics,
                "job": (
                    job_settings.job.model_copy(
                        update={
                            "watermark_delay_ms": 5_000,
                            "idle_timeout_s": 2,
                            "late_report_s": 1,
                            "checkpoint_interval_s": 5,
                            "startup_mode": "earliest-offset",
                        }
                    )
                ),
            }
        )
        flow.create_topics(settings)
        made.append(settings)
        jar = flow.fetch_artifacts(settings).flink_jobs_jar()
        results.append(drift_job.run(settings, jar, bounded=False))
        return settings

    yield start
    for result in results:
        result.get_job_client().cancel().result()
    for settings in made:
        flow.delete_topics(settings)


@pytest.mark.parametrize("avro", [False, True], ids=["snapshots", "summaries"])
def test_the_windows_breakdown_is_the_rules_computation_of_its_requests(
    streaming: Callable[[bool], JobSettings], avro: bool
) -> None:
    settings = streaming(avro)
    records, windows = traffic(avro)
    producer = ordered_producer(settings.kafka.bootstrap_servers)
    # One key, one partition: the job reads the records in the order computed with.
    for record in records:
        producer.produce(settings.topics.drift_input, record, DOC.encode())
    opener = request(random.Random(0), 99_999, T0 + 2 * MIN + 6_000, "m-0")  # closes both
    producer.produce(
        settings.topics.drift_input, summary_of(opener) if avro else encode(opener), DOC.encode()
    )
    assert producer.flush(10) == 0

    verdicts = windows_of(wait_for(settings, has(DOC, 0, 1)), DOC)
    for w, counted in windows.items():
        window = verdicts[T0 + w * MIN].window
        assert window.request_count == len(counted)
        want = expected(counted)
        got = window.model_dump(mode="json", include=set(BREAKDOWN_FIELDS))
        got = {k: v for k, v in got.items() if v is not None}
        assert got == want, f"window {w}"
    busy = verdicts[T0].window
    assert len({s.model for s in windows[0]}) > rules.MODELS_TRACKED_PER_WINDOW
    assert busy.other_models is not None
    # The models past the 32 tracked, counted one by one with each of their requests.
    tracked_unlisted = rules.MODELS_TRACKED_PER_WINDOW - rules.TOP_MODELS_PER_WINDOW
    assert busy.other_models.model_count > tracked_unlisted
    assert busy.kinds is not None
    assert busy.kinds["SECTION"].anchor_count > 2**32
    assert busy.latency_p95_ms is not None
