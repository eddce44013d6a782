from __future__ import annotations

from typing import Any

import pytest

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.window import QualityLimits, StaticRule, judge_window

T0 = 1_764_403_200_000


def window(mean: float, n: int, **kw: Any) -> WindowAggregate:
    return WindowAggregate(
        doc_type="nda",
        window_start_ms=T0,
        window_end_ms=T0 + 60_000,
        request_count=n,
        mean_drift=mean,
        **kw,
    )


def baseline(status: str = "fitted") -> Baseline:
    return Baseline(
        doc_type="nda",
        version="b7",
        status=status,  # type: ignore[arg-type]
        fitted_at_ms=T0,
        history_start_ms=T0 - 86_400_000,
        history_end_ms=T0,
        window_count=1440,
        center=0.30,
        spread=0.03,
        p95=0.35,
        p99=0.38,
        typical_request_count=40,
        threshold=0.42,
        critical_threshold=0.55,
        min_requests=10,
    )


@pytest.mark.parametrize(
    ("mean", "n", "level"),
    [
        (0.85, 6, "none"),
        (0.851, 6, "warning"),
        (0.851, 5, "none"),
        (0.95, 100, "critical"),
        (0.9, 100, "warning"),
    ],
)
def test_static_rule_is_the_sources_rule(mean: float, n: int, level: str) -> None:
    j = judge_window(window(mean, n), None)
    assert (j.rule, j.breach_level, j.baseline_version) == ("static", level, None)
    assert j.reasons[0].code == "static_rule"


@pytest.mark.parametrize(
    ("mean", "n", "level"),
    [(0.42, 50, "none"), (0.43, 50, "warning"), (0.56, 50, "critical"), (0.9, 9, "none")],
)
def test_baseline_figures_come_from_the_baseline_record(mean: float, n: int, level: str) -> None:
    j = judge_window(window(mean, n), baseline())
    assert (j.rule, j.breach_level, j.baseline_version) == ("baseline", level, "b7")
    assert (j.threshold, j.critical_threshold, j.min_requests) == (0.42, 0.55, 10)


def test_a_hot_type_under_the_static_rule_is_cool_for_its_own_baseline_and_vice_versa() -> None:
    assert judge_window(window(0.5, 50), baseline()).breach_level == "warning"
    assert judge_window(window(0.5, 50), None).breach_level == "none"


def test_too_few_requests_is_explained_not_raised() -> None:
    j = judge_window(window(0.9, 3), baseline())
    assert j.breach_level == "none"
    assert [r.code for r in j.reasons] == ["too_few_requests"]


def test_insufficient_history_falls_back_to_static() -> None:
    j = judge_window(window(0.5, 50), baseline("insufficient_history"))
    assert (j.rule, j.breach_level) == ("static", "none")
    assert "too little history" in j.reasons[0].message


def test_data_quality_diagnoses() -> None:
    w = window(
        0.1,
        50,
        zero_anchor_share=0.5,
        disabled_share=0.3,
        resample_share=0.4,
        mean_kl_divergence=2.5,
    )
    codes = [r.code for r in judge_window(w, baseline()).reasons]
    assert codes == ["zero_anchors", "snapshot_disabled", "kl_divergence_spike", "resample_burst"]
    assert (
        judge_window(
            w,
            baseline(),
            quality=QualityLimits(
                zero_anchor_share=0.6, disabled_share=0.6, resample_share=0.6, mean_kl_divergence=3
            ),
        ).reasons
        == []
    )


def test_static_rule_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="threshold"):
        StaticRule(threshold=0.95, critical_threshold=0.9)
    with pytest.raises(ValueError, match="min_requests"):
        StaticRule(min_requests=0)
