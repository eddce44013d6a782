"""Policy behaviour that mutation testing (`make mutate`, docs/testing.md) found no test
held: the pooled evidence's floor, the extreme threshold's tail estimate, the long-run
variance of a wandering level, skewed but independent windows, a drift event's request
count, and the refit queue's limit. Each case states what the rule is for, with figures
worked out from the rule's own description."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.fitting import EXTREME_SPACINGS, fit_baseline
from anchorwatch.policy.incident_types import IncidentChange, drift_event
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.refit import RefitHistory, RefitSchedule
from anchorwatch.policy.series import (
    BLOCK_WINDOWS,
    MEASURED_MIN_BLOCKS,
    autocorrelation,
    long_run_ratio,
)
from anchorwatch.policy.sigma import TAIL_WINDOWS
from anchorwatch.policy.window import judge_window, spread_at, verdict_for
from tests.support.policy import baseline as fitted_baseline

T0 = 1_764_374_400_000  # 2025-11-29T00:00Z
MIN = 60_000


def baseline(doc_type: str = "nda", **kw: Any) -> Baseline:
    return fitted_baseline(doc_type, t0=T0, **kw)


def win(i: int, mean: float, n: int = 40, doc_type: str = "nda") -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=T0 + i * MIN,
        window_end_ms=T0 + (i + 1) * MIN,
        request_count=n,
        mean_drift=min(1.0, max(0.0, mean)),
    )


# --------------------------------------------------------------------- pooled evidence


def windows_until_pooled_open(t: IncidentTracker, start: int, mean: float, n: int) -> int:
    for k in range(1, 100):
        changes = t.observe(win(start + k - 1, mean, n=n))
        if any(c.kind == "opened" for c in changes):
            assert changes[0].incident.evidence == "pooled"
            return k
    raise AssertionError("never opened")


def test_normal_traffic_banks_no_pooled_evidence() -> None:
    """The CUSUM starts at zero and never goes below it: an hour of small windows at the
    center leaves nothing behind, and a rise then opens after exactly the windows its
    per-window evidence adds up to the pooling threshold, as on a fresh tracker."""
    policy = PolicyConfig(rules=(RuleConfig(name="drift"),))
    b = baseline()
    n, mean = 4, 0.33  # too few requests to judge alone, under the threshold
    se = spread_at(b, n)
    margin = b.threshold - b.center
    step = (mean - b.center) / se - policy.pooling_shift * margin / se / 2.0
    expected = policy.pooling_threshold / step
    assert 0 < step < policy.pooling_threshold / 2
    assert abs(expected - round(expected)) > 0.1  # no rounding at the edge
    after_quiet = IncidentTracker(policy, {"nda": b})
    for i in range(60):
        assert after_quiet.observe(win(i, b.center, n=n)) == []
    (state,) = after_quiet.export_state()["states"]
    assert state["cusum"] == 0.0
    fresh = IncidentTracker(policy, {"nda": b})
    assert windows_until_pooled_open(after_quiet, 60, mean, n) == math.ceil(expected)
    assert windows_until_pooled_open(fresh, 60, mean, n) == math.ceil(expected)


def test_a_baseline_without_a_margin_is_never_adapted() -> None:
    """Adapting moves a baseline by the shift and keeps its margin; a baseline published
    with its threshold at its center (the contract allows it) has no margin to keep, so a
    flat new level stays an open incident, where the same level adapts a baseline with one."""

    def kinds(threshold: float) -> list[str]:
        t = IncidentTracker(
            PolicyConfig(rules=(RuleConfig(name="drift", pooling=False, adapt_after=20),)),
            {"nda": baseline(threshold=threshold)},
        )
        return [c.kind for i in range(60) for c in t.observe(win(i, 0.40))]

    assert kinds(0.35) == ["opened", "resolved"]
    assert kinds(0.30) == ["opened"]


def test_adapting_clears_that_types_pooled_evidence_and_no_other_types() -> None:
    """Evidence banked against the old level means nothing once the level is accepted:
    the adapting type's CUSUM starts again from zero; another type's banked evidence stays."""
    t = IncidentTracker(
        PolicyConfig(rules=(RuleConfig(name="drift", adapt_after=20),)),
        {"nda": baseline(), "sparse": baseline("sparse")},
    )
    for i in range(3):  # small windows a little high: evidence, no breach yet
        assert t.observe(win(i, 0.33, n=4, doc_type="sparse")) == []

    def cusum(doc_type: str) -> float:
        (state,) = [s for s in t.export_state()["states"] if s["doc_type"] == doc_type]
        return float(state["cusum"])

    banked = cusum("sparse")
    assert banked > 0
    kinds: list[str] = []
    for i in range(60):
        kinds += [c.kind for c in t.observe(win(i, 0.40))]
        if "resolved" in kinds:  # the shift, adapted
            break
    assert kinds == ["opened", "resolved"]
    assert cusum("nda") == 0.0
    assert cusum("sparse") == banked


def test_a_restart_keeps_the_state_of_rules_still_in_the_policy() -> None:
    """A rule dropped from the policy (same version) is forgotten on restart; the others
    carry on, whatever order the saved state lists them in."""
    sustained = RuleConfig(
        name="sustained", compare="static", pooling=False, open_after=100, open_after_critical=100
    )
    drift = RuleConfig(name="drift", pooling=False)
    before = IncidentTracker(PolicyConfig(rules=(sustained, drift)), {"nda": baseline()})
    opened = [c for i in range(3) for c in before.observe(win(i, 0.40))]
    assert [(c.kind, c.incident.rule) for c in opened] == [("opened", "drift")]
    state = before.export_state()
    assert [s["rule"] for s in state["states"]] == ["sustained", "drift"]
    after = IncidentTracker(PolicyConfig(rules=(drift,)), {"nda": baseline()}, state=state)
    assert after.open_incidents() == before.open_incidents() != []
    # It carries on as the same incident: the next window updates, it opens nothing.
    assert [c.kind for c in after.observe(win(3, 0.40))] == []


# --------------------------------------------------------------------- the fit


def test_the_extreme_allowance_is_the_mean_gap_of_the_top_windows_above_the_next() -> None:
    """Beyond the history: above its highest window by EXTREME_SPACINGS mean gaps of its
    TAIL_WINDOWS highest windows above the next one. A quiet day with eleven isolated
    spikes 0.40, 0.41 ... 0.50: the ten highest are 0.41..0.50 (mean 0.455), the next
    0.40, so the gap is 0.055 and the allowance 4.6 x 0.055."""
    rng = random.Random(3)
    windows = [win(i, 0.30 + rng.gauss(0.0, 0.002), 100) for i in range(1440)]
    spikes = [0.40 + 0.01 * k for k in range(TAIL_WINDOWS + 1)]
    for k, value in enumerate(spikes):
        windows[100 + 120 * k] = win(100 + 120 * k, value, 100)  # isolated, 2 h apart
    b = fit_baseline(
        "nda",
        windows,
        PolicyConfig(seasonality="off"),
        fitted_at_ms=T0 + 1440 * MIN,
        history_start_ms=T0,
        history_end_ms=T0 + 1440 * MIN,
    ).baseline
    top = sorted(spikes)
    gap = sum(top[1:]) / TAIL_WINDOWS - top[0]
    assert gap == pytest.approx(0.055)
    expected = b.center + (top[-1] - b.center) + EXTREME_SPACINGS * gap
    assert expected > b.critical_threshold  # the tail, not critical, decides
    assert expected - b.center - (top[-1] - b.center) > b.threshold - b.center
    assert b.extreme_threshold == pytest.approx(expected)


NOISE = 0.01  # window noise sd
PERIOD = 480  # windows: the level goes round every 8 hours


def wandering(amplitude: float, seed: int, days: int = 7) -> list[WindowAggregate]:
    """Window noise under a level going slowly round a sine (a wander too small for any
    lag-1 correlation to show)."""
    rng = random.Random(seed)
    return [
        win(i, 0.40 + amplitude * math.sin(2 * math.pi * i / PERIOD) + rng.gauss(0.0, NOISE))
        for i in range(days * 1440)
    ]


def true_ratio(amplitude: float) -> float:
    """Var(sum of an hour's windows) / (windows per hour x Var(one window)) for that series:
    the sine's hour sums have amplitude ``amplitude x sin(pi b / P) / sin(pi / P)``."""
    b = BLOCK_WINDOWS
    level = amplitude**2 / 2
    gain = (math.sin(math.pi * b / PERIOD) / math.sin(math.pi / PERIOD)) ** 2
    return (b * NOISE**2 + level * gain) / (b * (NOISE**2 + level))


def test_a_level_wander_under_noise_is_measured_once_it_shows_beyond_sampling_error() -> None:
    """A week of windows whose hour sums vary twice as much as independent ones would:
    the lag-1 figure reads about 1, the measure of the hour sums about 2, well beyond its
    own sampling error on a week (a relative sd of ~0.13): the type gets the measured
    ratio, not the diluted lag-1 one."""
    amplitude = 0.0019
    assert true_ratio(amplitude) == pytest.approx(2.0, abs=0.05)
    ws = wandering(amplitude, seed=5)
    phi = autocorrelation(ws, 0.40)
    assert (1 + phi) / (1 - phi) < 1.2
    assert long_run_ratio(ws, 0.40) == pytest.approx(true_ratio(amplitude), rel=0.2)


def test_skewed_independent_windows_read_as_independent() -> None:
    """Independent windows from a skewed distribution (exponential: the mean sits above the
    median by a third of a standard deviation) show no correlation once the residuals are
    centred on their mean; centred on the median alone, every product of neighbours would
    carry that offset squared (~0.09 of the variance) as a false correlation."""
    rng = random.Random(9)
    ws = [win(i, 0.30 + 0.02 * rng.expovariate(1.0), 100) for i in range(2880)]
    assert autocorrelation(ws, 0.30) < 0.04
    assert long_run_ratio(ws, 0.30) < 1.1


# --------------------------------------------------------------------- downstream


def test_a_drift_event_carries_its_windows_request_count() -> None:
    t = IncidentTracker(
        PolicyConfig(rules=(RuleConfig(name="drift", pooling=False, resolve_when_silent=2),)),
        {"nda": baseline()},
    )
    changes: list[IncidentChange] = []
    for i, n in enumerate([37, 41]):  # opens on the second breaching window
        changes += t.observe(win(i, 0.37, n=n))
    (opened,) = changes
    event = drift_event(opened, emitted_at_ms=T0 + 2 * MIN)
    assert (event.evidence.window_start_ms, event.evidence.request_count) == (T0 + MIN, 41)
    assert event.evidence.baseline_version == "b-test"  # what it was judged against
    # Resolved for silence: no window, no requests.
    silent = t.advance("nda", T0 + 30 * MIN)
    resolved = drift_event(silent[-1], emitted_at_ms=T0 + 30 * MIN)
    assert resolved.event_type == "ANCHOR_DRIFT_RESOLVED"
    assert resolved.evidence.request_count == 0
    assert resolved.evidence.baseline_version == "b-test"  # the incident's, without a window


def test_a_verdict_names_the_baseline_it_was_judged_against() -> None:
    window = win(0, 0.37)
    verdict = verdict_for(window, judge_window(window, baseline(version="b1-abc")), "job-7")
    assert (verdict.baseline_version, verdict.breach_level) == ("b1-abc", "warning")
    fallback = verdict_for(window, judge_window(window, None), "job-7")
    assert fallback.baseline_version is None


def test_an_hour_that_runs_hot_keeps_its_thresholds_probabilities() -> None:
    """An hourly profile moves the thresholds with the hour's center, the margins kept,
    but never past 1.0: a drift score cannot exceed it, and the verdict's figures are
    probabilities the contract checks."""
    hourly = [0.30] * 24
    hourly[0] = 0.97  # T0 is 00:00Z, so 00:30Z sits on hour 0's center: 0.35 + 0.67 = 1.02
    b = baseline(hourly_center=hourly)
    window = win(30, 0.99)
    judgement = judge_window(window, b)
    assert (judgement.threshold, judgement.critical_threshold) == (1.0, 1.0)
    verdict = verdict_for(window, judgement, "job-7")
    assert (verdict.threshold, verdict.breach_level) == (1.0, "none")


def test_the_static_rule_says_why_it_applies() -> None:
    def why(b: Baseline | None) -> list[str]:
        return [r.message for r in judge_window(win(0, 0.5), b).reasons if r.code == "static_rule"]

    assert why(None) == ["no baseline yet: static rule applies"]
    thin = baseline(status="insufficient_history")
    assert why(thin) == ["baseline has too little history: static rule applies"]


def test_a_second_adaptation_moves_the_history_on_again() -> None:
    """Each accepted shift starts the type's history anew; a later shift moves it on."""
    h = RefitHistory(RefitSchedule(interval_ms=MIN, history_ms=1440 * MIN, min_new_windows=1))
    for i in range(40):
        h.add(win(i, 0.3 if i < 10 else 0.5 if i < 25 else 0.7))
    for incident, first in (("i1", 10), ("i2", 25)):
        h.incident(
            "nda",
            incident,
            first_breach_ms=T0 + first * MIN,
            resolved_at_ms=T0 + 40 * MIN,
            resolution="adapted",
        )
        starts = [(w.window_start_ms - T0) // MIN for w in h.usable("nda")]
        assert starts == list(range(first, 40))
    # A late window from between the two shifts does not come back.
    h.add(win(20, 0.5))
    assert {w.mean_drift for w in h.usable("nda")} == {0.7}


def test_a_refit_may_wait_for_as_little_as_one_new_window() -> None:
    """The service's ``refit_min_windows`` may be 1: a schedule takes it, not 0."""
    h = RefitHistory(RefitSchedule(interval_ms=MIN, history_ms=1440 * MIN, min_new_windows=1))
    h.add(win(0, 0.3))
    assert [f.doc_type for f in h.due(T0 + 60 * MIN, lambda d: None)] == ["nda"]
    with pytest.raises(ValueError, match="min_new_windows >= 1"):
        RefitSchedule(interval_ms=MIN, history_ms=MIN, min_new_windows=0)


def test_the_refit_queue_takes_at_most_its_limit_longest_unfitted_first() -> None:
    h = RefitHistory(RefitSchedule(interval_ms=MIN, history_ms=1440 * MIN, min_new_windows=5))
    for doc_type in ("a", "b", "c"):
        for i in range(10):
            h.add(win(i, 0.3, doc_type=doc_type))
    h.fitted("b", fitted_at_ms=T0 - 10 * MIN, history_end_ms=T0 - 10 * MIN)
    h.fitted("c", fitted_at_ms=T0 - 20 * MIN, history_end_ms=T0 - 20 * MIN)
    now = T0 + 60 * MIN
    never = [f.doc_type for f in h.due(now, lambda d: None)]
    assert never == ["a", "c", "b"]  # never fitted, then oldest fit first
    assert [f.doc_type for f in h.due(now, lambda d: None, limit=2)] == ["a", "c"]
    assert [f.doc_type for f in h.due(now, lambda d: None, limit=0)] == []


def alternating_wander(amplitude: float, days: float = 7) -> list[WindowAggregate]:
    """The sine wander under noise that alternates +-NOISE: an hour (an even number of
    windows) of that noise sums to 0, so the hour sums vary by the sine alone and the
    measured ratio is known exactly, with no sampling luck."""
    return [
        win(i, 0.40 + amplitude * math.sin(2 * math.pi * i / PERIOD) + NOISE * (-1) ** (i + 1))
        for i in range(int(days * 1440))
    ]


def alternating_ratio(amplitude: float) -> float:
    level = amplitude**2 / 2
    gain = (math.sin(math.pi * BLOCK_WINDOWS / PERIOD) / math.sin(math.pi / PERIOD)) ** 2
    return level * gain / (BLOCK_WINDOWS * (NOISE**2 + level))


def test_a_measured_ratio_counts_from_twice_its_sampling_error_above_the_lag1_one() -> None:
    """On a week the measure's relative sampling error is sqrt(8 x 60 / (3 x 10080)) =
    0.126: a measured ratio counts from 1.252 (twice that above the lag-1 figure, 1 here).
    A wander measured at 1.23 stays at 1; one measured at 1.35 is taken as measured."""
    error = math.sqrt(8 * BLOCK_WINDOWS / (3 * 7 * 1440))
    below, above = alternating_ratio(0.0021), alternating_ratio(0.0022)
    assert below < 1 + 2 * error < above < 1 + 3 * error
    assert long_run_ratio(alternating_wander(0.0021), 0.40) == 1.0
    assert long_run_ratio(alternating_wander(0.0022), 0.40) == pytest.approx(above, rel=0.02)


def test_a_history_shorter_than_half_a_day_is_judged_on_lag1_alone() -> None:
    """On fewer than MEASURED_MIN_BLOCKS hours the hour sums are too few to measure a
    long-run ratio (one incident's hour would pass for correlation): a wander that reads
    as a ratio near 3 on 12 hours is not measured on 11."""
    assert MEASURED_MIN_BLOCKS * BLOCK_WINDOWS == 720
    assert long_run_ratio(alternating_wander(0.003, days=0.5), 0.40) > 2.0
    assert long_run_ratio(alternating_wander(0.003, days=11 / 24), 0.40) == 1.0


def test_exactly_min_windows_windows_are_enough_for_a_fitted_baseline() -> None:
    policy = PolicyConfig()
    ws = [win(i, 0.40 + 0.01 * ((i * 7) % 5 - 2)) for i in range(policy.min_windows)]
    span = {"fitted_at_ms": T0, "history_start_ms": T0, "history_end_ms": T0 + 60 * MIN}
    assert fit_baseline("nda", ws, policy, **span).baseline.status == "fitted"
    fewer = fit_baseline("nda", ws[1:], policy, **span).baseline
    assert fewer.status == "insufficient_history"


def test_a_history_of_twenty_windows_has_no_tail_to_read() -> None:
    """The tail quantile rests on at least TAIL_WINDOWS (10) windows beyond it: on 20 that
    is the median, whose normal quantile is 0: no tail estimate (and no division by it)."""
    ws = [win(i, 0.40 + 0.01 * ((i * 7) % 5 - 2)) for i in range(2 * TAIL_WINDOWS)]
    span = {"fitted_at_ms": T0, "history_start_ms": T0, "history_end_ms": T0 + 20 * MIN}
    b = fit_baseline("nda", ws, PolicyConfig(), **span).baseline
    assert b.status == "insufficient_history"
    assert b.spread > 0


def test_a_resolved_incident_is_not_reopened_by_the_evidence_it_left() -> None:
    """The pooled evidence that built up during an incident falls back by only 1.25 per
    window at the center, so at its resolution some is left (2.75 here). It is spent: two
    later windows below the threshold (0.34 against 0.35, 2.75 of evidence each) re-open
    nothing, as they open nothing on a fresh tracker (a third would, on either)."""
    policy = PolicyConfig(rules=(RuleConfig(name="drift"),))
    t = IncidentTracker(policy, {"nda": baseline()})
    kinds: list[str] = []
    i = 0
    for _ in range(6):
        kinds += [c.kind for c in t.observe(win(i, 0.50))]
        i += 1
    assert kinds[:1] == ["opened"]
    while "resolved" not in kinds:
        kinds += [c.kind for c in t.observe(win(i, 0.30))]
        i += 1
        assert i < 60
    fresh = IncidentTracker(policy, {"nda": baseline()})
    for k in range(2):
        assert t.observe(win(i + k, 0.34)) == []
        assert fresh.observe(win(k, 0.34)) == []
    assert [c.kind for c in t.observe(win(i + 2, 0.34))] == ["reopened"]
    assert [c.kind for c in fresh.observe(win(2, 0.34))] == ["opened"]
