"""The per-type series as one record per type (``doc_type_series.py``) show what the
labelled prometheus_client gauges they replaced showed: the same families, help, labels and
values after any sequence of windows (with and without breakdowns, shares and p95, types
dropped beyond the cap and coming back), and a scrape while the engine writes sees each
type whole."""

from __future__ import annotations

import contextlib
import random
import threading
from collections import OrderedDict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from anchorwatch.alerting.doc_type_series import FAMILIES
from anchorwatch.alerting.service_metrics import OTHER_MODELS, ServiceMetrics, model_label
from anchorwatch.contracts import WindowAggregate
from anchorwatch.contracts.models import KindFigures, ModelFigures, OtherModels

T0 = 1_767_621_600_000
MINUTE = 60_000


class LabelledReference:
    """The per-type part of ServiceMetrics as it was (labelled gauges, removed by hand)."""

    def __init__(self, registry: CollectorRegistry, doc_types_max: int) -> None:
        def gauge(name: str) -> Gauge:
            text, second = FAMILIES[name]
            labels = ["doc_type"] if second is None else ["doc_type", second]
            return Gauge(name, text, labels, registry=registry)

        self.mean_drift = gauge("anchorwatch_alerting_window_mean_drift")
        self.threshold = gauge("anchorwatch_alerting_threshold")
        self.p95_drift = gauge("anchorwatch_alerting_window_p95_drift")
        name = "anchorwatch_alerting_window_requests_total"
        self.window_requests = Counter(name, FAMILIES[name][0], ["doc_type"], registry=registry)
        self.quality_share = gauge("anchorwatch_alerting_window_quality_share")
        self.request_latency = gauge("anchorwatch_alerting_window_request_latency_seconds")
        self.kind_drift = gauge("anchorwatch_alerting_window_kind_mean_drift")
        self.model_drift = gauge("anchorwatch_alerting_window_model_mean_drift")
        self.model_requests = gauge("anchorwatch_alerting_window_model_requests")
        self.dropped = 0
        self._max = doc_types_max
        self._doc_types: OrderedDict[str, None] = OrderedDict()
        self._kinds: dict[str, set[str]] = {}
        self._models: dict[str, set[str]] = {}

    def window(
        self, doc_type: str, mean: float, threshold: float, w: WindowAggregate | None
    ) -> None:
        if self._max <= 0:
            return
        self._doc_types[doc_type] = None
        self._doc_types.move_to_end(doc_type)
        self.mean_drift.labels(doc_type).set(mean)
        self.threshold.labels(doc_type).set(threshold)
        if w is not None:
            if w.p95_drift is not None:
                self.p95_drift.labels(doc_type).set(w.p95_drift)
            self.window_requests.labels(doc_type).inc(w.request_count)
            for signal, share in (
                ("disabled", w.disabled_share),
                ("zero_anchors", w.zero_anchor_share),
                ("resample", w.resample_share),
            ):
                if share is not None:
                    self.quality_share.labels(doc_type, signal).set(share)
            self._breakdown(doc_type, w)
        while len(self._doc_types) > self._max:
            old, _ = self._doc_types.popitem(last=False)
            for g in (self.mean_drift, self.threshold, self.p95_drift, self.window_requests):
                g.remove(old)
            for signal in ("disabled", "zero_anchors", "resample"):
                self.quality_share.remove(old, signal)
            self._breakdown(old, None)
            self.dropped += 1

    def _breakdown(self, doc_type: str, w: WindowAggregate | None) -> None:
        for quantile, ms in (
            ("0.5", w.latency_p50_ms if w else None),
            ("0.95", w.latency_p95_ms if w else None),
        ):
            if ms is not None:
                self.request_latency.labels(doc_type, quantile).set(ms / 1000)
            else:
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
        for label in held.pop(doc_type, set()) - now:
            for g in gauges:
                with contextlib.suppress(KeyError):
                    g.remove(doc_type, label)
        if now:
            held[doc_type] = now


def random_window(rng: random.Random, doc_type: str, minute: int) -> WindowAggregate:
    start = T0 + minute * MINUTE
    extra: dict[str, Any] = {}
    if rng.random() < 0.6:
        extra["p95_drift"] = round(rng.random(), 3)
    for share in ("disabled_share", "zero_anchor_share", "resample_share"):
        if rng.random() < 0.4:
            extra[share] = round(rng.random(), 3)
    if rng.random() < 0.5:
        kinds = rng.sample(["SECTION", "TABLE", "OTHER", "LIST"], rng.randint(0, 3))
        extra["kinds"] = {
            k: KindFigures(anchor_count=3, mean_drift=round(rng.random(), 3), max_drift=1.0)
            for k in kinds
        }
        names = rng.sample(["m-1", "m-2", "(odd", None, "m-3"], rng.randint(0, 3))
        extra["models"] = [
            ModelFigures(model=m, request_count=rng.randint(1, 50), mean_drift=0.5) for m in names
        ]
        if rng.random() < 0.5:
            extra["other_models"] = OtherModels(model_count=2, request_count=7, mean_drift=0.25)
        if rng.random() < 0.7:
            extra["latency_count"] = 10
            extra["latency_p50_ms"] = rng.randint(0, 900)
            if rng.random() < 0.8:
                extra["latency_p95_ms"] = rng.randint(900, 5000)
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=rng.randint(0, 100),
        mean_drift=round(rng.random(), 3),
        **extra,
    )


#: The per-type families' names (a counter's without its _total).
PER_TYPE = {name.removesuffix("_total") for name in FAMILIES}
Key = tuple[str, str, str, tuple[tuple[str, str], ...]]


def samples(registry: CollectorRegistry) -> dict[Key, Any]:
    """(family type and help, sample name, labels) -> value (``_created``: there, not when)."""
    out: dict[Key, Any] = {}
    for family in registry.collect():
        if family.name not in PER_TYPE:
            continue
        for s in family.samples:
            value = "created" if s.name.endswith("_created") else s.value
            labels = tuple(sorted(s.labels.items()))
            out[(family.type, family.documentation, s.name, labels)] = value
    return out


def test_the_records_show_what_the_labelled_gauges_showed() -> None:
    rng = random.Random(35)
    types = [f"t{i}" for i in range(7)] + ['quote " and \\n', "日本語"]
    new_registry, old_registry = CollectorRegistry(), CollectorRegistry()
    metrics = ServiceMetrics(new_registry, doc_types_max=5)
    reference = LabelledReference(old_registry, doc_types_max=5)
    for minute in range(400):
        doc_type = rng.choice(types)
        w = random_window(rng, doc_type, minute) if rng.random() < 0.85 else None
        mean, threshold = round(rng.random(), 3), rng.choice([0.85, 0.9])
        metrics.window(doc_type, mean, threshold, figures=w)
        reference.window(doc_type, mean, threshold, w)
        if minute % 20 == 0:
            assert samples(new_registry) == samples(old_registry), minute
    assert samples(new_registry) == samples(old_registry)
    dropped = new_registry.get_sample_value("anchorwatch_alerting_doc_type_gauges_dropped_total")
    assert dropped == reference.dropped > 0
    # The text exposition: the same lines (the order of the series within a family aside).
    new_text, old_text = (
        sorted(
            ln
            for ln in generate_latest(r).decode().splitlines()
            if "_created" not in ln and any(f"{n} " in ln or f"{n}{{" in ln for n in PER_TYPE)
        )
        for r in (new_registry, old_registry)
    )
    assert new_text == old_text
    assert len(new_text) > 50


def test_no_types_kept_with_a_cap_of_zero() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=0)
    metrics.window("t", 0.5, 0.85)
    assert (
        registry.get_sample_value("anchorwatch_alerting_window_mean_drift", {"doc_type": "t"})
        is None
    )


def test_a_scrape_while_windows_are_judged_sees_each_type_whole() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=50)
    stop = threading.Event()

    def judge() -> None:
        minute = 0
        while not stop.is_set():
            for i in range(100):
                doc = f"t{i}"
                w = WindowAggregate(
                    doc_type=doc,
                    window_start_ms=T0 + minute * MINUTE,
                    window_end_ms=T0 + (minute + 1) * MINUTE,
                    request_count=1,
                    mean_drift=0.5,
                    p95_drift=0.6,
                )
                metrics.window(doc, 0.5, 0.85, figures=w)
            minute += 1

    writer = threading.Thread(target=judge)
    writer.start()
    try:
        for _ in range(30):
            families = {f.name: f for f in registry.collect()}
            shown = {
                s.labels["doc_type"]
                for s in families["anchorwatch_alerting_window_mean_drift"].samples
            }
            with_p95 = {
                s.labels["doc_type"]
                for s in families["anchorwatch_alerting_window_p95_drift"].samples
            }
            assert shown == with_p95
            assert len(shown) <= 50
    finally:
        stop.set()
        writer.join()
