"""The breakdown outside the messages: the drift event's evidence carries it; the service's
gauges per anchor kind and model stay bounded (stale models removed, dropped types take
theirs along); the Slack chart draws latency under the drift; `anchorwatch read --by`
splits windows and verdicts by model and by kind."""

from __future__ import annotations

import struct
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from anchorwatch.alerting.integrations.slack.chart import chart_alt_text, render_chart
from anchorwatch.alerting.render import WindowPoint
from anchorwatch.alerting.service_metrics import ServiceMetrics, model_label
from anchorwatch.cli import cli
from anchorwatch.cli.read import split_rows, window_of
from anchorwatch.contracts import WindowAggregate, encode
from anchorwatch.contracts.models import KindFigures, ModelFigures, OtherModels, TopAnchor
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.incident_types import drift_event
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.window import judge_window, verdict_for
from tests.support.rendering import view

T0 = 1_767_621_600_000
MINUTE = 60_000


def window(minute: int, mean: float, **breakdown: Any) -> WindowAggregate:
    start = T0 + minute * MINUTE
    return WindowAggregate(
        doc_type="contract",
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=100,
        mean_drift=mean,
        **breakdown,
    )


def breakdown(*models: tuple[str | None, int, float], other: int = 0) -> dict[str, Any]:
    return {
        "kinds": {
            "SECTION": KindFigures(anchor_count=30, mean_drift=0.93, max_drift=0.99),
            "OTHER": KindFigures(anchor_count=2, mean_drift=0.4, max_drift=0.5),
        },
        "top_anchors": [
            TopAnchor(anchor_id="SECTION_007", position=88, drift_score=0.99, event_id="r-1")
        ],
        "models": [ModelFigures(model=m, request_count=n, mean_drift=d) for m, n, d in models],
        "other_models": (
            OtherModels(model_count=other, request_count=10, mean_drift=0.7) if other else None
        ),
        "latency_count": 100,
        "latency_p50_ms": 350,
        "latency_p95_ms": 2_400,
    }


# --------------------------------------------------------------------------- drift event


def test_the_drift_event_carries_the_windows_breakdown() -> None:
    tracker = IncidentTracker(PolicyConfig(), {})
    figures = breakdown(("m-2", 60, 0.95), ("m-1", 30, 0.8), other=3)
    changes = []
    for minute in range(6):
        w = window(minute, 0.95, **figures)
        changes += tracker.observe_verdict(verdict_for(w, judge_window(w, None), "j1"))
    opened = next(c for c in changes if c.kind == "opened")
    event = drift_event(opened, emitted_at_ms=T0 + 10 * MINUTE)
    evidence = event.evidence
    assert evidence.kinds == figures["kinds"]
    assert evidence.top_anchors == figures["top_anchors"]
    assert evidence.models == figures["models"]
    assert evidence.other_models == figures["other_models"]
    assert (evidence.latency_p50_ms, evidence.latency_p95_ms) == (350, 2_400)
    data = orjson.loads(encode(event))
    assert data["evidence"]["models"][0] == {
        "model": "m-2",
        "request_count": 60,
        "mean_drift": 0.95,
    }


def test_a_drift_event_of_an_older_window_has_no_breakdown() -> None:
    tracker = IncidentTracker(PolicyConfig(), {})
    changes = []
    for minute in range(6):
        w = window(minute, 0.95)
        changes += tracker.observe_verdict(verdict_for(w, judge_window(w, None), "j1"))
    event = drift_event(changes[0], emitted_at_ms=T0 + 10 * MINUTE)
    written = orjson.loads(event.model_dump_json(exclude_none=True))["evidence"]
    assert not {"kinds", "top_anchors", "models", "other_models", "latency_p95_ms"} & set(written)


# --------------------------------------------------------------------------- metrics


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == name:
                out[tuple(v for k, v in sorted(s.labels.items()) if k != "doc_type")] = s.value
    return out


def test_breakdown_gauges_follow_the_latest_window_and_drop_stale_models() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry)
    first = window(0, 0.9, **breakdown(("m-2", 60, 0.95), (None, 30, 0.8), other=4))
    metrics.window("contract", 0.9, 0.85, figures=first)
    assert _samples(registry, "anchorwatch_alerting_window_request_latency_seconds") == {
        ("0.5",): 0.35,
        ("0.95",): 2.4,
    }
    assert _samples(registry, "anchorwatch_alerting_window_kind_mean_drift") == {
        ("SECTION",): 0.93,
        ("OTHER",): 0.4,
    }
    assert _samples(registry, "anchorwatch_alerting_window_model_mean_drift") == {
        ("m-2",): 0.95,
        ("(unknown)",): 0.8,
        ("(other)",): 0.7,
    }
    assert _samples(registry, "anchorwatch_alerting_window_model_requests") == {
        ("m-2",): 60,
        ("(unknown)",): 30,
        ("(other)",): 10,
    }
    # The next window lists other models: the ones it does not have are gone.
    second = window(1, 0.9, **breakdown(("m-3", 90, 0.6)))
    second = second.model_copy(update={"kinds": {"TABLE": second.kinds["SECTION"]}})  # type: ignore[index]
    metrics.window("contract", 0.9, 0.85, figures=second)
    assert set(_samples(registry, "anchorwatch_alerting_window_model_mean_drift")) == {("m-3",)}
    assert set(_samples(registry, "anchorwatch_alerting_window_kind_mean_drift")) == {("TABLE",)}
    # A window of an older job: no breakdown series at all.
    metrics.window("contract", 0.5, 0.85, figures=window(2, 0.5))
    for name in (
        "anchorwatch_alerting_window_request_latency_seconds",
        "anchorwatch_alerting_window_kind_mean_drift",
        "anchorwatch_alerting_window_model_mean_drift",
        "anchorwatch_alerting_window_model_requests",
    ):
        assert _samples(registry, name) == {}, name


def test_a_thousand_models_over_time_leave_at_most_six_series_per_type() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=2)
    for i in range(200):
        models = [(f"model-{i}-{j}", 10 + j, 0.5) for j in range(5)]
        metrics.window("contract", 0.5, 0.85, figures=window(i, 0.5, **breakdown(*models, other=9)))
    assert len(_samples(registry, "anchorwatch_alerting_window_model_mean_drift")) == 6
    # Dropped beyond doc_types_max: a type's breakdown series go with it.
    for doc in ("b", "c"):
        w = window(300, 0.5, **breakdown(("m", 1, 0.5))).model_copy(update={"doc_type": doc})
        metrics.window(doc, 0.5, 0.85, figures=w)
    labels = {
        s.labels["doc_type"]
        for family in registry.collect()
        for s in family.samples
        if s.name.startswith("anchorwatch_alerting_window_")
        and ("model" in s.labels or "kind" in s.labels or "quantile" in s.labels)
    }
    assert labels == {"b", "c"}


def test_model_labels_never_take_the_place_of_other_or_unknown() -> None:
    assert model_label(None) == "(unknown)"
    assert model_label("claude-x-2") == "claude-x-2"
    assert model_label("(other)") == "((other)"
    assert model_label("(unknown)") == "((unknown)"
    assert model_label("((other)") == "(((other)"
    names = ["(other)", "((other)", "other)", "(", "((", "x", "(x"]
    assert len({model_label(n) for n in names} | {"(other)", "(unknown)"}) == len(names) + 2


# --------------------------------------------------------------------------- chart


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_the_chart_draws_latency_under_the_drift_when_windows_have_it() -> None:
    plain = [WindowPoint(T0 + i * MINUTE, T0 + (i + 1) * MINUTE, 0.5, 0.85, 10) for i in range(6)]
    assert _png_size(render_chart(plain, title="t")) == (800, 300)
    with_latency = [
        WindowPoint(p.window_start_ms, p.window_end_ms, 0.5, 0.85, 10, 300, 900 + 100 * i)
        for i, p in enumerate(plain)
    ]
    with_latency[2] = plain[2]  # a window without: a gap, not a zero
    assert _png_size(render_chart(with_latency, title="t")) == (800, 460)
    alt = chart_alt_text(view(), with_latency)
    assert alt.endswith("Under it, request latency p50 and p95; p95 up to 1,400 ms.")
    assert "latency" not in chart_alt_text(view(), plain)


# --------------------------------------------------------------------------- read --by


def test_read_splits_windows_and_verdicts_by_model_and_kind() -> None:
    w = window(0, 0.9, **breakdown(("m-2", 60, 0.95), ("m-1", 30, 0.8), other=4))
    verdict = verdict_for(w, judge_window(w, None), "j1")
    for record in (orjson.loads(encode(w)), orjson.loads(encode(verdict))):
        found = window_of(record)
        assert found is not None
        rows = split_rows(found, "model")
        assert rows is not None
        assert [(r["model"], r.get("other_models"), r["request_count"]) for r in rows] == [
            ("m-2", None, 60),
            ("m-1", None, 30),
            (None, 4, 10),
        ]
        assert rows[0]["share"] == 0.6
        assert rows[0]["window_start_ms"] == T0
        kinds = split_rows(found, "kind")
        assert [(r["kind"], r["anchor_count"]) for r in kinds or []] == [
            ("SECTION", 30),
            ("OTHER", 2),
        ]
    assert window_of({"event_id": "x"}) is None
    assert window_of({"window_start_ms": "not a window"}) is None
    assert split_rows(window(1, 0.5), "model") is None


def test_an_unknown_models_figures_read_back() -> None:
    w = window(0, 0.9, **breakdown(("m-2", 60, 0.95), (None, 30, 0.8)))
    found = window_of(orjson.loads(encode(w)))
    assert found is not None
    assert [r["model"] for r in split_rows(found, "model") or []] == ["m-2", None]


class _Message:
    def __init__(self, value: bytes | None) -> None:
        self.value = value


def test_read_by_model_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    w = window(0, 0.9, **breakdown(("m-2", 60, 0.95)))
    records = [encode(w), encode(window(1, 0.5)), b'{"event_id": "e"}', b"not json", None]

    def read_topic(_kafka: Any, topic: str, **_: Any) -> list[_Message]:
        assert topic == "anchorwatch.windows"
        return [_Message(r) for r in records]

    monkeypatch.setattr("anchorwatch.kafkaio.read_topic", read_topic)
    result = CliRunner().invoke(cli, ["read", "anchorwatch.windows", "--by", "model"])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert orjson.loads(line)["model"] == "m-2"
    assert "3 records are not windows or verdicts: skipped" in result.stderr
    assert "1 windows have no model breakdown" in result.stderr
    plain = CliRunner().invoke(cli, ["read", "anchorwatch.windows", "--limit", "2"])
    assert plain.stdout.splitlines() == [r.decode() for r in records[:2] if r]
