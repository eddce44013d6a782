"""Baseline fitting: robust statistics, thresholds from the type's own spread, minimum sample
size, too little history, and the hourly profile on and off."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baseline, fit_baselines
from anchorwatch.policy.series import (
    _t_tail,
    autocorrelation,
    long_run_ratio,
    median,
    quantile,
    robust_sigma,
    spread_inflation,
)
from anchorwatch.policy.window import baseline_at, judge_window, spread_at
from tests.support.fit_series import MIN, T0, synthetic, w


def fit(windows: list[WindowAggregate], **policy: object) -> tuple[Baseline, tuple[str, ...]]:
    first = min(x.window_start_ms for x in windows)
    last = max(x.window_end_ms for x in windows)
    result = fit_baseline(
        "nda",
        windows,
        PolicyConfig.model_validate(policy),
        fitted_at_ms=last,
        history_start_ms=first,
        history_end_ms=last,
    )
    return result.baseline, result.notes


def test_robust_statistics_ignore_a_minority_of_outliers() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)
    rng = random.Random(3)
    clean = [rng.gauss(0.0, 1.0) for _ in range(4000)]
    assert robust_sigma(clean) == pytest.approx(1.0, rel=0.06)
    # A fifth of the values far off moves the robust figures only a little.
    dirty = clean[:3200] + [50.0] * 800
    assert abs(median(dirty)) < 0.35
    assert robust_sigma(dirty) < 1.4


@pytest.mark.parametrize(("rate", "sigma"), [(60.0, 0.05), (12.0, 0.08), (1.5, 0.07)])
def test_spread_is_the_window_mean_spread_at_the_typical_request_count(
    rate: float, sigma: float
) -> None:
    b, _ = fit(synthetic(3000, sigma=sigma, rate=rate), seasonality="off")
    assert b.status == "fitted"
    assert b.center == pytest.approx(0.3, abs=0.01)
    # spread * sqrt(typical) recovers the per-request sigma, busy or sparse.
    assert b.spread * math.sqrt(b.typical_request_count) == pytest.approx(sigma, rel=0.08)
    assert b.typical_request_count == pytest.approx(rate, rel=0.15, abs=1)
    assert spread_at(b, 4 * int(b.typical_request_count)) == pytest.approx(b.spread / 2)


def test_thresholds_follow_the_spread_with_a_floor_on_the_margin() -> None:
    wide, _ = fit(synthetic(2000, sigma=0.1, rate=5), seasonality="off")
    assert wide.threshold == pytest.approx(wide.center + 4.0 * wide.spread)
    assert wide.critical_threshold == pytest.approx(wide.center + 8.0 * wide.spread)
    # A busy, tight type: 4 spreads is a rise nobody cares about; the margin floor rules.
    tight, _ = fit(synthetic(2000, sigma=0.02, rate=100), seasonality="off")
    assert 4.0 * tight.spread < 0.05
    assert tight.threshold == pytest.approx(tight.center + 0.05)
    assert tight.critical_threshold == pytest.approx(tight.center + 0.2)
    floored, _ = fit(synthetic(2000, sigma=0.02, rate=100), seasonality="off", threshold_floor=0.6)
    assert floored.threshold == 0.6
    assert floored.critical_threshold >= floored.threshold
    other, _ = fit(synthetic(2000, sigma=0.1, rate=5), seasonality="off", sensitivity=6.0)
    # 1.5 times the margin, and a little more: on a finite history the prediction interval
    # of a new window widens faster than linearly in the sensitivity.
    ratio = (other.threshold - other.center) / (wide.threshold - wide.center)
    assert 1.5 <= ratio < 1.5 * 1.01


def test_min_requests_is_where_one_window_is_precise_enough() -> None:
    b, _ = fit(synthetic(2000, sigma=0.1, rate=40), seasonality="off")
    margin = b.threshold - b.center

    def enough(n: int) -> bool:
        return 3.0 * spread_at(b, n) <= margin + 1e-12

    assert enough(b.min_requests)
    assert not enough(b.min_requests - 1)
    # 4 spreads of margin, 3 standard errors: (3/4)^2 of the typical count.
    assert b.min_requests == math.ceil(b.typical_request_count * (3 / 4) ** 2)
    # It depends on the type's spread, not on a fixed 5: busy tight types need few.
    tight, _ = fit(synthetic(2000, sigma=0.02, rate=100), seasonality="off")
    assert tight.min_requests < b.min_requests
    sparse, _ = fit(synthetic(2000, sigma=0.1, rate=1.5), seasonality="off")
    assert sparse.min_requests == 3  # min_requests_floor: sparse types are pooled instead


def test_incidents_in_the_history_barely_move_the_baseline() -> None:
    clean = synthetic(2000, sigma=0.06, rate=20)
    b0, _ = fit(clean, seasonality="off")
    # 20% of the history inside incidents: sustained excursions of 40 windows each.
    spoiled = [
        w(i, x.mean_drift + 0.3, x.request_count) if i % 200 < 40 else x
        for i, x in enumerate(clean)
    ]
    b1, notes = fit(spoiled, seasonality="off")
    assert abs(b1.center - b0.center) < 0.5 * b0.spread
    assert b1.spread < 1.5 * b0.spread
    # The policy finds the ten excursions on a first fit and the second leaves them out:
    # the tail and the correlation are those of the clean history again.
    assert any("inside 10 excursion(s)" in n for n in notes), notes
    assert b1.p99 == pytest.approx(b0.p99, abs=0.01)
    assert b1.autocorrelation == b0.autocorrelation == 0.0


def test_the_excursions_the_policy_finds_in_the_history_are_left_out_of_the_fit() -> None:
    """A sparse type (1.5 requests a window) with three 10-window incidents (+0.3, about 4
    request sigmas) in 12 hours. Neighbours inside them look correlated, which would
    discount pooled evidence live. The policy, run over the history with a first fit,
    finds all three; the type is fitted again without them, as if they had not happened."""
    clean = synthetic(720, sigma=0.08, rate=1.5, seed=2)
    starts = (100, 340, 580)

    def minute(x: WindowAggregate) -> int:
        return (x.window_start_ms - T0) // MIN

    spoiled = [
        w(minute(x), x.mean_drift + 0.3, x.request_count)
        if any(s <= minute(x) < s + 10 for s in starts)
        else x
        for x in clean
    ]
    assert autocorrelation(spoiled, median([x.mean_drift for x in spoiled])) > 0.1
    b, notes = fit(spoiled, seasonality="off")
    assert any("inside 3 excursion(s)" in n for n in notes), notes
    assert b.autocorrelation == 0.0
    b0, _ = fit(clean, seasonality="off")
    assert b.center == pytest.approx(b0.center, abs=0.1 * b0.spread)
    assert b.spread == pytest.approx(b0.spread, rel=0.1)


def test_a_lag1_estimate_within_twice_its_sampling_error_counts_as_zero() -> None:
    """m pairs of independent windows give a lag-1 estimate within about 1 / sqrt(m) of 0:
    up to twice that it is read as 0; a real correlation beyond it is kept as measured."""
    rng = random.Random(3)
    x, series = 0.0, []
    for i in range(400):
        x = 0.3 * x + rng.gauss(0.0, 0.05)
        series.append(w(i, 0.4 + x, 20))
    assert 2 / math.sqrt(399) < autocorrelation(series, 0.4) < 0.45
    # Independent noise that happens to read 0.15 on its 99 pairs (seed 23), under 0.2.
    draws = random.Random(23)
    noise = [w(i, 0.4 + draws.gauss(0.0, 0.05), 20) for i in range(100)]
    mean = sum(x.mean_drift for x in noise) / len(noise)
    raw = sum(
        (a.mean_drift - mean) * (b.mean_drift - mean) for a, b in itertools.pairwise(noise)
    ) / sum((a.mean_drift - mean) ** 2 for a in noise)
    assert 0.1 < raw < 2 / math.sqrt(99)
    assert autocorrelation(noise, 0.4) == 0.0


def test_recurring_one_window_spikes_are_part_of_normal_and_widen_the_spread() -> None:
    """Isolated spikes that recur through the history are how this type behaves: a fit
    that ignored them (the MAD alone does) would page on every next one."""
    clean = synthetic(2000, sigma=0.06, rate=20)
    b0, _ = fit(clean, seasonality="off")
    spiky = [
        w(i, min(1.0, x.mean_drift + 0.2), x.request_count) if i % 50 == 7 else x
        for i, x in enumerate(clean)
    ]
    b1, _ = fit(spiky, seasonality="off")
    assert b1.threshold >= b0.center + 0.2  # a recurring spike is not above the threshold
    assert abs(b1.center - b0.center) < 0.5 * b0.spread


def test_a_flat_quantised_history_never_gets_a_zero_spread() -> None:
    """Values on a 0.01 grid, constant for hours: the MAD is 0, yet the spread is at least
    what the grid and the history's own upper tail allow."""
    windows = [w(i, 0.42 if (i // 300) % 2 else 0.43, 100) for i in range(2000)]
    b, _ = fit(windows, seasonality="off")
    assert b.spread >= 0.005 - 1e-9  # half a grid step
    spiky = [w(i, 0.45, 100) if i % 40 == 3 else x for i, x in enumerate(windows)]
    b2, _ = fit(spiky, seasonality="off")
    assert b2.spread > b.spread  # 2.5% of windows three steps up: part of its normal
    assert b2.threshold > 0.45


def test_autocorrelated_histories_are_measured_and_widen_the_spread() -> None:
    """AR(1) window means with phi 0.9: the fit measures the correlation and raises the
    spread for the fewer independent windows it rests on (half a day: ~38 of them)."""
    rng = random.Random(3)
    x, windows = 0.0, []
    for i in range(720):
        x = 0.9 * x + rng.gauss(0.0, 0.02 * math.sqrt(1 - 0.81))
        windows.append(w(i, 0.4 + x, 100))
    b, notes = fit(windows, seasonality="off")
    assert b.autocorrelation is not None
    assert 0.8 < b.autocorrelation < 0.97
    assert any("correlated" in n for n in notes)
    independent = [
        w(i, x.mean_drift, 100) for i, x in enumerate(sorted(windows, key=lambda v: v.mean_drift))
    ]
    rng.shuffle(independent)
    shuffled = [w(i, v.mean_drift, 100) for i, v in enumerate(independent)]
    b_iid, _ = fit(shuffled, seasonality="off")
    assert (b_iid.autocorrelation or 0.0) < 0.1
    assert b.spread > b_iid.spread  # same values, fewer independent ones: wider


def test_a_wandering_level_under_window_noise_is_measured_by_its_long_run_variance() -> None:
    """A level wandering as AR(1) with phi 0.97 under as much window noise: the lag-1
    correlation reads about half, an AR(1) with that phi would add up 3 times faster than
    independent windows, the series really adds up ~30 times faster. The fit stores the
    phi of an AR(1) with the measured long-run variance; independent windows stay at 0,
    and a few incidents in the history (sustained excursions) do not fake a correlation."""
    rng = random.Random(7)
    x, windows = 0.0, []
    for i in range(1440):
        x = 0.97 * x + rng.gauss(0.0, 0.02 * math.sqrt(1 - 0.97**2))
        windows.append(w(i, 0.4 + x + rng.gauss(0.0, 0.02), 100))
    assert 0.3 < autocorrelation(windows, 0.4) < 0.65
    ratio = long_run_ratio(windows, 0.4)
    assert ratio > 10
    b, _ = fit(windows, seasonality="off")
    assert b.autocorrelation is not None
    assert b.autocorrelation > 0.8

    noise = synthetic(1440, rate=100, seed=4)
    assert long_run_ratio(noise, 0.3) < 1.5
    incidents = [
        w(i, x.mean_drift + 0.2, x.request_count) if i % 240 < 10 else x
        for i, x in enumerate(noise)
    ]
    assert long_run_ratio(incidents, 0.3) < 1.5
    b_iid, _ = fit(incidents, seasonality="off")
    assert (b_iid.autocorrelation or 0.0) < 0.2


def test_the_extreme_threshold_is_beyond_the_history_by_the_margin_and_its_tail() -> None:
    """A window beyond anything the history showed: above its highest window by the margin
    and by 4.6 mean gaps of its top windows (the tail's scale), and never below critical.
    Heavy-tailed histories (Student-t, 3 degrees of freedom) keep their own spikes below
    it: over five weeks after one-day fits, at most a couple of windows top it."""
    rng = random.Random(11)
    gauss = [w(i, 0.3 + rng.gauss(0.0, 0.01), 100) for i in range(1440)]
    b, _ = fit(gauss, seasonality="off")
    assert b.extreme_threshold is not None
    highest = max(x.mean_drift for x in gauss)
    margin = b.threshold - b.center
    assert b.extreme_threshold >= highest + margin - 1e-9
    assert b.extreme_threshold >= b.critical_threshold
    # A light tail: 8 spreads (critical) are already beyond its highest window + margin.
    assert b.extreme_threshold == pytest.approx(b.critical_threshold)

    def student(count: int, seed: int) -> list[float]:
        r = random.Random(seed)
        return [
            0.3 + 0.01 * r.gauss(0.0, 1.0) / math.sqrt(r.gammavariate(1.5, 2.0) / 3.0)
            for _ in range(count)
        ]

    beyond = 0
    for seed in range(5):
        values = student(1440 + 7 * 1440, seed)
        heavy, _ = fit([w(i, v, 100) for i, v in enumerate(values[:1440])], seasonality="off")
        assert heavy.extreme_threshold is not None
        beyond += sum(v > heavy.extreme_threshold for v in values[1440:])
    assert beyond <= 2


def test_short_histories_widen_the_spread_to_a_prediction_interval() -> None:
    """The spread's factor puts `sensitivity` spreads where a new window lands as rarely as
    a normal one `sensitivity` sigmas up (Student t on the effective windows): about 1 on
    a day of independent windows, wide on a handful, capped at 3, growing with the
    sensitivity. The t tail itself matches closed forms (Cauchy; 2 degrees of freedom)."""
    assert _t_tail(1.0, 1.0) == pytest.approx(0.25)
    assert _t_tail(3.0, 2.0) == pytest.approx(0.5 * (1 - 3 / math.sqrt(11)))
    assert _t_tail(2.0, 1e7) == pytest.approx(0.02275, abs=1e-5)
    assert spread_inflation(1440, 4.0) == pytest.approx(1.0, abs=0.01)
    assert 1.2 < spread_inflation(22, 4.0) < 1.35
    assert 2.3 < spread_inflation(7, 4.0) < 3.0
    assert spread_inflation(2, 4.0) == 3.0
    for effective in (5.0, 20.0, 100.0, 1000.0):
        factors = [spread_inflation(effective, s) for s in (1.0, 2.0, 4.0, 6.0, 8.0)]
        assert factors == sorted(factors)


def test_a_type_that_runs_too_hot_to_rise_says_so() -> None:
    b, notes = fit(synthetic(500, center=0.98, sigma=0.01, rate=30), seasonality="off")
    assert b.threshold == 1.0
    assert any("cannot breach" in n for n in notes)


def test_too_little_history_keeps_the_static_rule() -> None:
    windows = synthetic(40, rate=20)
    b, notes = fit(windows)
    assert b.status == "insufficient_history"
    assert b.window_count == len(windows)
    assert (b.threshold, b.critical_threshold, b.min_requests) == (0.85, 0.9, 6)
    assert "insufficient history" in notes[0]
    verdict = judge_window(w(99, 0.5, 30), b)
    assert verdict.rule == "static"
    assert verdict.breach_level == "none"
    assert fit(windows, min_windows=20)[0].status == "fitted"


def test_seasonality_on_fits_an_hourly_profile_and_moves_the_thresholds_with_it() -> None:
    days = 4
    windows = synthetic(days * 1440, sigma=0.06, rate=30, daily=0.1)
    b, notes = fit(windows)
    assert b.hourly_center is not None, notes
    # Four days that agree: the profile is taken whole (each hour's center at its middle).
    for hour, c in enumerate(b.hourly_center):
        expected = 0.3 + 0.1 * math.sin(2 * math.pi * (hour + 0.5) / 24)
        assert c == pytest.approx(expected, abs=0.01)
    flat, _ = fit(windows, seasonality="off")
    # The daily swing is not noise: without the profile it inflates the spread.
    assert b.spread < flat.spread / 2
    # At 06:30 the center is 0.4: the thresholds move up with it, keeping their margin.
    at_six = baseline_at(b, T0 + 6 * 3_600_000 + 1_800_000)
    assert at_six.center == pytest.approx(b.hourly_center[6])
    assert at_six.threshold - at_six.center == pytest.approx(b.threshold - b.center)
    busy_morning = w(6 * 60 + 5, 0.42, 30)
    assert judge_window(busy_morning, at_six).breach_level == "none"
    # judge_window applies the hour's figures itself; without the profile it would fire.
    assert judge_window(busy_morning, b).breach_level == "none"
    assert (
        judge_window(busy_morning, b.model_copy(update={"hourly_center": None})).breach_level
        != "none"
    )


def test_short_seasonal_history_uses_what_it_has_shrunk_toward_the_flat_fit() -> None:
    """One day of a daily rhythm: a profile shrunk by days / (days + k), a one-off day
    weighing less than a rhythm seen again. From two days on the days' agreement decides:
    a rhythm that repeats is taken (nearly) whole. The peak never breaches the day after."""
    amplitudes = []
    for days in (1, 2, 3):
        b, notes = fit(synthetic(days * 1440, rate=30, daily=0.1, seed=days))
        assert b.hourly_center is not None, notes
        amplitudes.append(b.hourly_center[5] - b.center)
        peak = w(days * 1440 + 6 * 60 + 5, 0.4, 30)  # the daily peak, the day after
        assert judge_window(peak, b).breach_level == "none", days
    one_day = 1 / (1 + PolicyConfig().seasonal_shrinkage)
    crest = 0.1 * math.sin(2 * math.pi * 5.5 / 24)
    assert amplitudes[0] == pytest.approx(one_day * crest, abs=0.005)
    assert amplitudes[1] == pytest.approx(crest, abs=0.005)
    assert amplitudes[2] == pytest.approx(crest, abs=0.005)


def test_hourly_medians_of_noise_are_not_taken_for_a_rhythm() -> None:
    """Days that disagree hour by hour (noise, no rhythm): forced on, the profile stays
    near the flat center instead of copying each hour's median."""
    b, _ = fit(synthetic(3 * 1440, rate=2, seed=5), seasonality="hour_of_day")
    assert b.hourly_center is not None
    raw = [
        median([x.mean_drift for x in synthetic(3 * 1440, rate=2, seed=5)
                if (x.window_start_ms - T0) // 3_600_000 % 24 == h])
        for h in range(24)
    ]  # fmt: skip
    raw_wander = max(raw) - min(raw)
    assert max(b.hourly_center) - min(b.hourly_center) < raw_wander / 3


def test_seasonality_needs_each_hour_seen_and_says_why_not() -> None:
    half_day = synthetic(720, rate=30, daily=0.1)
    b, notes = fit(half_day)
    assert b.hourly_center is None
    assert any("seasonality off" in n for n in notes)
    b, notes = fit(synthetic(4 * 1440, rate=30, daily=0.1), seasonality="off")
    assert b.hourly_center is None
    assert not any("seasonality" in n for n in notes)


def test_seasonality_auto_skips_a_profile_that_does_not_help() -> None:
    flat = synthetic(4 * 1440, rate=30)
    b, notes = fit(flat)
    assert b.hourly_center is None
    assert any("seasonality not used" in n for n in notes)
    forced, _ = fit(flat, seasonality="hour_of_day")
    assert forced.hourly_center is not None


def test_fit_baselines_fits_each_type_and_versions_are_deterministic() -> None:
    windows = synthetic(200, rate=10) + [
        w(i, 0.6, 40, doc_type="medical_report") for i in range(100)
    ]
    seen: list[str] = []
    fits = fit_baselines(windows, PolicyConfig(), fitted_at_ms=T0 + 10**7, on_type=seen.append)
    assert set(fits) == {"nda", "medical_report"} == set(seen)
    b = fits["medical_report"].baseline
    assert (b.history_start_ms, b.history_end_ms) == (T0, T0 + 200 * MIN)
    assert b.center == 0.6
    again = fit_baselines(windows, PolicyConfig(), fitted_at_ms=T0 + 10**7)
    assert again["nda"].baseline == fits["nda"].baseline
    later = fit_baselines(windows, PolicyConfig(), fitted_at_ms=T0 + 10**7 + 1)
    assert later["nda"].baseline.version != fits["nda"].baseline.version
    assert fit_baselines([], PolicyConfig(), fitted_at_ms=T0) == {}
