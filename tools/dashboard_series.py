"""The series the services would have exposed over a generated run, for
tools/render_dashboard.py to backfill into Prometheus.

``traffic_series`` generates gateway traffic with the project's generator (deterministic: a
quiet history to fit baselines on, then a live span with drift incidents, data-quality
faults and malformed records), computes every window the way the drift job does
(anchorwatch.demo.slice.reference_windows), fits baselines and judges each window with the
project's policy code, and turns that into the alerting service's, the ingest service's
and Flink's series, one sample a minute. ``Series`` holds them and writes them as
OpenMetrics with timestamps (what `promtool tsdb create-blocks-from openmetrics` reads).
Flink's lag and checkpoint series are synthetic (small noise); incidents are counted as
windows in breach (the alerting service's hysteresis is not modelled).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from anchorwatch.alerting.service_metrics import OTHER_MODELS, model_label
from anchorwatch.contracts import WindowAggregate
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.slice import reference_windows
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baselines
from anchorwatch.policy.window import baseline_at, judge_window

MINUTE_MS = 60_000
START_MS = 1_764_403_200_000  # 2025-11-29T08:00Z: the generator's default start
SCRAPE_DELAY_S = 15  # a window's figures appear this long after it closes
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


@dataclass
class Series:
    """OpenMetrics families: name -> (type, {labels: [(t_s, value)]})."""

    families: dict[
        str, tuple[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]]
    ] = field(default_factory=dict)

    def add(self, family: str, kind: str, labels: dict[str, str], t_s: float, value: float) -> None:
        _, series = self.families.setdefault(family, (kind, defaultdict(list)))
        series[tuple(sorted(labels.items()))].append((t_s, value))

    def openmetrics(self) -> Iterator[str]:
        for family, (kind, series) in sorted(self.families.items()):
            yield f"# TYPE {family} {kind}\n"
            for labels, samples in sorted(series.items()):
                label_text = ",".join(f'{k}="{v}"' for k, v in labels)
                name = family + ("_total" if kind == "counter" else "")
                for t_s, value in samples:
                    sample_name = name
                    shown = dict(labels)
                    if kind == "histogram":
                        sample_name = f"{family}{shown.pop('__suffix')}"
                        label_text = ",".join(f'{k}="{v}"' for k, v in sorted(shown.items()))
                    yield f"{sample_name}{{{label_text}}} {value!r} {t_s:.3f}\n"
        yield "# EOF\n"


def breakdown_series(out: Series, labels: dict[str, str], t: float, w: WindowAggregate) -> None:
    """The alerting service's breakdown gauges of a type's latest window (service_metrics:
    latency quantiles, mean drift per anchor kind, per model with its requests)."""
    for quantile, ms in (("0.5", w.latency_p50_ms), ("0.95", w.latency_p95_ms)):
        if ms is not None:
            out.add(
                "anchorwatch_alerting_window_request_latency_seconds",
                "gauge",
                {**labels, "quantile": quantile},
                t,
                ms / 1000,
            )
    for kind, figures in (w.kinds or {}).items():
        out.add(
            "anchorwatch_alerting_window_kind_mean_drift",
            "gauge",
            {**labels, "kind": kind},
            t,
            figures.mean_drift,
        )
    models = [(model_label(m.model), m.request_count, m.mean_drift) for m in w.models or []]
    if w.other_models is not None:
        models.append((OTHER_MODELS, w.other_models.request_count, w.other_models.mean_drift))
    for model, requests, mean in models:
        model_labels = {**labels, "model": model}
        out.add("anchorwatch_alerting_window_model_requests", "gauge", model_labels, t, requests)
        out.add("anchorwatch_alerting_window_model_mean_drift", "gauge", model_labels, t, mean)


def traffic_series(live_minutes: int, history_minutes: int, seed: int) -> tuple[Series, int, int]:
    """The series of a generated run; returns (series, first and last sample time in s)."""
    doc_types = 6
    history = generate(
        TrafficConfig(
            seed=seed,
            start_ms=START_MS - history_minutes * MINUTE_MS,
            minutes=history_minutes,
            doc_types=doc_types,
        )
    )
    history_events = [r.event for r in history.records() if r.event is not None]
    policy = PolicyConfig()
    fits = fit_baselines(
        reference_windows(history_events, MINUTE_MS).values(), policy, fitted_at_ms=START_MS
    )
    live = generate(
        TrafficConfig(
            seed=seed,
            start_ms=START_MS,
            minutes=live_minutes,
            doc_types=doc_types,
            malformed_rate=0.01,
            incidents=3,
            fault_incidents=2,
            background_fault_rate=0.005,
        )
    )
    records = list(live.records())
    windows = reference_windows([r.event for r in records if r.event is not None], MINUTE_MS)
    by_minute: dict[int, list[WindowAggregate]] = defaultdict(list)
    for (_, start), window in windows.items():
        by_minute[(start - START_MS) // MINUTE_MS].append(window)
    arrivals: dict[int, list[bool]] = defaultdict(list)  # minute -> [accepted?]
    for r in records:
        arrivals[max(0, (r.arrival_ms - START_MS) // MINUTE_MS)].append(r.event is not None)

    rng = random.Random(seed)
    out = Series()
    alerting = {"job": "alerting", "instance": "alerting:9465"}
    ingest = {"job": "ingest", "instance": "ingest:8686"}
    jm = {"job": "flink-jobmanager", "instance": "jobmanager:9249", "job_name": "anchorwatch_drift"}
    tm = {
        "job": "flink-taskmanager",
        "instance": "taskmanager:9249",
        "job_name": "anchorwatch_drift",
    }
    latest: dict[str, WindowAggregate] = {}
    threshold: dict[str, float] = {}
    breached: dict[str, str] = {}
    totals: dict[str, float] = defaultdict(float)
    buckets: dict[str, list[int]] = defaultdict(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: dict[str, float] = defaultdict(float)
    first = last = 0
    for minute in range(live_minutes):
        t = (START_MS + (minute + 1) * MINUTE_MS) / 1000 + SCRAPE_DELAY_S
        first = first or int(t)
        last = int(t)
        for window in by_minute.get(minute, []):
            doc = window.doc_type
            fit = fits.get(doc)
            baseline = baseline_at(fit.baseline, window.window_start_ms) if fit else None
            judgement = judge_window(window, baseline)
            latest[doc] = window
            threshold[doc] = judgement.threshold
            totals[f"requests:{doc}"] += window.request_count
            totals["verdicts"] += 1
            was, now = breached.get(doc, "none"), judgement.breach_level
            if was != now:
                # Opening, changing severity and resolving each notify every integration.
                for integration, (low, high) in (
                    ("slack", (0.2, 1.5)),
                    ("jira", (0.4, 2.5)),
                    ("events", (0.005, 0.05)),
                ):
                    totals[f"sent:{integration}"] += 1
                    seconds = rng.uniform(low, high)
                    latency_sum[integration] += seconds
                    index = next(
                        (i for i, b in enumerate(LATENCY_BUCKETS) if seconds <= b),
                        len(LATENCY_BUCKETS),
                    )
                    buckets[integration][index] += 1
            breached[doc] = now
        for doc, window in latest.items():
            labels = {**alerting, "doc_type": doc}
            out.add("anchorwatch_alerting_window_mean_drift", "gauge", labels, t, window.mean_drift)
            out.add("anchorwatch_alerting_threshold", "gauge", labels, t, threshold[doc])
            out.add(
                "anchorwatch_alerting_window_p95_drift", "gauge", labels, t, window.p95_drift or 0
            )
            out.add(
                "anchorwatch_alerting_window_requests",
                "counter",
                labels,
                t,
                totals[f"requests:{doc}"],
            )
            for signal, share in (
                ("disabled", window.disabled_share),
                ("zero_anchors", window.zero_anchor_share),
                ("resample", window.resample_share or 0.0),
            ):
                out.add(
                    "anchorwatch_alerting_window_quality_share",
                    "gauge",
                    {**labels, "signal": signal},
                    t,
                    share or 0.0,
                )
            breakdown_series(out, labels, t, window)
        for severity in ("warning", "critical"):
            count = sum(1 for level in breached.values() if level == severity)
            out.add(
                "anchorwatch_alerting_incidents_open",
                "gauge",
                {**alerting, "severity": severity},
                t,
                count,
            )
        out.add(
            "anchorwatch_alerting_verdicts",
            "counter",
            {**alerting, "outcome": "processed"},
            t,
            totals["verdicts"],
        )
        for integration in ("slack", "jira", "events"):
            labels = {**alerting, "integration": integration}
            out.add(
                "anchorwatch_alerting_notifications",
                "counter",
                {**labels, "outcome": "sent"},
                t,
                totals[f"sent:{integration}"],
            )
            out.add("anchorwatch_alerting_outbox_pending", "gauge", labels, t, 0)
            cumulative = 0
            for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), buckets[integration], strict=True):
                cumulative += n
                out.add(
                    "anchorwatch_alerting_notification_latency_seconds",
                    "histogram",
                    {**labels, "le": str(bound), "__suffix": "_bucket"},
                    t,
                    cumulative,
                )
            out.add(
                "anchorwatch_alerting_notification_latency_seconds",
                "histogram",
                {**labels, "__suffix": "_count"},
                t,
                cumulative,
            )
            out.add(
                "anchorwatch_alerting_notification_latency_seconds",
                "histogram",
                {**labels, "__suffix": "_sum"},
                t,
                latency_sum[integration],
            )
        arrived = arrivals.get(minute, [])
        totals["accepted"] += sum(arrived)
        totals["rejected"] += len(arrived) - sum(arrived)
        for outcome in ("accepted", "rejected"):
            out.add(
                "anchorwatch_ingest_records",
                "counter",
                {**ingest, "format": "kong", "outcome": outcome},
                t,
                totals[outcome],
            )
        # Flink counters are exported as gauges by its reporter.
        for operator, value in (
            ("Source:_snapshots_3_", totals["accepted"]),
            ("verdicts_22_:_Writer", totals["verdicts"]),
            ("dead_letter_20_:_Writer", 0.0),
        ):
            out.add(
                "flink_taskmanager_job_task_operator_numRecordsOut",
                "gauge",
                {**tm, "operator_name": operator},
                t,
                value,
            )
        for operator in ("Source:_snapshots_3_", "Source:_baselines_1_"):
            lag = rng.randint(0, 40) if operator.startswith("Source:_snapshots") else 0
            out.add(
                "flink_taskmanager_job_task_operator_KafkaSourceReader_KafkaConsumer_records_lag_max",
                "gauge",
                {**tm, "operator_name": operator},
                t,
                lag,
            )
        out.add("flink_jobmanager_job_uptime", "gauge", jm, t, (minute + 1) * 60_000.0)
        out.add("flink_jobmanager_job_lastCheckpointDuration", "gauge", jm, t, rng.uniform(60, 240))
        out.add("flink_jobmanager_job_numberOfFailedCheckpoints", "gauge", jm, t, 0)
    return out, first, last
