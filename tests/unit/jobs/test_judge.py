"""The drift job's per-doc-type logic without Flink: the latest baseline, the late tally and
the flat-line state, as the job's keyed function keeps them between windows."""

from __future__ import annotations

from typing import Any

import pytest

from anchorwatch.contracts import Baseline, BaselinePin, ContractError, encode
from anchorwatch.jobs.judge import DocTypeJudge, JudgeState
from anchorwatch.policy.window import FLAT_RUN, FlatLine, QualityLimits, StaticRule

T0 = 1_764_403_200_000
MIN = 60_000


def baseline(fitted_at_ms: int, threshold: float = 0.42, **kw: Any) -> Baseline:
    fields: dict[str, Any] = {
        "doc_type": "nda",
        "version": f"b-{fitted_at_ms}",
        "status": "fitted",
        "fitted_at_ms": fitted_at_ms,
        "history_start_ms": T0 - 86_400_000,
        "history_end_ms": T0,
        "window_count": 1440,
        "center": 0.30,
        "spread": 0.03,
        "p95": 0.35,
        "p99": 0.38,
        "typical_request_count": 100,
        "threshold": threshold,
        "critical_threshold": 0.55,
        "min_requests": 10,
    }
    return Baseline(**{**fields, **kw})


def raw(b: Baseline) -> str:
    return encode(b).decode()


def figures(minute: int, mean: float, n: int = 100, **kw: Any) -> dict[str, Any]:
    return {
        "doc_type": "nda",
        "window_start_ms": T0 + minute * MIN,
        "window_end_ms": T0 + (minute + 1) * MIN,
        "request_count": n,
        "mean_drift": mean,
        "stddev_drift": None,  # a figure the job did not compute
        **kw,
    }


def judge(state: JudgeState | None = None) -> DocTypeJudge:
    return DocTypeJudge("3", StaticRule(), QualityLimits(), state)


def test_the_latest_baseline_judges_and_an_older_one_never_replaces_it() -> None:
    j = judge()
    assert j.judge(figures(0, 0.40)).rule == "static"
    j.add_baseline(raw(baseline(T0, threshold=0.42)))
    assert j.judge(figures(1, 0.45)).breach_level == "warning"
    j.add_baseline(raw(baseline(T0 + 10 * MIN, threshold=0.50)))
    # Compaction and replays deliver an older record late: it is ignored.
    j.add_baseline(raw(baseline(T0 + 5 * MIN, threshold=0.36)))
    v = j.judge(figures(2, 0.45))
    assert (v.breach_level, v.threshold, v.baseline_version) == ("none", 0.50, f"b-{T0 + 10 * MIN}")


def test_an_invalid_baseline_is_refused_and_the_held_one_kept() -> None:
    j = judge()
    j.add_baseline(raw(baseline(T0)))
    with pytest.raises(ContractError):
        j.add_baseline('{"doc_type": "nda"}')
    assert j.state.baseline == raw(baseline(T0))


def test_late_events_are_reported_in_the_next_verdict_once() -> None:
    j = judge()
    j.add_late(3)
    j.add_late(4)
    assert j.judge(figures(0, 0.3)).window.late_count == 7
    assert j.judge(figures(1, 0.3)).window.late_count == 0
    j.add_late(2)
    assert j.state.late == 2


def test_the_state_continues_in_a_new_judge_as_the_keyed_state_does() -> None:
    """The Flink function builds a judge from its stored values for every element: the
    tally, the baseline and the flat-line state carry over through those values."""
    first = judge()
    first.add_baseline(raw(baseline(T0)))
    for i in range(60):
        first.judge(figures(i, 0.30 + 0.002 * (i % 4)))
    first.add_late(5)
    for i in range(60, 60 + FLAT_RUN - 1):
        first.judge(figures(i, 0.3071))
    stored = JudgeState(
        first.state.baseline,
        first.state.late,
        JudgeState.flat_from_json(first.state.flat_json()),
    )
    assert stored.flat == first.state.flat
    second = judge(stored)
    v = second.judge(figures(60 + FLAT_RUN - 1, 0.3071))
    # Count and mean only (no standard deviation): the flat line shows across windows.
    assert [r.code for r in v.reasons] == ["flat_line"]
    assert v.window.late_count == 0  # reported by the first judge's verdict after add_late
    # A judge without that state sees one window of that mean: no flat line.
    assert judge().judge(figures(60 + FLAT_RUN - 1, 0.3071)).reasons[0].code == "static_rule"


def test_a_missing_or_unreadable_flat_state_starts_afresh() -> None:
    assert JudgeState.flat_from_json(None) == FlatLine()
    assert JudgeState.flat_from_json("not json") == FlatLine()
    assert JudgeState.flat_from_json('{"mean": 0.1}') == FlatLine()


def test_a_pin_on_the_record_or_in_settings_judges_the_window() -> None:
    j = judge()
    j.add_baseline(raw(baseline(T0)))
    assert j.judge(figures(0, 0.45)).breach_level == "warning"
    # `anchorwatch baseline pin` publishes the record with the pin, dated later.
    j.add_baseline(raw(baseline(T0 + MIN, pin=BaselinePin(threshold=0.6, author="ana"))))
    v = j.judge(figures(1, 0.45))
    assert (v.breach_level, v.threshold, v.reasons[0].code) == ("none", 0.6, "pinned")
    # A pin in settings wins over the record's.
    pinned = DocTypeJudge(
        "3", StaticRule(), QualityLimits(), j.state, {"nda": BaselinePin(threshold=0.44)}
    )
    assert pinned.judge(figures(2, 0.45)).breach_level == "warning"
