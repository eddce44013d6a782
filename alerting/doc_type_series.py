"""The alerting service's per-doc-type series (``service_metrics.py`` says what each means):
the latest judged window of each type, one record per type, turned into metric families only
when ``/metrics`` is read.

Why not prometheus_client's labelled metrics: at 10,000 types and the default cap of 2,000,
almost every verdict brings in a type that is not shown and drops the least recent one, so
each verdict created and removed some ten labelled children (validated, locked, the
environment read per removal): about 50 of the engine's 140 µs per verdict. Here a
verdict replaces one tuple in a dict (3 µs). The families, their help, labels and values
are the same as those metrics gave (the order of the series within a family aside).

The consumer thread writes, the HTTP thread reads: records are never changed in place, and
the reader copies the dict under the lock, so it sees each type's record whole.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from anchorwatch.contracts import WindowAggregate

#: The ``model`` label of a window's unlisted models (summed), and of requests naming none.
OTHER_MODELS = "(other)"
UNKNOWN_MODEL = "(unknown)"
#: The data-quality shares, in the order of ``TypeSeries.shares``.
SIGNALS = ("disabled", "zero_anchors", "resample")
QUANTILES = ("0.5", "0.95")

_MEAN = "anchorwatch_alerting_window_mean_drift"
_THRESHOLD = "anchorwatch_alerting_threshold"
_P95 = "anchorwatch_alerting_window_p95_drift"
_REQUESTS = "anchorwatch_alerting_window_requests_total"
_QUALITY = "anchorwatch_alerting_window_quality_share"
_LATENCY = "anchorwatch_alerting_window_request_latency_seconds"
_KIND = "anchorwatch_alerting_window_kind_mean_drift"
_MODEL_DRIFT = "anchorwatch_alerting_window_model_mean_drift"
_MODEL_REQUESTS = "anchorwatch_alerting_window_model_requests"

#: name -> (help, the label after doc_type or None); the counter is _REQUESTS.
FAMILIES: dict[str, tuple[str, str | None]] = {
    _MEAN: (
        "Mean drift of the latest window judged, per doc type (at most "
        "alerting.metrics_doc_types_max types).",
        None,
    ),
    _THRESHOLD: ("Threshold the latest window was compared with, per doc type.", None),
    _P95: ("p95 request drift of the latest window judged, per doc type.", None),
    _REQUESTS: (
        "Requests in the windows judged, per doc type (its rate is the request rate).",
        None,
    ),
    _QUALITY: (
        "Data-quality shares of the latest window judged, per doc type; signal: "
        "disabled, zero_anchors (of requests), resample (of anchors).",
        "signal",
    ),
    _LATENCY: (
        "Request latency of the latest window judged, per doc type: quantile 0.5, 0.95 "
        "(as the gateway measured it; absent when the window carried none).",
        "quantile",
    ),
    _KIND: (
        "Mean drift of the anchors of each kind (SECTION, TABLE, ..., OTHER) in the latest "
        "window judged, per doc type; kinds the window had no anchors of are absent.",
        "kind",
    ),
    _MODEL_DRIFT: (
        "Mean drift of the requests of each model version in the latest window judged, per "
        "doc type: the models it lists, (other) for the rest, (unknown) for none named.",
        "model",
    ),
    _MODEL_REQUESTS: (
        "Requests of each model version in the latest window judged, per doc type (the "
        "same models as anchorwatch_alerting_window_model_mean_drift).",
        "model",
    ),
}


class TypeSeries(NamedTuple):
    """One type's series. None: the series is absent."""

    mean_drift: float
    threshold: float
    p95_drift: float | None = None
    requests: float | None = None  # the counter's value (None: never counted)
    requests_created: float = 0.0  # when the counter was made (its ``_created`` sample)
    shares: tuple[float | None, ...] = (None, None, None)  # by SIGNALS
    latency_s: tuple[float | None, ...] = (None, None)  # by QUANTILES
    kinds: tuple[tuple[str, float], ...] = ()  # kind label, mean drift
    models: tuple[tuple[str, float, float], ...] = ()  # model label, requests, mean drift


def model_label(model: str | None) -> str:
    """A model's ``model`` label: its name, ``(unknown)`` for none; a name starting with
    ``(`` gets one more, so none equals ``(other)`` or ``(unknown)``."""
    if model is None:
        return UNKNOWN_MODEL
    return "(" + model if model.startswith("(") else model


def _next(
    held: TypeSeries | None, mean: float, threshold: float, w: WindowAggregate | None
) -> TypeSeries:
    """A type's series after a window: mean and threshold always; with the whole window
    ``w``, its p95 and shares where it has them (else the earlier ones stay), the request
    counter counted on, and the breakdown (latency, kinds, models) exactly the window's."""
    if w is None:
        if held is None:
            return TypeSeries(float(mean), float(threshold))
        return held._replace(mean_drift=float(mean), threshold=float(threshold))
    if w.request_count < 0:
        raise ValueError("Counters can only be incremented by non-negative amounts.")
    if held is None:
        held = TypeSeries(0.0, 0.0)
    if held.requests is None:
        requests, created = float(w.request_count), time.time()
    else:
        requests, created = held.requests + w.request_count, held.requests_created
    # Plain branches, no generators: this runs once per verdict.
    shares = held.shares
    new_shares = (w.disabled_share, w.zero_anchor_share, w.resample_share)
    if new_shares != (None, None, None):
        shares = tuple(
            float(new) if new is not None else old
            for new, old in zip(new_shares, shares, strict=True)
        )
    p50, p95 = w.latency_p50_ms, w.latency_p95_ms
    latency = (
        None if p50 is None else p50 / 1000,
        None if p95 is None else p95 / 1000,
    )
    kinds = tuple((str(k), float(f.mean_drift)) for k, f in w.kinds.items()) if w.kinds else ()
    models: tuple[tuple[str, float, float], ...] = ()
    if w.models or w.other_models is not None:
        by_label: dict[str, tuple[float, float]] = {}
        for m in w.models or []:
            by_label[model_label(m.model)] = (float(m.request_count), float(m.mean_drift))
        if (o := w.other_models) is not None:
            by_label[OTHER_MODELS] = (float(o.request_count), float(o.mean_drift))
        models = tuple((label, r, d) for label, (r, d) in by_label.items())
    return TypeSeries(
        float(mean),
        float(threshold),
        float(w.p95_drift) if w.p95_drift is not None else held.p95_drift,
        requests,
        created,
        shares,
        latency,
        kinds,
        models,
    )


class DocTypeSeries:
    """The per-type families, registered in ``registry`` as one collector; at most
    ``doc_types_max`` types, the least recently judged dropped first (``on_drop`` counts
    each)."""

    def __init__(
        self, registry: CollectorRegistry, doc_types_max: int, on_drop: Callable[[], None]
    ) -> None:
        self._max = doc_types_max
        self._on_drop = on_drop
        self._lock = threading.Lock()
        # Least recently judged first.
        self._types: OrderedDict[str, TypeSeries] = OrderedDict()
        registry.register(self)

    def window(
        self, doc_type: str, mean: float, threshold: float, w: WindowAggregate | None
    ) -> None:
        if self._max <= 0:
            return
        doc_type = str(doc_type)
        with self._lock:
            held = self._types.pop(doc_type, None)
            self._types[doc_type] = _next(held, mean, threshold, w)
            dropped = 0
            while len(self._types) > self._max:
                self._types.popitem(last=False)
                dropped += 1
        for _ in range(dropped):
            self._on_drop()

    # ------------------------------------------------------------------ the collector

    def describe(self) -> Iterator[Metric]:
        """The families without samples (the registry checks names with them)."""
        gauges, requests = self._families()
        return iter([*gauges.values(), requests])

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            held = list(self._types.items())
        g, requests = self._families()
        created = prometheus_metrics._use_created  # as prometheus_client's own counters
        mean, threshold, p95, quality = g[_MEAN], g[_THRESHOLD], g[_P95], g[_QUALITY]
        latency, kind, model_drift, model_requests = (
            g[_LATENCY],
            g[_KIND],
            g[_MODEL_DRIFT],
            g[_MODEL_REQUESTS],
        )
        for d, s in held:
            labels = [d]
            mean.add_metric(labels, s.mean_drift)
            threshold.add_metric(labels, s.threshold)
            if s.p95_drift is not None:
                p95.add_metric(labels, s.p95_drift)
            if s.requests is not None:
                requests.add_metric(
                    labels, s.requests, created=s.requests_created if created else None
                )
            for signal, share in zip(SIGNALS, s.shares, strict=True):
                if share is not None:
                    quality.add_metric([d, signal], share)
            for quantile, seconds in zip(QUANTILES, s.latency_s, strict=True):
                if seconds is not None:
                    latency.add_metric([d, quantile], seconds)
            for label, value in s.kinds:
                kind.add_metric([d, label], value)
            for label, n, value in s.models:
                model_requests.add_metric([d, label], n)
                model_drift.add_metric([d, label], value)
        return iter([*g.values(), requests])

    @staticmethod
    def _families() -> tuple[dict[str, GaugeMetricFamily], CounterMetricFamily]:
        """The gauges by name and the request counter, empty."""
        gauges = {}
        for name, (text, second) in FAMILIES.items():
            if name != _REQUESTS:
                labels = ["doc_type"] if second is None else ["doc_type", second]
                gauges[name] = GaugeMetricFamily(name, text, labels=labels)
        requests = CounterMetricFamily(_REQUESTS, FAMILIES[_REQUESTS][0], labels=["doc_type"])
        return gauges, requests
