"""Per-type Prometheus series: the label value is the exact doc type, so two types never
share a series (whatever their text), and the exposition reads back to the same text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from anchorwatch.alerting.service_metrics import ServiceMetrics
from tests.support.rendering import LITERAL

TYPES = [*LITERAL, "victim_two-658958e2", "Victim two!", 'quote " and \\n', "日本語"]


def test_each_doc_type_has_its_own_series_named_by_its_exact_text() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=100)
    for i, doc_type in enumerate(TYPES):
        metrics.window(doc_type, i / 100, 0.85)
    exposition = generate_latest(registry).decode()
    (family,) = [
        f
        for f in text_string_to_metric_families(exposition)
        if f.name == "anchorwatch_alerting_window_mean_drift"
    ]
    read_back = {s.labels["doc_type"]: s.value for s in family.samples}
    assert read_back == {doc_type: i / 100 for i, doc_type in enumerate(TYPES)}


def test_the_oldest_types_drop_out_beyond_the_cap() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=2)
    for doc_type in ("victim two!", "victim_two-658958e2", "third"):
        metrics.window(doc_type, 0.5, 0.85)
    assert (
        registry.get_sample_value(
            "anchorwatch_alerting_window_mean_drift", {"doc_type": "victim two!"}
        )
        is None
    )
    assert (
        registry.get_sample_value(
            "anchorwatch_alerting_window_mean_drift", {"doc_type": "victim_two-658958e2"}
        )
        == 0.5
    )
    assert registry.get_sample_value("anchorwatch_alerting_doc_type_gauges_dropped_total") == 1
