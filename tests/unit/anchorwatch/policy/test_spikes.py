"""Pages a type keeps on its own history: the tail read past a short history, ordinary
spikes, the page budget, storms, and daily cycles learned from two days."""

from __future__ import annotations

import math
import random

import pytest

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy import fitting
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.incident_types import IncidentChange
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.spikes import NOISY, RECORD, SUSTAINED
from anchorwatch.policy.tail import fit_pareto, spike_record, sustained
from tests.support.policy import baseline as make_baseline

T0 = 1_736_121_600_000  # a Monday, 00:00 UTC
MIN = 60_000
DAY = 1440
PAGES = ("opened", "reopened", "updated")


def window(minute: int, mean: float, n: int = 100, size_min: int = 1) -> WindowAggregate:
    start = T0 + minute * MIN
    return WindowAggregate.model_construct(
        doc_type="t",
        window_start_ms=start,
        window_end_ms=start + size_min * MIN,
        request_count=n,
        mean_drift=min(1.0, max(0.0, mean)),
    )


def fit(windows: list[WindowAggregate], **policy: object) -> Baseline:
    end = windows[-1].window_end_ms
    return fit_baseline(
        "t",
        windows,
        PolicyConfig.model_validate(policy),
        fitted_at_ms=end,
        history_start_ms=windows[0].window_start_ms,
        history_end_ms=end,
    ).baseline


def pages(changes: list[IncidentChange]) -> list[IncidentChange]:
    return [c for c in changes if c.kind in PAGES]


def replay(b: Baseline, windows: list[WindowAggregate], **rule: object) -> list[IncidentChange]:
    policy = PolicyConfig(rules=(RuleConfig.model_validate({"name": "drift", **rule}),))
    return IncidentTracker(policy, {"t": b}).replay(windows)


# --------------------------------------------------------------------------- the tail


@pytest.mark.parametrize("shape", [0.0, 0.3])
def test_the_pareto_tail_reads_a_quantile_the_sample_never_reached(shape: float) -> None:
    """20,000 draws of a Pareto tail (exponential at shape 0): the level exceeded once in
    200,000 draws, ten times beyond the sample, from the fit over its 98th percentile."""
    rng = random.Random(7)

    def draw() -> float:
        u = 1.0 - rng.random()
        return -math.log(u) if shape == 0.0 else (u**-shape - 1.0) / shape

    values = [draw() for _ in range(20_000)]
    pareto = fit_pareto(values)
    assert pareto is not None
    assert pareto.shape == pytest.approx(shape, abs=0.1)
    risk = 5e-6
    truth = -math.log(risk) if shape == 0.0 else (risk**-shape - 1.0) / shape
    assert pareto.level(risk) == pytest.approx(truth, rel=0.35)
    assert pareto.level(risk) > max(values)
    assert fit_pareto(values[:19]) is None  # too few excesses to read a tail from


def test_a_spike_record_is_the_highest_level_held_for_k_windows_never_less() -> None:
    residuals: list[float | None] = [0.0] * 100
    residuals[10:12] = [0.5, 0.4]  # two windows: 0.5 for one, 0.4 held for two
    residuals[50] = None  # a gap breaks runs
    residuals[49], residuals[51] = 0.45, 0.45
    assert sustained(residuals, 2)[10] == 0.4
    record = spike_record(residuals, risk=1e-9, margin=0.3)  # too few excesses to extend
    assert record == [0.5, 0.4, 0.0]
    assert record == sorted(record, reverse=True)


# --------------------------------------------------------------------------- bursty types


def bursty(days: int, seed: int, first_minute: int = 0) -> list[WindowAggregate]:
    """A level with a little noise, and in 5% of windows a burst of 1-3 windows whose height
    is lognormal (median 0.05, capped at 0.3): a request counter's ordinary jumps."""
    rng = random.Random(seed)
    out, left, height = [], 0, 0.0
    for m in range(days * DAY):
        value = 0.2 + rng.gauss(0.0, 0.01)
        if left == 0 and rng.random() < 0.05:
            left = 1 + (rng.random() < 0.3) + (rng.random() < 0.1)
            height = min(0.3, rng.lognormvariate(math.log(0.05), 0.7))
        if left:
            value += height * rng.uniform(0.6, 1.0)
            left -= 1
        out.append(window(first_minute + m, value))
    return out


def test_a_bursty_type_keeps_its_page_budget_on_its_ordinary_spikes() -> None:
    history = bursty(2, seed=1)
    b = fit(history)
    assert b.spike_record is not None
    assert b.spike_record[0] > b.threshold - b.center
    week = bursty(7, seed=2, first_minute=2 * DAY)
    # Bursts above the threshold every day; the page budget is one a week.
    above = sum(w.mean_drift > b.threshold for w in week)
    assert above > 7 * 3
    assert len(pages(replay(b, week))) <= 1
    # Without the record, the same week pages many times: the record is what holds them.
    bare = b.model_copy(update={"spike_record": None})
    assert len(pages(replay(bare, week, storm_after=0))) >= 4


def test_a_spike_that_breaks_the_record_or_lasts_pages_and_says_which() -> None:
    """A spiky type (its one- and two-window spikes reach 0.1 above its center of 0.30,
    its threshold is 0.05 above): spikes within that do not page; one that tops the record
    by a third again pages at once, saying so; one that lasts longer than two windows
    pages on its third, however low."""
    b = make_baseline("t", spike_record=[0.1, 0.1, 0.04], extreme_threshold=0.9)
    calm = [window(m, 0.30) for m in range(30)]

    def after(values: list[float]) -> list[IncidentChange]:
        return pages(replay(b, calm + [window(30 + i, v) for i, v in enumerate(values)] + [
            window(30 + len(values) + i, 0.30) for i in range(10)
        ]))  # fmt: skip

    assert after([0.39, 0.38]) == []  # an ordinary two-window spike
    record = after([0.30 + 1.35 * 0.1 + 0.01])
    assert [c.kind for c in record] == ["opened"]
    reasons = {r.code: r.message for r in record[0].judgement.reasons}  # type: ignore[union-attr]
    assert "highest in 1 days of history" in reasons[RECORD]
    lasting = after([0.37, 0.37, 0.37, 0.37])
    assert [(c.kind, (c.window_start_ms - T0) // MIN) for c in lasting] == [("opened", 32)]
    reasons = {r.code: r.message for r in lasting[0].judgement.reasons}  # type: ignore[union-attr]
    assert "ordinary spikes last at most 2" in reasons[SUSTAINED]


def test_an_ordinary_spike_banks_no_pooled_evidence() -> None:
    """Busy independent windows are pooled; a spike within the record pools past the
    limit while it lasts, and must give that evidence back when it ends: the windows after
    it, a little above the center, would otherwise open an incident on what is left."""
    b = make_baseline("t", spike_record=[0.3, 0.3, 0.3], autocorrelation=0.0)
    margin = b.threshold - b.center
    windows = [window(m, b.center) for m in range(20)]
    windows += [window(20 + m, b.center + 0.25) for m in range(3)]
    windows += [window(23 + m, b.center + 0.1 * margin) for m in range(30)]
    assert pages(replay(b, windows)) == []
    # The same spike on a type whose spikes do not reach that high is an incident.
    low = b.model_copy(update={"spike_record": [0.1, 0.1, 0.1]})
    assert [c.kind for c in pages(replay(low, windows))][:1] == ["opened"]


# --------------------------------------------------------------------------- budget, storms


def test_the_budget_widens_margins_until_the_history_replays_within_it() -> None:
    """A fit too tight for its own history (the ordinary highs of a wandering level page
    every few hours against it): the budget step replays the history and widens the
    margins until it pages at most the budget (plus the few pages forgiven), and the
    baseline says how the threshold was chosen and what the replay paged."""
    rng = random.Random(3)
    history, x = [], 0.0
    for m in range(14 * DAY):
        x = 0.9 * x + rng.gauss(0.0, 0.005)
        history.append(window(m, 0.3 + x))
    tight = make_baseline(
        "t",
        t0=history[-1].window_end_ms,
        history_start_ms=history[0].window_start_ms,
        center=0.3,
        threshold=0.33,
        critical_threshold=0.45,
        typical_request_count=100.0,
        min_requests=10,
        autocorrelation=0.9,
    )
    policy = PolicyConfig()
    assert len(pages(replay(tight, history, storm_after=0))) > 10
    budgeted = fitting._budgeted(history, history, [], fitting.FitResult(tight, ()), policy)
    b = budgeted.baseline
    assert b.threshold > tight.threshold
    assert b.threshold_basis is not None
    assert "to keep the replay within the page budget" in b.threshold_basis
    assert b.replayed_pages_per_week is not None
    weeks = 2
    assert b.replayed_pages_per_week * weeks <= policy.page_budget * weeks + fitting.FORGIVEN_PAGES
    roomy = PolicyConfig(page_budget=1000.0)
    loose = fitting._budgeted(history, history, [], fitting.FitResult(tight, ()), roomy)
    assert loose.baseline.threshold == tight.threshold
    assert loose.baseline.threshold_basis == "the spread"


def test_a_type_that_pages_all_day_gets_one_noisy_incident() -> None:
    b = make_baseline("t")  # no spike record: every excursion is an excursion
    high, calm = b.threshold + 0.02, b.center
    windows = []
    for m in range(8 * 60):
        # Two windows up every 40 minutes: an incident, resolved, re-opened, ...
        windows.append(window(m, high if m % 40 in (0, 1) else calm))
    windows += [window(8 * 60 + m, calm) for m in range(150)]
    changes = replay(b, windows, storm_quiet=120, reopen_within=0)
    paged = pages(changes)
    assert [c.kind for c in paged] == ["opened", "opened", "opened"]
    noisy = paged[-1]
    assert noisy.incident.noisy
    message = next(r.message for r in noisy.judgement.reasons if r.code == NOISY)  # type: ignore[union-attr]
    assert message.startswith("noisy: 3 excursions in the last 24 h, none above its record")
    last = [c for c in changes if c.incident.incident_id == noisy.incident.incident_id][-1]
    assert last.kind == "resolved"
    assert last.incident.excursions >= 5
    assert (last.window_start_ms - T0) // MIN == 8 * 60 - 40 + 1 + 120
    quiet = replay(b, windows, storm_after=0, reopen_within=0)
    assert len(pages(quiet)) == 12  # the same excursions, one page each, without storms


# --------------------------------------------------------------------------- daily cycles


@pytest.mark.parametrize("noise", [0.0, 0.004])
def test_a_smooth_daily_wave_learned_from_two_days_does_not_page_at_its_peak(
    noise: float,
) -> None:
    """Five-minute samples of a daily wave (amplitude 0.15), two days of history: day three
    to nine, peaks included, page nothing; a rise of 0.1 on top of the wave does."""
    rng = random.Random(11)

    def wave(step: int) -> float:
        value = 0.4 + 0.15 * math.sin(2 * math.pi * step / 288) + rng.gauss(0.0, noise)
        return round(value, 4)

    history = [window(5 * s, wave(s), size_min=5) for s in range(2 * 288)]
    b = fit(history)
    assert b.hourly_center is not None
    later = [window(5 * s, wave(s), size_min=5) for s in range(2 * 288, 9 * 288)]
    assert pages(replay(b, later)) == []
    peak = 2 * 288 + 288 + 72  # day four's crest (sin = 1 at a quarter day)
    jumped = [
        w if not peak <= (w.window_start_ms - T0) // MIN // 5 < peak + 6
        else window(5 * ((w.window_start_ms - T0) // MIN // 5), w.mean_drift + 0.1, size_min=5)
        for w in later
    ]  # fmt: skip
    opened = pages(replay(b, jumped))
    assert len(opened) == 1
    assert peak <= (opened[0].window_start_ms - T0) // MIN // 5 < peak + 3


def weekly(days: int, seed: int) -> list[WindowAggregate]:
    """Ten-minute samples: a level 0.1 higher on Saturdays and Sundays, a little noise."""
    rng = random.Random(seed)
    out = []
    for s in range(days * 144):
        weekend = (s // 144) % 7 >= 5  # T0 is a Monday
        out.append(window(10 * s, 0.3 + 0.1 * weekend + rng.gauss(0.0, 0.005), size_min=10))
    return out


def test_a_weekly_cycle_is_expected_once_two_weeks_show_it() -> None:
    series = weekly(21, seed=4)
    split = 14 * 144
    b = fit(series[:split])
    assert b.weekday_offset is not None
    assert b.weekday_offset[5] - b.weekday_offset[0] == pytest.approx(0.1, abs=0.01)
    assert pages(replay(b, series[split:])) == []
    # One week cannot tell a weekly cycle from a bad weekend: the weekend pages.
    one_week = fit(series[: 7 * 144])
    assert one_week.weekday_offset is None
    assert len(pages(replay(one_week, series[split:]))) >= 1


def test_a_history_that_is_all_excursion_still_fits() -> None:
    """A static rule far below the type's level: its replay holds one incident from the
    first window to the last, so no window is left to read a spike record on."""
    rng = random.Random(8)
    history = [window(m, 0.5 + rng.gauss(0.0, 0.01)) for m in range(200)]
    low = {"threshold": 0.1, "critical_threshold": 0.2}
    b = fit(
        history, rules=[{"name": "static", "compare": "static", "pooling": False, "static": low}]
    )
    assert b.status == "fitted"
    assert b.spike_record is None
    assert b.page_budget == 1.0
