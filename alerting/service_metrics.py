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

The per-type series are one record per type, made into series when scraped
(``doc_type_series.py``), not labelled children: at 10,000 types those cost half the
engine's time.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from anchorwatch.alerting.doc_type_series import (
    OTHER_MODELS,
    UNKNOWN_MODEL,
    DocTypeSeries,
    model_label,
)
from anchorwatch.alerting.notify import NotifyMetrics
from anchorwatch.contracts import WindowAggregate

# The model labels live in doc_type_series.py; importers name them from here.
__all__ = [
    "NOTIFICATION_OUTCOMES",
    "OTHER_MODELS",
    "UNKNOWN_MODEL",
    "VERDICT_OUTCOMES",
    "ServiceMetrics",
    "model_label",
]

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
        # Each outcome's child, looked up once: ``labels()`` costs microseconds per verdict.
        self.verdict_outcome = {o: self.verdicts.labels(o) for o in VERDICT_OUTCOMES}
        for severity in ("warning", "critical"):
            self.incidents_open.labels(severity)
        # The per-type series (mean drift, threshold, p95, requests, quality shares and the
        # breakdown): one record per type, not labelled children (see the module).
        self.doc_types = DocTypeSeries(registry, doc_types_max, self.doc_types_dropped.inc)

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
        self.doc_types.window(doc_type, mean_drift, threshold, figures)

    def open_incidents(self, by_severity: Mapping[str, int]) -> None:
        for severity in ("warning", "critical"):
            self.incidents_open.labels(severity).set(by_severity.get(severity, 0))
