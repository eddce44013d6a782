"""Production-like scenario families (anchorwatch.demo.scenarios) and their scoring (bench)."""

from __future__ import annotations

import itertools
import math
import statistics
from functools import cache

import pytest

from anchorwatch.backtest import backtest
from anchorwatch.demo.scenario_grid import scenario
from anchorwatch.demo.scenarios import (
    AR1_PHIS,
    FAMILIES,
    GRID,
    HOUR_MINUTES,
    MINUTE_MS,
    MODERATE_SPIKE_CAP,
    PRACTICAL_MARGIN,
    QUIET_KINDS,
    RECORD_FACTOR,
    Expect,
    Scenario,
    ScenarioLabel,
    TypeSeries,
    family_window_ms,
)
from anchorwatch.policy.config import PolicyConfig
from bench.detection_families import (
    Change,
    FamilyScore,
    changes_of,
    diagnosis_codes,
    family_checks,
    score_scenario,
)

T0 = 1_736_380_800_000  # the replay start of every scenario (START_MS + 3 days)
MIN = MINUTE_MS
DAY = 1440 * MIN
NEW_FAMILIES = ("bursty", "spiky", "daily", "quiet")


@cache
def small(family: str, seed: int = 1, types: int = 4, days: int = 2) -> Scenario:
    return scenario(family, seed, types=types, eval_days=days)


def window_size(t: TypeSeries) -> int:
    return t.windows[0].window_end_ms - t.windows[0].window_start_ms


def indexes(t: TypeSeries, lab: ScenarioLabel) -> range:
    """The label's windows as indexes into the type's per-window arrays (minutes, or the
    daily family's five-minute windows)."""
    size = window_size(t)
    origin = T0 - t.spec.fit_days * DAY
    return range((lab.start_ms - origin) // size, (lab.end_ms - origin) // size)


# --------------------------------------------------------------------------- the series


def test_same_seed_same_series_other_seed_other_series() -> None:
    a, b = scenario("ar1", 3, types=2, eval_days=1), scenario("ar1", 3, types=2, eval_days=1)
    assert [w.model_dump() for w in a.windows] == [w.model_dump() for w in b.windows]
    assert a.labels == b.labels
    c = scenario("ar1", 4, types=2, eval_days=1)
    assert [w.mean_drift for w in c.windows] != [w.mean_drift for w in a.windows]


def test_unknown_family_is_named() -> None:
    with pytest.raises(ValueError, match=r"family: expected one of .*got 'nope'"):
        scenario("nope")


def test_windows_are_valid_contracts_in_time_order() -> None:
    from anchorwatch.contracts import WindowAggregate

    for family in FAMILIES:
        for t in small(family).types:
            starts = [w.window_start_ms for w in t.windows]
            assert starts == sorted(set(starts))
            for w in t.windows[:: max(1, len(t.windows) // 50)]:
                WindowAggregate.model_validate(w.model_dump())  # would raise on a bad field


def test_request_counts_follow_the_tier() -> None:
    sc = scenario("iid", 1, types=4, eval_days=1)
    by_tier = {t.spec.tier: [w.request_count for w in t.windows] for t in sc.types}
    assert set(by_tier["fixed"]) == {100}
    assert 95 < statistics.fmean(by_tier["busy"]) < 105
    assert 18 < statistics.fmean(by_tier["normal"]) < 22
    # Poisson(2): about 13.5 % of minutes have no request and so no window.
    sparse = next(t for t in sc.types if t.spec.tier == "sparse")
    assert 0.8 < len(sparse.windows) / ((sparse.spec.fit_days + 1) * 1440) < 0.92
    assert 2.1 < statistics.fmean(by_tier["sparse"]) < 2.5  # 2 / (1 - e^-2) = 2.31


def robust_phi(values: list[float]) -> float:
    """Lag-1 autocorrelation of an AR(1) series from MADs of its levels and differences
    (var(x_t - x_t-1) = 2 var(x) (1 - phi)): isolated spikes barely move it."""

    def mad(xs: list[float]) -> float:
        mid = statistics.median(xs)
        return statistics.median(abs(x - mid) for x in xs)

    diffs = [b - a for a, b in itertools.pairwise(values)]
    return 1 - (mad(diffs) / mad(values)) ** 2 / 2


def test_ar1_series_have_the_lag1_autocorrelation_asked_for() -> None:
    sc = scenario("ar1", 2, types=16, eval_days=4)
    seen = set()
    for t in sc.types:
        if t.spec.tier != "fixed":  # fixed count: the mean is the process itself
            continue
        # The fit history holds no anomaly (only the odd moderate spike).
        history = [w.mean_drift for w in t.windows if w.window_start_ms < T0]
        history += [
            w.mean_drift
            for w in t.windows
            if w.window_start_ms >= T0
            and all(
                not lab.start_ms - 2 * 3_600_000 <= w.window_start_ms < lab.end_ms + 3_600_000
                for lab in t.labels
            )
        ]
        assert robust_phi(history) == pytest.approx(t.spec.phi, abs=0.04), t.spec
        seen.add(t.spec.phi)
    assert seen == set(AR1_PHIS)


def test_flat_family_is_on_a_grid_with_long_constant_runs() -> None:
    sc = small("flat", types=4, days=1)
    for t in sc.types:
        assert all(abs(w.mean_drift / GRID - round(w.mean_drift / GRID)) < 1e-9 for w in t.windows)
        history = [w.mean_drift for w in t.windows if w.window_start_ms < T0]
        same = sum(a == b for a, b in itertools.pairwise(history))
        assert same / (len(history) - 1) > 0.9
        longest = run = 1
        for a, b in itertools.pairwise(history):
            run = run + 1 if a == b else 1
            longest = max(longest, run)
        assert longest >= 2 * HOUR_MINUTES * (0.8 if t.spec.tier == "sparse" else 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_labels_cover_the_injected_anomalies_exactly(family: str) -> None:
    sc = small(family)
    for t in sc.types:
        inside: set[int] = set()
        for lab in t.labels:
            span = indexes(t, lab)
            inside.update(span)
            if lab.expect == "diagnose":
                assert all(t.held[m] for m in span), lab
                continue
            assert not any(t.held[m] for m in span)
            if lab.kind == "ramp":
                rise = [t.injected[m] for m in span]
                assert all(x > 0 for x in rise)
                assert max(rise) == pytest.approx(lab.magnitude, 1e-3)
                due = (lab.due - lab.start_ms) // MIN
                margin = max(PRACTICAL_MARGIN, 5 * t.spec.marginal_sigma)
                assert rise[due] >= margin - 1e-9 > rise[due - 1]
                continue
            under = sum(
                o.magnitude
                for o in t.labels
                if o.expect == "absorb" and o is not lab and o.start_ms <= lab.start_ms < o.end_ms
            )
            on_top = {
                m for o in t.labels if o is not lab and o.expect == "alert" for m in indexes(t, o)
            }
            for m in span:
                if m not in on_top:
                    assert t.injected[m] == pytest.approx(lab.magnitude + under, abs=1e-4), lab
        outside = [m for m in range(len(t.injected)) if m not in inside]
        assert not any(t.held[m] for m in outside)
        # Outside labels only single-window noise spikes, never anomaly-sized.
        assert all(t.injected[m] <= MODERATE_SPIKE_CAP for m in outside)


def test_windows_carry_the_injected_offsets() -> None:
    sc = small("iid")
    t = next(t for t in sc.types if t.spec.tier == "fixed")
    by_start = {w.window_start_ms: w.mean_drift for w in t.windows}
    for lab in t.labels:
        inside = [by_start[s] for s in range(lab.start_ms, lab.end_ms, MIN)]
        before = [by_start[s] for s in range(lab.start_ms - 120 * MIN, lab.start_ms, MIN)]
        lift = statistics.fmean(inside) - statistics.fmean(before)
        assert lift == pytest.approx(lab.magnitude, abs=4 * t.spec.sigma)


def test_drops_and_flat_lines_look_like_it() -> None:
    sc = small("drops")
    for t in sc.types:
        by_start = {w.window_start_ms: w for w in t.windows}
        for lab in t.labels:
            ws = [by_start[s] for s in range(lab.start_ms, lab.end_ms, MIN) if s in by_start]
            if lab.kind == "drop":
                assert max(w.mean_drift for w in ws) <= 0.02
                if "zero_anchors" in lab.codes:
                    assert min(w.zero_anchor_share or 0.0 for w in ws) >= 0.9
            elif lab.kind == "flat_line":
                assert len({w.mean_drift for w in ws}) == 1
                if t.spec.tier != "fixed":
                    assert {w.stddev_drift for w in ws} == {0.0}


def test_seasonal_types_swing_daily() -> None:
    t = small("seasonal", types=1, days=1).types[0]
    hourly: dict[int, list[float]] = {}
    for w in t.windows:
        hourly.setdefault((w.window_start_ms // 3_600_000) % 24, []).append(w.mean_drift)
    means = [statistics.fmean(v) for v in hourly.values()]
    assert max(means) - min(means) > 1.5 * t.spec.amplitude


# --------------------------------------------------------------------------- scoring


def lab(
    start: int,
    end: int,
    kind: str = "jump",
    expect: Expect = "alert",
    codes: tuple[str, ...] = (),
    due: int | None = None,
) -> ScenarioLabel:
    """A label of type "a", in minutes from the replay start."""
    due_ms = None if due is None else T0 + due * MIN
    return ScenarioLabel(
        "a", T0 + start * MIN, T0 + end * MIN, kind, 0.2, expect=expect, codes=codes, due_ms=due_ms
    )


def ch(minute: int, kind: str = "opened", incident: str = "i1", doc_type: str = "a") -> Change:
    return Change(doc_type, kind, T0 + minute * MIN, incident)


def run(
    changes: list[Change],
    labels: list[ScenarioLabel],
    codes: dict[ScenarioLabel, frozenset[str]] | None = None,
    window_ms: int = MIN,
) -> FamilyScore:
    return score_scenario(
        changes,
        labels,
        types=2,
        replay_start_ms=T0,
        replay_end_ms=T0 + 7 * 1440 * MIN,
        codes_seen=codes or {},
        window_ms=window_ms,
    )


def test_a_page_inside_the_label_or_its_grace_detects_it_once() -> None:
    labels = [lab(100, 110), lab(500, 505)]
    s = run([ch(102), ch(104, "resolved"), ch(106, "reopened"), ch(505, "opened", "i2")], labels)
    assert (s.alert_labels, s.detected, s.delays) == (2, 2, [3, 6])
    assert (s.true_alerts, s.false_alerts, s.clean_pages) == (3, 0, 0)
    assert (s.opened, s.reopened) == (2, 1)
    assert s.reopens_per_incident == 0.5
    assert s.precision == 1.0
    assert s.recall == 1.0


def test_a_page_after_the_grace_is_false_and_the_label_is_missed() -> None:
    s = run([ch(111)], [lab(100, 110)])
    assert (s.detected, s.true_alerts, s.false_alerts, s.clean_pages) == (0, 0, 1, 1)
    assert s.missed == [lab(100, 110)]
    assert s.precision == 0.0
    assert s.recall == 0.0
    assert s.type_weeks == pytest.approx(2.0)
    assert s.per_type_week(s.clean_pages) == 0.5


def test_an_incident_left_open_into_a_label_does_not_detect_it() -> None:
    s = run([ch(50)], [lab(100, 110)])
    assert s.detected == 0
    assert s.false_alerts == 1


def test_pages_of_other_types_do_not_count() -> None:
    s = run([ch(102, doc_type="b")], [lab(100, 110)])
    assert s.detected == 0
    assert s.false_alerts == 1


def test_an_escalation_is_a_page_but_not_an_alert() -> None:
    s = run([ch(50), ch(103, "updated"), ch(300, "updated")], [lab(100, 110)])
    assert s.detected == 1
    assert s.delays == [4]
    assert (s.true_alerts, s.false_alerts, s.clean_pages) == (0, 1, 2)


def test_a_ramp_counts_its_delay_from_when_it_is_due() -> None:
    ramp = lab(100, 400, "ramp", due=250)
    assert run([ch(200)], [ramp]).delays == [-49]
    assert run([ch(251)], [ramp]).delays == [2]
    assert run([ch(200)], [ramp]).true_alerts == 1


def test_a_level_shift_pages_once_and_is_absorbed_before_the_next_anomaly() -> None:
    labels = [lab(100, 5000, "shift", "absorb"), lab(3000, 3010)]
    good = run([ch(105), ch(300, "resolved"), ch(3001, "opened", "i2")], labels)
    assert (good.absorb_labels, good.absorb_paged, good.absorbed) == (1, 1, 1)
    assert (good.true_alerts, good.false_alerts, good.detected) == (2, 0, 1)
    assert good.recall == 1.0

    # Still open when the next anomaly comes: it is not absorbed (and not detected).
    stuck = run([ch(105)], labels)
    assert (stuck.absorbed, stuck.detected) == (0, 0)

    # Paging again on the new level: not absorbed; the second page is false.
    twice = run([ch(105), ch(200, "resolved"), ch(900, "opened", "i2")], labels)
    assert (twice.absorbed, twice.true_alerts, twice.false_alerts, twice.clean_pages) == (
        0,
        1,
        1,
        1,
    )

    missed = run([], labels)
    assert (missed.absorb_paged, missed.recall) == (0, 0.0)


def test_drops_must_not_page_and_should_carry_their_diagnosis() -> None:
    drop = lab(100, 200, "drop", "diagnose", ("drift_drop",))
    flat = lab(400, 500, "flat_line", "diagnose", ("flat_line",))
    codes = {drop: frozenset({"drift_drop", "static_rule"}), flat: frozenset({"zero_anchors"})}
    s = run([ch(450)], [drop, flat], codes)
    assert (s.diagnose_labels, s.diagnose_quiet, s.diagnosed) == (2, 1, 1)
    assert (s.false_alerts, s.clean_pages) == (1, 0)


def test_labels_cut_by_the_replay_are_not_scored() -> None:
    early = ScenarioLabel("a", T0 - 10 * MIN, T0 + 5 * MIN, "jump", 0.2)
    s = run([ch(2)], [early])
    assert s.alert_labels == 0
    assert s.recall != s.recall  # nan: nothing to find


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_runs_through_the_scoring(family: str) -> None:
    """Bookkeeping only (the policy's quality is the benchmark's business): every alert is
    true or false, every label is scored once."""
    sc = small(family)
    policy = PolicyConfig()
    result = backtest(sc.windows, policy, fit_until_ms=sc.eval_start_ms)
    codes = diagnosis_codes(
        sc.windows, sc.labels, result.baselines, policy, result.changes, sc.eval_start_ms
    )
    s = score_scenario(
        changes_of(result.changes),
        sc.labels,
        types=len(sc.types),
        replay_start_ms=sc.eval_start_ms,
        replay_end_ms=sc.eval_end_ms,
        codes_seen=codes,
        window_ms=sc.window_ms,
    )
    expects = [lab.expect for lab in sc.labels]
    assert s.alert_labels == expects.count("alert")
    assert (s.alert_labels > 0) == (family != "quiet")
    assert s.absorb_labels == expects.count("absorb")
    assert s.diagnose_labels == expects.count("diagnose") == len(codes)
    assert s.true_alerts + s.false_alerts == s.opened + s.reopened
    assert s.detected + len([m for m in s.missed if m.expect == "alert"]) == s.alert_labels
    assert s.type_weeks == pytest.approx(4 * 2 / 7)


def test_without_labelled_incidents_only_the_false_page_target_applies() -> None:
    quiet = FamilyScore(false_alerts=1, opened=1, clean_pages=1, type_weeks=2.0)
    assert family_checks("quiet", quiet) == {"<= 1 page per type per week on clean stretches": True}
    labelled = FamilyScore(alert_labels=2, detected=2, true_alerts=2, type_weeks=2.0)
    assert set(family_checks("bursty", labelled)) == {
        "precision >= 0.9",
        "recall >= 0.9",
        "<= 1 page per type per week on clean stretches",
    }


def test_the_grace_is_one_window_of_the_familys_size() -> None:
    """Daily windows are five minutes: a page four minutes after a label's end is still its
    first window after it."""
    assert run([ch(114)], [lab(100, 110)]).detected == 0
    assert run([ch(114)], [lab(100, 110)], window_ms=5 * MIN).detected == 1


# --------------------------------------------------------------------------- the field's families


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_field_families_are_deterministic_sized_and_in_range(family: str) -> None:
    a = scenario(family, 5, types=4, eval_days=1)
    b = scenario(family, 5, types=4, eval_days=1)
    assert [w.model_dump() for w in a.windows] == [w.model_dump() for w in b.windows]
    assert a.labels == b.labels
    assert [t.bursts for t in a.types] == [t.bursts for t in b.types]
    c = scenario(family, 6, types=4, eval_days=1)
    assert [w.mean_drift for w in c.windows] != [w.mean_drift for w in a.windows]

    size = 5 * MIN if family == "daily" else MIN
    assert a.window_ms == family_window_ms(family) == size
    assert a.eval_end_ms - a.eval_start_ms == DAY  # the replay is eval_days, whatever the size
    for t in a.types:
        assert {w.window_end_ms - w.window_start_ms for w in t.windows} == {size}
        assert all(w.window_start_ms % size == 0 for w in t.windows)
        assert all(0.0 <= w.mean_drift <= 1.0 for w in t.windows)
        assert t.windows[-1].window_end_ms <= a.eval_end_ms
        assert len(t.injected) == len(t.held) == (t.spec.fit_days + 1) * DAY // size
        for label in t.labels:
            assert (label.end_ms - label.start_ms) % size == 0
            assert label.start_ms % size == 0


def test_daily_is_a_five_minute_wave_with_two_days_of_history() -> None:
    sc = small("daily", types=4, days=2)
    per_day = DAY // (5 * MIN)
    for t in sc.types:
        spec = t.spec
        assert (spec.tier, spec.fit_days) == ("fixed", 2)
        history = [w for w in t.windows if w.window_start_ms < sc.eval_start_ms]
        assert len(history) == 2 * per_day
        assert history[0].window_start_ms == sc.eval_start_ms - 2 * DAY
        assert {w.request_count for w in t.windows} == {100}
        assert {w.stddev_drift for w in t.windows} == {None}
        assert all(w.mean_drift == round(w.mean_drift, 4) for w in t.windows)
        assert 0.05 <= spec.amplitude <= 0.2
        wave = [
            spec.center + spec.amplitude * math.sin(2 * math.pi * m / per_day + spec.phase)
            for m in range(len(history))
        ]
        residual = [w.mean_drift - x for w, x in zip(history, wave, strict=True)]
        if spec.sigma == 0.0:  # noiseless: the wave itself, to 4 places
            assert max(abs(r) for r in residual) <= 0.5e-4 + 1e-12
        else:
            assert 0.02 * spec.amplitude <= spec.sigma <= 0.05 * spec.amplitude
            assert statistics.stdev(residual) == pytest.approx(spec.sigma, rel=0.2)
        # The peak of the history is the wave's own, as high as the wave goes.
        top = max(w.mean_drift for w in history)
        assert top == pytest.approx(spec.center + spec.amplitude, abs=4 * spec.sigma + 1e-3)
        assert len(t.labels) == 2  # one jump a day
        for label in t.labels:
            assert label.kind == "jump"
            assert 3 <= (label.end_ms - label.start_ms) // (5 * MIN) <= 12
            assert label.magnitude >= PRACTICAL_MARGIN
    assert sorted(t.spec.sigma == 0.0 for t in sc.types) == [False, False, True, True]


def test_quiet_has_no_label_and_borrows_every_kind() -> None:
    sc = small("quiet", types=len(QUIET_KINDS), days=1)
    assert sc.labels == []
    assert [t.spec.kind for t in sc.types] == list(QUIET_KINDS)
    assert [t.spec.fit_days for t in sc.types] == [1, 2, 3, 1, 2, 3]
    for t in sc.types:
        assert t.spec.name.endswith("-" + t.spec.kind)
        assert not any(t.held)
        assert all(x <= MODERATE_SPIKE_CAP for x in t.injected)
        assert bool(t.bursts) == (t.spec.kind in ("bursty", "spiky"))


def robust(values: list[float]) -> tuple[float, float]:
    """Median and MAD-based sigma."""
    mid = statistics.median(values)
    return mid, 1.4826 * statistics.median(abs(x - mid) for x in values)


@pytest.mark.parametrize("family", ["bursty", "spiky"])
def test_ordinary_bursts_fill_the_history_and_labelled_spikes_break_their_record(
    family: str,
) -> None:
    sc = small(family, types=4, days=2)
    for t in sc.types:
        spec = t.spec
        fit = spec.fit_days * 1440
        history = [w.mean_drift for w in t.windows if w.window_start_ms < T0]
        level, sigma = robust(history)
        above = sum(x > level + 4 * sigma for x in history)
        # Ordinary bursts in the history, well past a Gaussian 4 sigma (a Gaussian would put
        # about one window in 16,000 there). Spiky types see as few as 4 spikes a day.
        assert above >= (5 * spec.fit_days if family == "bursty" else 1), spec
        assert max(history) > level + 6 * sigma
        assert statistics.fmean(history) > level  # skewed up
        assert max(t.bursts) <= spec.burst_cap
        assert max(t.bursts[:fit]) > 4 * spec.marginal_sigma
        # As often in the history as in the replay: the same process throughout.
        r = spec.burst_rate
        share = 1.2 * r / (1 + 0.2 * r)  # of windows in a burst (one in five lasts two)
        for part in (t.bursts[:fit], t.bursts[fit:]):
            expected = share * len(part)
            assert abs(sum(b > 0 for b in part) - expected) <= 5 * math.sqrt(expected) + 2
        if family == "spiky":
            assert spec.center <= 0.05
            assert spec.center + spec.burst_cap >= 6 * spec.center  # up to 6-10 x the level

        spikes = [lab for lab in t.labels if lab.kind == "spike"]
        assert len(spikes) == (0 if spec.tier == "sparse" else 2)
        by_start = {w.window_start_ms: w.mean_drift for w in t.windows}
        inside = {
            w.window_start_ms
            for w in t.windows
            for lab in t.labels
            if lab.start_ms <= w.window_start_ms < lab.end_ms
        }
        record = max(x for start, x in by_start.items() if start not in inside)
        for spike in spikes:
            assert spike.end_ms - spike.start_ms == MIN
            assert spike.magnitude >= RECORD_FACTOR[0] * spec.burst_cap - 1e-4
            assert spike.magnitude > max(t.bursts)
            assert by_start[spike.start_ms] > record  # the windows too: a new record
        for jump in (lab for lab in t.labels if lab.kind == "jump"):
            assert 5 <= (jump.end_ms - jump.start_ms) // MIN <= 60
            assert jump.magnitude >= max(PRACTICAL_MARGIN, 2 * spec.burst_median) - 1e-4
