"""The window's breakdown as the drift job's JVM hands it to the judge (jobs/jvm
WindowBreakdown.toJson): read into the WindowAggregate's fields, and a breakdown the contract
refuses never stops the window's verdict."""

from __future__ import annotations

from typing import Any

import orjson

from anchorwatch.contracts import WindowAggregate
from anchorwatch.jobs.drift_job import WINDOW_FIELDS, breakdown_figures
from anchorwatch.jobs.judge import BREAKDOWN_FIELDS, DocTypeJudge
from anchorwatch.policy.window import QualityLimits, StaticRule

T0 = 1_764_403_200_000

#: What WindowBreakdown.toJson writes for a window with every part.
FULL = (
    '{"kinds":{"SECTION":{"anchor_count":4,"mean_drift":0.5,"max_drift":0.9},'
    '"OTHER":{"anchor_count":1,"mean_drift":1.0E-5,"max_drift":1.0E-5}},'
    '"top_anchors":[{"anchor_id":"SECTION_001","position":3,"drift_score":0.9,'
    '"event_id":"e-1"},{"anchor_id":"SECTION_\\"2","position":9,"drift_score":0.5}],'
    '"models":[{"model":"m-2","request_count":3,"mean_drift":0.7},'
    '{"model":null,"request_count":1,"mean_drift":0.1}],'
    '"other_models":{"model_count":40,"request_count":41,"mean_drift":0.25},'
    '"latency_count":4,"latency_p50_ms":120,"latency_p95_ms":1792}'
)


def window(**extra: Any) -> dict[str, Any]:
    return {"doc_type": "invoice", "window_start_ms": T0, "window_end_ms": T0 + 60_000,
            "request_count": 45, "mean_drift": 0.3, **extra}  # fmt: skip


def test_the_breakdown_column_becomes_the_windows_fields() -> None:
    figures = breakdown_figures(FULL)
    assert set(figures) == set(BREAKDOWN_FIELDS)
    w = WindowAggregate(**window(**figures))
    assert w.kinds is not None
    assert w.kinds["OTHER"].mean_drift == 1e-5
    assert [(k, f.anchor_count) for k, f in w.kinds.items()] == [("SECTION", 4), ("OTHER", 1)]
    assert w.top_anchors is not None
    assert [(a.anchor_id, a.event_id) for a in w.top_anchors] == [
        ("SECTION_001", "e-1"),
        ('SECTION_"2', None),
    ]
    assert w.models is not None
    assert [m.model for m in w.models] == ["m-2", None]
    assert w.other_models is not None
    assert w.other_models.model_count == 40
    assert (w.latency_count, w.latency_p50_ms, w.latency_p95_ms) == (4, 120, 1792)


def test_a_window_without_latencies_or_other_models_leaves_them_out() -> None:
    text = '{"kinds":{},"top_anchors":[],"models":[],"latency_count":0}'
    w = WindowAggregate(**window(**breakdown_figures(text)))
    assert (w.kinds, w.top_anchors, w.models, w.latency_count) == ({}, [], [], 0)
    assert (w.other_models, w.latency_p50_ms, w.latency_p95_ms) == (None, None, None)
    # A window from a job before the breakdown, or a late tally: nothing.
    assert breakdown_figures(None) == {}


def test_the_breakdown_column_sits_before_the_letter() -> None:
    assert WINDOW_FIELDS[-2:] == ("breakdown", "letter")


def test_a_breakdown_the_contract_refuses_is_dropped_and_the_window_judged() -> None:
    judge = DocTypeJudge("6", StaticRule(), QualityLimits())
    bad = orjson.loads(FULL)
    bad["models"][0]["model"] = "m\u200b"  # a format character: not a ModelVersion
    verdict = judge.judge(window(**bad))
    assert verdict.window.request_count == 45
    assert all(getattr(verdict.window, name) is None for name in BREAKDOWN_FIELDS)
    good = judge.judge(window(**breakdown_figures(FULL)))
    assert good.window.models is not None
