"""Prometheus metrics of the alerting service, on an injectable registry.

Labels come from small fixed sets (integration, outcome, severity), except ``doc_type`` on
the per-type gauges: doc types are as many as the gateway sends, so those gauges keep
at most ``doc_types_max`` types and drop the least recently judged one's beyond that.

The latest window's breakdown (``anchorwatch.contracts.breakdown``), per type: request
latency p50/p95 (``quantile``), mean drift per anchor kind (``kind``: at most the 8 kinds)
and per model (``model``: the at most 5 models the window lists, ``(other)`` for the rest
summed and ``(unknown)`` for requests naming none). A kind or model the latest window does
not have is removed, so a type has at most 8 kind and 6 model series whatever the models
its clients send over time. Model names are the contract's (bounded, visible); one that
starts with ``(`` is shown with one more, so no model takes the place of ``(other)`` or
``(unknown)``.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from anchorwatch.alerting.notify import NotifyMetrics
from anchorwatch.contracts import WindowAggregate

#: verdicts_total outcomes. replay: a verdict id seen before; stale: an older window of a
#: type than one already processed (late or re-judged); invalid: not a Verdict.
VERDICT_OUTCOMES = ("processed", "replay", "stale", "invalid")
#: notifications_total outcomes. sent; reconciled: found already delivered after a crash;
#: suppressed: a Jira comment within the comment interval; superseded: a progress update
#: replaced by a newer one queued behind it; dry_run; retry: rescheduled after a retryable
#: failure; failed: a permanent failure (the entry is abandoned, the error logged).
NOTIFICATION_OUTCOMES = (
    "sent",
    "reconciled",
    "suppressed",
    "superseded",
    "dry_run",
    "retry",
    "failed",
)
#: The ``model`` label of a window's unlisted models (summed), and of requests naming none.
OTHER_MODELS = "(other)"
UNKNOWN_MODEL = "(unknown)"
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry, *, doc_types_max: int = 2000) -> None:
        self.notify = NotifyMetrics(registry)
        self.notifications = Counter(
            "anchorwatch_alerting_notifications_total",
            "Outbox entries by integration (slack, jira, events) and how they ended.",
            ["integration", "outcome"],
            registry=registry,
        )
        self.incidents_open = Gauge(
            "anchorwatch_alerting_incidents_open",
            "Incidents open now, by severity.",
            ["severity"],
            registry=registry,
        )
        self.incidents_silenced = Gauge(
            "anchorwatch_alerting_incidents_silenced",
            "Open incidents people have not been told of: opened while a silence or a "
            "maintenance window muted them (they are posted once nothing does).",
            registry=registry,
        )
        self.mean_drift = Gauge(
            "anchorwatch_alerting_window_mean_drift",
            "Mean drift of the latest window judged, per doc type (at most "
            "alerting.metrics_doc_types_max types).",
            ["doc_type"],
            registry=registry,
        )
        self.threshold = Gauge(
            "anchorwatch_alerting_threshold",
            "Threshold the latest window was compared with, per doc type.",
            ["doc_type"],
            registry=registry,
        )
        self.p95_drift = Gauge(
            "anchorwatch_alerting_window_p95_drift",
            "p95 request drift of the latest window judged, per doc type.",
            ["doc_type"],
            registry=registry,
        )
        self.window_requests = Counter(
            "anchorwatch_alerting_window_requests_total",
            "Requests in the windows judged, per doc type (its rate is the request rate).",
            ["doc_type"],
            registry=registry,
        )
        self.quality_share = Gauge(
            "anchorwatch_alerting_window_quality_share",
            "Data-quality shares of the latest window judged, per doc type; signal: "
            "disabled, zero_anchors (of requests), resample (of anchors).",
            ["doc_type", "signal"],
            registry=registry,
        )
        self.request_latency = Gauge(
            "anchorwatch_alerting_window_request_latency_seconds",
            "Request latency of the latest window judged, per doc type: quantile 0.5, 0.95 "
            "(as the gateway measured it; absent when the window carried none).",
            ["doc_type", "quantile"],
            registry=registry,
        )
        self.kind_drift = Gauge(
            "anchorwatch_alerting_window_kind_mean_drift",
            "Mean drift of the anchors of each kind (SECTION, TABLE, ..., OTHER) in the latest "
            "window judged, per doc type; kinds the window had no anchors of are absent.",
            ["doc_type", "kind"],
            registry=registry,
        )
        self.model_drift = Gauge(
            "anchorwatch_alerting_window_model_mean_drift",
            "Mean drift of the requests of each model version in the latest window judged, per "
            "doc type: the models it lists, (other) for the rest, (unknown) for none named.",
            ["doc_type", "model"],
            registry=registry,
        )
        self.model_requests = Gauge(
            "anchorwatch_alerting_window_model_requests",
            "Requests of each model version in the latest window judged, per doc type (the "
            "same models as anchorwatch_alerting_window_model_mean_drift).",
            ["doc_type", "model"],
            registry=registry,
        )
        self.doc_types_dropped = Counter(
            "anchorwatch_alerting_doc_type_gauges_dropped_total",
            "Per-type gauges dropped to stay within alerting.metrics_doc_types_max.",
            registry=registry,
        )
        self.verdicts = Counter(
            "anchorwatch_alerting_verdicts_total",
            "Verdicts consumed, by outcome: processed, replay, stale, invalid.",
            ["outcome"],
            registry=registry,
        )
        self.baselines = Counter(
            "anchorwatch_alerting_baselines_total",
            "Baselines read, by outcome: applied, stale (older than the one held), invalid.",
            ["outcome"],
            registry=registry,
        )
        self.outbox_pending = Gauge(
            "anchorwatch_alerting_outbox_pending",
            "Notifications waiting to be delivered, by integration.",
            ["integration"],
            registry=registry,
        )
        self.latency = Histogram(
            "anchorwatch_alerting_notification_latency_seconds",
            "From consuming the verdict that caused a notification to its delivery.",
            ["integration"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.decision = Histogram(
            "anchorwatch_alerting_verdict_decision_seconds",
            "From a verdict's Kafka timestamp (the job writing it) to the commit of the batch "
            "that decided it: how far behind the verdicts the service runs.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )
        self.batch = Histogram(
            "anchorwatch_alerting_batch_seconds",
            "Deciding and committing one batch of verdicts.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        )
        for outcome in VERDICT_OUTCOMES:
            self.verdicts.labels(outcome)
        for severity in ("warning", "critical"):
            self.incidents_open.labels(severity)
        self._doc_types_max = doc_types_max
        self._doc_types: OrderedDict[str, None] = OrderedDict()
        # The kind and model labels each type's breakdown series carry now.
        self._kinds: dict[str, set[str]] = {}
        self._models: dict[str, set[str]] = {}

    def window(
        self,
        doc_type: str,
        mean_drift: float,
        threshold: float,
        *,
        figures: WindowAggregate | None = None,
    ) -> None:
        """The latest judged window of a type (``figures``: the whole window, when at hand);
        least recently judged types drop out."""
        if self._doc_types_max <= 0:
            return
        self._doc_types[doc_type] = None
        self._doc_types.move_to_end(doc_type)
        self.mean_drift.labels(doc_type).set(mean_drift)
        self.threshold.labels(doc_type).set(threshold)
        if figures is not None:
            if figures.p95_drift is not None:
                self.p95_drift.labels(doc_type).set(figures.p95_drift)
            self.window_requests.labels(doc_type).inc(figures.request_count)
            for signal, share in (
                ("disabled", figures.disabled_share),
                ("zero_anchors", figures.zero_anchor_share),
                ("resample", figures.resample_share),
            ):
                if share is not None:
                    self.quality_share.labels(doc_type, signal).set(share)
            self._breakdown(doc_type, figures)
        while len(self._doc_types) > self._doc_types_max:
            old, _ = self._doc_types.popitem(last=False)
            for gauge in (self.mean_drift, self.threshold, self.p95_drift, self.window_requests):
                with contextlib.suppress(KeyError):
                    gauge.remove(old)
            for signal in ("disabled", "zero_anchors", "resample"):
                with contextlib.suppress(KeyError):
                    self.quality_share.remove(old, signal)
            self._breakdown(old, None)
            self.doc_types_dropped.inc()

    def _breakdown(self, doc_type: str, w: WindowAggregate | None) -> None:
        """The breakdown series of a type's latest window ``w``; those it does not have (all
        of them when ``w`` is None: the type is dropped) are removed."""
        for quantile, ms in (
            ("0.5", w.latency_p50_ms if w else None),
            ("0.95", w.latency_p95_ms if w else None),
        ):
            if ms is not None:
                self.request_latency.labels(doc_type, quantile).set(ms / 1000)
            else:
                with contextlib.suppress(KeyError):
                    self.request_latency.remove(doc_type, quantile)
        kinds = {k: f.mean_drift for k, f in (w.kinds or {}).items()} if w else {}
        for kind, mean in kinds.items():
            self.kind_drift.labels(doc_type, kind).set(mean)
        self._drop(self._kinds, doc_type, set(kinds), (self.kind_drift,))
        models: dict[str, tuple[int, float]] = {}
        for m in (w.models or []) if w else []:
            models[model_label(m.model)] = (m.request_count, m.mean_drift)
        if w is not None and (o := w.other_models) is not None:
            models[OTHER_MODELS] = (o.request_count, o.mean_drift)
        for label, (requests, mean) in models.items():
            self.model_requests.labels(doc_type, label).set(requests)
            self.model_drift.labels(doc_type, label).set(mean)
        self._drop(self._models, doc_type, set(models), (self.model_requests, self.model_drift))

    @staticmethod
    def _drop(
        held: dict[str, set[str]], doc_type: str, now: set[str], gauges: tuple[Gauge, ...]
    ) -> None:
        """Remove the series of labels the type had and has no more; remember the rest."""
        for label in held.pop(doc_type, set()) - now:
            for gauge in gauges:
                with contextlib.suppress(KeyError):
                    gauge.remove(doc_type, label)
        if now:
            held[doc_type] = now

    def open_incidents(self, by_severity: Mapping[str, int]) -> None:
        for severity in ("warning", "critical"):
            self.incidents_open.labels(severity).set(by_severity.get(severity, 0))


def model_label(model: str | None) -> str:
    """A model's ``model`` label: its name, ``(unknown)`` for none; a name starting with
    ``(`` gets one more, so none equals ``(other)`` or ``(unknown)``."""
    if model is None:
        return UNKNOWN_MODEL
    return "(" + model if model.startswith("(") else model
