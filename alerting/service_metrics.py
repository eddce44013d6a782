"""Prometheus metrics of the alerting service, on an injectable registry.

Labels come from small fixed sets (integration, outcome, severity), except ``doc_type`` on
the two per-type gauges: doc types are as many as the gateway sends, so those gauges keep
at most ``doc_types_max`` types and drop the least recently judged one's beyond that.
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
        while len(self._doc_types) > self._doc_types_max:
            old, _ = self._doc_types.popitem(last=False)
            for gauge in (self.mean_drift, self.threshold, self.p95_drift, self.window_requests):
                with contextlib.suppress(KeyError):
                    gauge.remove(old)
            for signal in ("disabled", "zero_anchors", "resample"):
                with contextlib.suppress(KeyError):
                    self.quality_share.remove(old, signal)
            self.doc_types_dropped.inc()

    def open_incidents(self, by_severity: Mapping[str, int]) -> None:
        for severity in ("warning", "critical"):
            self.incidents_open.labels(severity).set(by_severity.get(severity, 0))
