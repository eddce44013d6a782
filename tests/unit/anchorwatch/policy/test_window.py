from __future__ import annotations

import pytest

from anchorwatch.contracts import Baseline
from anchorwatch.policy.window import (
    FLAT_RUN,
    FlatLine,
    QualityLimits,
    StaticRule,
    judge_window,
)
from tests.support.policy import T0, window


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
    [
        (0.42, 50, "none"),
        (0.43, 50, "warning"),
        (0.56, 50, "critical"),
        (0.45, 9, "none"),  # above the threshold, too few requests to tell
        (0.9, 9, "critical"),  # too few for the threshold alone, but 9 standard errors up
    ],
)
def test_baseline_figures_come_from_the_baseline_record(mean: float, n: int, level: str) -> None:
    j = judge_window(window(mean, n), baseline())
    assert (j.rule, j.breach_level, j.baseline_version) == ("baseline", level, "b7")
    assert (j.threshold, j.critical_threshold, j.min_requests) == (0.42, 0.55, 10)


def test_a_hot_type_under_the_static_rule_is_cool_for_its_own_baseline_and_vice_versa() -> None:
    assert judge_window(window(0.5, 50), baseline()).breach_level == "warning"
    assert judge_window(window(0.5, 50), None).breach_level == "none"


def test_too_few_requests_is_explained_not_raised() -> None:
    # 0.5 over 3 requests: se 0.03 x sqrt(40 / 3) = 0.11, so 0.2 up is under 3 of them.
    j = judge_window(window(0.5, 3), baseline())
    assert j.breach_level == "none"
    assert [r.code for r in j.reasons] == ["too_few_requests"]


def test_a_small_window_counts_when_it_clears_the_threshold_by_its_own_standard_errors() -> None:
    """min_requests is the size from which the threshold alone decides; a smaller window
    breaches only when its mean is significance standard errors up at its own size. Both
    conditions only tighten as the sensitivity rises, so a higher sensitivity never judges
    a window that a lower one ignores."""
    assert judge_window(window(0.9, 3), baseline()).breach_level == "critical"
    assert judge_window(window(0.9, 3), None).breach_level == "none"  # static: min_requests


def test_drops_and_flat_lines_are_diagnosed_not_raised() -> None:
    drop = judge_window(window(0.02, 50), baseline())
    assert drop.breach_level == "none"
    assert [r.code for r in drop.reasons] == ["drift_drop"]
    assert "0.300" in drop.reasons[0].message
    assert judge_window(window(0.25, 50), baseline()).reasons == []  # within normal
    flat = judge_window(window(0.3, 50, stddev_drift=0.0), baseline())
    assert [r.code for r in flat.reasons] == ["flat_line"]
    assert judge_window(window(0.3, 50, stddev_drift=0.01), baseline()).reasons == []
    # Too few requests to tell, or no baseline: no diagnosis.
    assert judge_window(window(0.02, 3), baseline()).reasons == []
    assert [r.code for r in judge_window(window(0.02, 50), None).reasons] == ["static_rule"]


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
    assert codes == [
        "zero_anchors",
        "snapshot_disabled",
        "kl_divergence_spike",
        "resample_burst",
        "drift_drop",  # 0.1 against a normal of 0.3
    ]
    assert (
        judge_window(
            w,
            baseline(),
            quality=QualityLimits(
                zero_anchor_share=0.6, disabled_share=0.6, resample_share=0.6, mean_kl_divergence=3
            ),
        ).reasons
        == judge_window(w, baseline()).reasons[-1:]  # the drop only
    )


def test_static_rule_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="threshold"):
        StaticRule(threshold=0.95, critical_threshold=0.9)
    with pytest.raises(ValueError, match="min_requests"):
        StaticRule(min_requests=0)


def test_a_fall_to_a_quarter_of_the_normal_is_a_drop_even_under_a_wide_margin() -> None:
    """A low, noisy type: its margin (0.19) is wider than its normal level (0.155), so no
    fall could clear the margin; a fall to near zero is a drop all the same, as long as it
    is significant at the window's size."""
    wide = baseline().model_copy(
        update={"center": 0.155, "spread": 0.0466, "threshold": 0.341, "min_requests": 12}
    )
    wide = wide.model_copy(update={"typical_request_count": 20.0})
    assert [r.code for r in judge_window(window(0.01, 20), wide).reasons] == ["drift_drop"]
    assert judge_window(window(0.06, 20), wide).reasons == []  # above a quarter... and noise
    # Not significant at its size: 3 standard errors at n=12 are 0.18, more than the fall.
    assert judge_window(window(0.01, 12), wide).reasons == []


def test_a_flat_line_shows_across_windows_that_carry_only_count_and_mean() -> None:
    """Windows without a standard deviation (a metric exported per minute) cannot show a
    flat line one by one; the FlatLine state a per-type judge keeps between them does."""
    state = FlatLine()
    varying = [0.30 + 0.003 * (i % 5) for i in range(100)]
    for mean in varying:
        state = state.after(window(mean, 100))
        assert not state.flat
    codes = []
    for _ in range(FLAT_RUN):
        state = state.after(window(0.2931, 100))
        codes.append(
            [r.code for r in judge_window(window(0.2931, 100), baseline(), flat=state).reasons]
        )
    assert codes[-1] == ["flat_line"]
    assert codes[:-1] == [[]] * (FLAT_RUN - 1)
    assert "0.2931" in state.reason().message
    # Windows without requests neither extend nor break it; nor does the rounding of an
    # average over another number of copies of the same drift.
    assert state.after(window(0.0, 0)) == state
    assert state.after(window(sum([0.2931] * 7) / 7, 7)).run == state.run + 1
    # It ends when the drift varies again.
    state = state.after(window(0.31, 100))
    assert not state.flat


def test_a_type_whose_level_holds_for_hours_is_not_diagnosed_for_holding() -> None:
    state = FlatLine()
    for level in (0.20, 0.21, 0.20, 0.22, 0.21) * 4:
        for _ in range(60):
            state = state.after(window(level, 100))
            assert not state.flat
    assert state.varying < 0.1


def test_a_window_with_zero_sd_and_a_flat_state_is_named_once() -> None:
    state = FlatLine()
    for i in range(100):
        state = state.after(window(0.30 + 0.001 * (i % 3), 100))
    for _ in range(FLAT_RUN):
        state = state.after(window(0.3, 50, stddev_drift=0.0))
    j = judge_window(window(0.3, 50, stddev_drift=0.0), baseline(), flat=state)
    assert [r.code for r in j.reasons] == ["flat_line"]
