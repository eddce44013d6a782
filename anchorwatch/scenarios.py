"""Production-like window series with labels, for evaluating detection where it is hard.

The traffic generator's windows are independent draws around a fixed level; production series
are not. Each scenario *family* here gives a population of doc types (``types``, tiers in
turn: busy ~100 requests per window, normal ~20, sparse ~2 (Poisson counts; windows without
requests are absent, as in the drift job), and ``fixed`` with exactly 100 requests and
nothing but count and mean, like a metric exported per minute). Every type has a short fit
history (1, 2 or 3 days, in turn) and then ``eval_days`` of one-minute windows to replay;
anomalies are injected in the replayed span only.

A window's mean is ``clip(center + season + noise + injected, 0, 1)`` plus, for the Poisson
tiers, the sampling noise of a mean over n requests (``request_sigma / sqrt(n)``).
``sigma`` is the noise's marginal standard deviation; anomalies are sized in the type's
marginal sigma of a window mean (noise and sampling together) and are never smaller than
``PRACTICAL_MARGIN``.

Families:

- ``iid``: independent Gaussian noise (the generator's world, as a control); jumps.
- ``ar1``: AR(1) noise, phi 0.5, 0.8, 0.9, 0.97 in turn; jumps of 6-10 sigma lasting 5-60
  windows, huge single-window spikes, and moderate single-window spikes that are noise.
- ``flat``: a level on a 0.01 grid that holds for hours and then moves a step or two;
  ordinary 1-3 step single-window spikes (noise) and jumps.
- ``heavy``: Student-t (3 degrees of freedom) noise, clipped at +-``MODERATE_SPIKE_CAP`` so
  the tail never reaches a huge spike; jumps and huge spikes.
- ``shift``: a persistent level shift (+0.05 to +0.15, at least 5 sigma) that lasts to the end
  (days): expected to alert once and then be absorbed; jumps before it and on top of it.
- ``seasonal``: a daily cycle of 3-6 sigma amplitude (at least 0.05), with 1-3 days of
  history; jumps on top of the cycle.
- ``trend``: drift creeping up linearly over 6-30 hours, holding for 1-6 hours, then back.
- ``drops``: the level falls to a new low (anchors stripped upstream: drift near 0, and for
  the Poisson tiers a zero-anchor share near 1) or goes flat (stops varying); jumps too.

Decisions the labels encode (``ScenarioLabel.expect``):

- ``alert``: must page. Jumps (``jump``); a single window at least ``HUGE_SPIKE`` above the
  level (``spike``, not on sparse types, whose single windows are too noisy to tell); a creep
  (``ramp``, from its first rising window to its end) must have paged once it has risen by
  ``max(PRACTICAL_MARGIN, 5 sigma)``: its ``due_ms``, from which its delay counts (an
  earlier page on the creep is true, with a delay of 0 or less). A single window of moderate
  size (3-6 sigma, at most ``MODERATE_SPIKE_CAP``) is noise and is not labelled: an alert on
  it is a false alarm.
- ``absorb``: a level shift: must page once, then stop paging (the new level is normal).
- ``diagnose``: a drop or a flat line (``drop``, ``flat_line``): not a drift incident; the
  verdicts should name it with one of the label's ``codes``.

Pure and deterministic: every type draws from its own ``random.Random`` seeded by (family,
seed, type index); the same arguments give the same windows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Literal

from anchorwatch.backtest import Label
from anchorwatch.contracts import WindowAggregate

MINUTE_MS: Final = 60_000
DAY_MINUTES: Final = 1440
HOUR_MINUTES: Final = 60
#: 2025-01-06 00:00 UTC (a Monday): days of the series are UTC days.
START_MS: Final = 1_736_121_600_000
#: The longest fit history: every type's replay starts this many days after START_MS.
MAX_FIT_DAYS: Final = 3
GRID: Final = 0.01
#: A single window at least this far above the level is an anomaly, whatever the type.
HUGE_SPIKE: Final = 0.3
#: Single-window noise spikes (and the heavy-tailed noise) stay within this of the level.
MODERATE_SPIKE_CAP: Final = 0.15
#: No anomaly is smaller than this rise in drift: smaller ones matter to no one.
PRACTICAL_MARGIN: Final = 0.1
#: Free time kept between two labelled events of a type, so each maps to one incident.
GAP_MINUTES: Final = 3 * HOUR_MINUTES

Expect = Literal["alert", "absorb", "diagnose"]
Tier = Literal["busy", "normal", "sparse", "fixed"]
TIERS: Final[tuple[Tier, ...]] = ("busy", "normal", "sparse", "fixed")
TIER_RATE: Final[dict[Tier, int]] = {"busy": 100, "normal": 20, "sparse": 2, "fixed": 100}
FAMILIES: Final = ("iid", "ar1", "flat", "heavy", "shift", "seasonal", "trend", "drops")
AR1_PHIS: Final = (0.5, 0.8, 0.9, 0.97)
#: Diagnosis codes that name a drop or a flat line in a verdict's reasons.
DROP_CODES: Final = ("drift_drop",)
STRIPPED_CODES: Final = ("drift_drop", "zero_anchors")
FLAT_LINE_CODES: Final = ("flat_line",)


@dataclass(frozen=True)
class ScenarioLabel(Label):
    """A labelled stretch of one type: what happened (``kind``) and what a policy should do
    (``expect``, see the module doc); ``codes``: diagnoses any one of which names it;
    ``due_ms``: from when it must have paged, when that is later than its start."""

    expect: Expect = "alert"
    codes: tuple[str, ...] = ()
    due_ms: int | None = None

    @property
    def due(self) -> int:
        return self.start_ms if self.due_ms is None else self.due_ms


@dataclass(frozen=True)
class TypeSpec:
    name: str
    tier: Tier
    fit_days: int
    center: float
    sigma: float  # marginal sd of the noise process
    request_sigma: float  # sd of one request's drift (Poisson tiers)
    phi: float  # lag-1 autocorrelation of the noise process
    amplitude: float = 0.0  # daily cycle (seasonal family)
    phase: float = 0.0

    @property
    def rate(self) -> int:
        return TIER_RATE[self.tier]

    @property
    def marginal_sigma(self) -> float:
        """Sd of a window mean around its level: noise plus sampling at the typical count."""
        sampling = 0.0 if self.tier == "fixed" else self.request_sigma**2 / self.rate
        return math.sqrt(self.sigma**2 + sampling)


@dataclass(frozen=True)
class TypeSeries:
    spec: TypeSpec
    windows: list[WindowAggregate]  # fit history, then the replayed span; in time order
    labels: list[ScenarioLabel]
    # Per minute from the first of the fit history: what was added to the level, and whether
    # the value was replaced (drops, flat lines). For checks and plots.
    injected: list[float]
    held: list[bool]


@dataclass(frozen=True)
class Scenario:
    family: str
    seed: int
    eval_start_ms: int  # where every type's fit history ends and its replay starts
    eval_end_ms: int
    types: tuple[TypeSeries, ...]

    @property
    def windows(self) -> list[WindowAggregate]:
        return [w for t in self.types for w in t.windows]

    @property
    def labels(self) -> list[ScenarioLabel]:
        return [lab for t in self.types for lab in t.labels]


def scenario(family: str, seed: int = 1, *, types: int = 12, eval_days: int = 7) -> Scenario:
    """``types`` doc types of ``family``, each with its fit history and ``eval_days`` days
    to replay."""
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {', '.join(FAMILIES)}, got {family!r}")
    if types < 1 or eval_days < 1:
        raise ValueError("types and eval_days: must be at least 1")
    eval_start = START_MS + MAX_FIT_DAYS * DAY_MINUTES * MINUTE_MS
    series = tuple(_type_series(family, seed, i, eval_start, eval_days) for i in range(types))
    return Scenario(
        family, seed, eval_start, eval_start + eval_days * DAY_MINUTES * MINUTE_MS, series
    )


# --------------------------------------------------------------------------- one type


class _Series:
    """The arrays of one type, minute by minute from the start of its fit history."""

    def __init__(self, spec: TypeSpec, minutes: int, first_ms: int) -> None:
        self.spec, self.minutes, self.first_ms = spec, minutes, first_ms
        self.added = [0.0] * minutes  # injected offsets on top of the level
        self.fixed: list[float | None] = [None] * minutes  # drops and flat lines: the value
        self.flat = [False] * minutes  # flat lines: the requests' drift stops varying too
        self.zero_share = [0.0] * minutes
        self.labels: list[ScenarioLabel] = []

    def ms(self, minute: int) -> int:
        return self.first_ms + minute * MINUTE_MS

    def label(
        self,
        start: int,
        end: int,
        kind: str,
        magnitude: float,
        expect: Expect = "alert",
        codes: tuple[str, ...] = (),
        due: int | None = None,
    ) -> None:
        self.labels.append(
            ScenarioLabel(
                self.spec.name,
                self.ms(start),
                self.ms(end),
                kind,
                round(magnitude, 4),
                expect=expect,
                codes=codes,
                due_ms=None if due is None else self.ms(due),
            )
        )

    def add(self, start: int, end: int, offset: float) -> None:
        for m in range(start, min(end, self.minutes)):
            self.added[m] += offset


def _type_series(
    family: str, seed: int, index: int, eval_start_ms: int, eval_days: int
) -> TypeSeries:
    rng = random.Random(f"anchorwatch-scenario/{family}/{seed}/{index}")
    tier = TIERS[index % len(TIERS)]
    fit_days = 1 + index % MAX_FIT_DAYS
    spec = _spec(rng, family, index, tier, fit_days)
    eval_minutes = eval_days * DAY_MINUTES
    s = _Series(
        spec,
        (fit_days + eval_days) * DAY_MINUTES,
        eval_start_ms - fit_days * DAY_MINUTES * MINUTE_MS,
    )
    first = fit_days * DAY_MINUTES  # first replayed minute
    _INJECT[family](rng, s, first, eval_minutes)
    noise = _noise(rng, family, spec, s.minutes)
    windows = _windows(rng, family, s, noise)
    held = [v is not None for v in s.fixed]
    return TypeSeries(spec, windows, sorted(s.labels, key=_label_key), s.added, held)


def _label_key(lab: ScenarioLabel) -> tuple[int, int]:
    return (lab.start_ms, lab.end_ms)


def _spec(rng: random.Random, family: str, index: int, tier: Tier, fit_days: int) -> TypeSpec:
    low, high = (0.03, 0.06) if tier == "fixed" else (0.01, 0.04)
    if family == "heavy":
        low, high = low / 2, high / 2  # the tail, not the scale, is the difficulty
    # Every tier meets every phi across 16 types (not phi tied to tier).
    ar1_phi = AR1_PHIS[(index + index // len(TIERS)) % len(AR1_PHIS)]
    phi = {"iid": 0.0, "heavy": 0.0, "flat": 0.0, "ar1": ar1_phi}.get(family, 0.5)
    spec = TypeSpec(
        name=f"{family}-{index:02d}-{tier}",
        tier=tier,
        fit_days=fit_days,
        center=rng.uniform(0.15, 0.45),
        sigma=rng.uniform(low, high),
        request_sigma=rng.uniform(0.05, 0.12),
        phi=phi,
    )
    if family == "seasonal":
        amplitude = max(0.05, rng.uniform(3.0, 6.0) * spec.marginal_sigma)
        return replace(spec, amplitude=amplitude, phase=rng.uniform(0.0, 2 * math.pi))
    return spec


def _noise(rng: random.Random, family: str, spec: TypeSpec, minutes: int) -> list[float]:
    """The noise process: Gaussian AR(1) with marginal sd sigma (phi 0: independent),
    Student-t(3) for the heavy family, a held grid level for the flat family."""
    sigma = spec.sigma
    if family == "heavy":
        scale = sigma / math.sqrt(3.0)  # a t(3) variable has variance 3
        out = []
        for _ in range(minutes):
            t = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3.0)
            out.append(max(-MODERATE_SPIKE_CAP, min(MODERATE_SPIKE_CAP, scale * t)))
        return out
    if family == "flat":
        return _grid_walk(rng, minutes)
    phi = spec.phi
    innovation = sigma * math.sqrt(1.0 - phi * phi)
    x = rng.gauss(0.0, sigma)
    out = []
    for _ in range(minutes):
        out.append(x)
        x = phi * x + rng.gauss(0.0, innovation)
    return out


def _grid_walk(rng: random.Random, minutes: int) -> list[float]:
    """A level that holds for hours (exponential runs, mean 3 h) and then moves one or two
    grid steps, pulled back towards 0 when it strays more than 3 steps."""
    out: list[float] = []
    steps = 0
    while len(out) < minutes:
        run = max(30, int(rng.expovariate(1.0 / 180.0)))
        out += [steps * GRID] * run
        move = rng.choice((1, 1, 2))
        steps += -move if steps > 3 or (steps >= -3 and rng.random() < 0.5) else move
    return out[:minutes]


def _poisson(rng: random.Random, lam: float) -> int:
    if lam >= 30:  # near-normal there; Knuth's product would take ~lam draws
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def _windows(
    rng: random.Random, family: str, s: _Series, noise: list[float]
) -> list[WindowAggregate]:
    spec = s.spec
    out = []
    per_request = spec.tier != "fixed"
    for m in range(s.minutes):
        n = _poisson(rng, spec.rate) if per_request else spec.rate
        if n == 0:
            continue
        season = 0.0
        if spec.amplitude:
            season = spec.amplitude * math.sin(2 * math.pi * m / DAY_MINUTES + spec.phase)
        value = spec.center + season + noise[m] + s.added[m]
        if per_request and family != "flat":
            value += rng.gauss(0.0, spec.request_sigma / math.sqrt(n))
        held = s.fixed[m]
        if held is not None:
            value = held
        value = min(1.0, max(0.0, value))
        if family == "flat":
            value = round(value / GRID) * GRID
        stddev = zero = None
        if per_request:
            zero = s.zero_share[m]
            # The sample sd of n requests' drift (0 when the drift stops varying).
            spread = spec.request_sigma * math.sqrt(rng.gammavariate((n - 1) / 2 or 0.5, 2.0))
            stddev = 0.0 if s.flat[m] or n == 1 else spread / math.sqrt(n - 1)
            if held is not None and not s.flat[m]:  # a drop: little left to vary
                stddev *= min(1.0, value / spec.center)
        start = s.ms(m)
        out.append(
            WindowAggregate.model_construct(
                doc_type=spec.name,
                window_start_ms=start,
                window_end_ms=start + MINUTE_MS,
                request_count=n,
                mean_drift=value,
                stddev_drift=stddev,
                zero_anchor_share=zero,
            )
        )
    return out


# --------------------------------------------------------------------------- injections


def _slots(
    rng: random.Random, first: int, span: int, durations: list[int]
) -> list[tuple[int, int]]:
    """Non-overlapping (start, end) minutes for events of the given durations: the span is cut
    in equal segments, one event placed at random inside each, GAP_MINUTES from its edges."""
    size = span // len(durations)
    out = []
    for i, d in enumerate(durations):
        room = size - 2 * GAP_MINUTES - d
        if room < 0:
            raise ValueError("scenario: events do not fit into the span")
        start = first + i * size + GAP_MINUTES + rng.randrange(room + 1)
        out.append((start, start + d))
    return out


def _jump(rng: random.Random, s: _Series, start: int, end: int) -> None:
    size = max(PRACTICAL_MARGIN, rng.uniform(6.0, 10.0) * s.spec.marginal_sigma)
    s.add(start, end, size)
    s.label(start, end, "jump", size)


def _huge_spike(rng: random.Random, s: _Series, start: int) -> None:
    size = max(HUGE_SPIKE, rng.uniform(10.0, 12.0) * s.spec.marginal_sigma)
    s.add(start, start + 1, size)
    s.label(start, start + 1, "spike", size)


def _noise_spikes(rng: random.Random, s: _Series, per_day: int, size: Callable[[], float]) -> None:
    """Unlabelled single-window spikes (noise), kept an hour away from every label."""
    busy = [
        ((lab.start_ms - s.first_ms) // MINUTE_MS, (lab.end_ms - s.first_ms) // MINUTE_MS)
        for lab in s.labels
    ]
    for _ in range(per_day * s.minutes // DAY_MINUTES):
        m = rng.randrange(s.minutes)
        if all(m < a - HOUR_MINUTES or m >= b + HOUR_MINUTES for a, b in busy):
            s.add(m, m + 1, size())


def _moderate(rng: random.Random, s: _Series) -> Callable[[], float]:
    return lambda: min(MODERATE_SPIKE_CAP, rng.uniform(3.0, 6.0) * s.spec.marginal_sigma)


def _durations(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(5, 60) for _ in range(n)]


def _inject_iid(rng: random.Random, s: _Series, first: int, span: int) -> None:
    for start, end in _slots(rng, first, span, _durations(rng, span // DAY_MINUTES)):
        _jump(rng, s, start, end)


def _inject_with_spikes(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """Jumps and, except on sparse types, two huge single-window spikes; moderate spikes."""
    n = span // DAY_MINUTES + 1
    durations = _durations(rng, n)
    spikes = set() if s.spec.tier == "sparse" else set(rng.sample(range(n), 2))
    for i, (start, end) in enumerate(_slots(rng, first, span, durations)):
        if i in spikes:
            _huge_spike(rng, s, start)
        else:
            _jump(rng, s, start, end)


def _inject_ar1(rng: random.Random, s: _Series, first: int, span: int) -> None:
    _inject_with_spikes(rng, s, first, span)
    _noise_spikes(rng, s, 4, _moderate(rng, s))


def _inject_heavy(rng: random.Random, s: _Series, first: int, span: int) -> None:
    _inject_with_spikes(rng, s, first, span)  # the noise's own tail makes the ordinary spikes


def _inject_flat(rng: random.Random, s: _Series, first: int, span: int) -> None:
    for start, end in _slots(rng, first, span, _durations(rng, span // DAY_MINUTES)):
        size = round(rng.uniform(0.1, 0.2) / GRID) * GRID
        s.add(start, end, size)
        s.label(start, end, "jump", size)
    _noise_spikes(rng, s, 6, lambda: rng.randint(1, 3) * GRID)


def _inject_shift(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """Two jumps in the first two days, a shift at the start of day 3 (or the middle of a
    shorter span) that lasts to the end, and jumps on top of the new level after a day."""
    shift_at = first + min(2 * DAY_MINUTES, span // 2)
    for start, end in _slots(rng, first, shift_at - first, _durations(rng, 2)):
        _jump(rng, s, start, end)
    size = max(rng.uniform(0.05, 0.15), 5.0 * s.spec.marginal_sigma)
    end = first + span
    s.add(shift_at, end, size)
    s.label(shift_at, end, "shift", size, expect="absorb")
    after = shift_at + min(DAY_MINUTES, (end - shift_at) // 2)
    count = max(1, (end - after) // DAY_MINUTES)
    for start, stop in _slots(rng, after, end - after, _durations(rng, count)):
        _jump(rng, s, start, stop)


def _inject_trend(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """Alternately a creep (rises linearly, holds, drops back) and a jump."""
    margin = max(PRACTICAL_MARGIN, 5.0 * s.spec.marginal_sigma)
    n = max(2, span // (DAY_MINUTES + DAY_MINUTES // 2))
    size = span // n
    for i in range(n):
        seg = first + i * size
        if i % 2:
            start, end = _slots(rng, seg, size, _durations(rng, 1))[0]
            _jump(rng, s, start, end)
            continue
        room = size - 2 * GAP_MINUTES
        hold = rng.randint(HOUR_MINUTES, 6 * HOUR_MINUTES)
        rise = min(rng.randint(6 * HOUR_MINUTES, 30 * HOUR_MINUTES), room - hold)
        total = rng.uniform(1.5, 2.5) * margin
        start = seg + GAP_MINUTES + rng.randrange(room - rise - hold + 1)
        for k in range(rise):
            s.added[start + k] += total * (k + 1) / rise
        s.add(start + rise, start + rise + hold, total)
        crossing = start + math.ceil(rise * margin / total) - 1  # first window past it
        s.label(start, start + rise + hold, "ramp", total, due=crossing)


def _inject_drops(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """A drop (anchors stripped: drift near 0), a flat line, a level drop, a flat line, then
    jumps, in random order."""
    kinds = ["stripped", "flat", "low", "flat"] + ["jump"] * max(1, span // DAY_MINUTES - 4)
    rng.shuffle(kinds)
    longest = min(12 * HOUR_MINUTES, span // len(kinds) - 2 * GAP_MINUTES)
    durations = [
        rng.randint(min(HOUR_MINUTES, longest), longest) if k != "jump" else rng.randint(5, 60)
        for k in kinds
    ]
    for kind, (start, end) in zip(kinds, _slots(rng, first, span, durations), strict=True):
        if kind == "jump":
            _jump(rng, s, start, end)
        elif kind == "flat":
            held = round(s.spec.center + rng.gauss(0.0, s.spec.sigma), 4)
            for m in range(start, end):
                s.fixed[m], s.flat[m] = held, True
            s.label(start, end, "flat_line", 0.0, expect="diagnose", codes=FLAT_LINE_CODES)
        else:
            stripped = kind == "stripped" and s.spec.tier != "fixed"
            for m in range(start, end):
                share = rng.uniform(0.9, 1.0) if stripped else 0.0
                low = rng.uniform(0.0, 0.02)
                s.fixed[m] = low * (1 - share) if stripped else low
                s.zero_share[m] = share
            codes = STRIPPED_CODES if stripped else DROP_CODES
            s.label(start, end, "drop", -s.spec.center, expect="diagnose", codes=codes)


def _inject_seasonal(rng: random.Random, s: _Series, first: int, span: int) -> None:
    _inject_iid(rng, s, first, span)


_INJECT: Final[dict[str, Callable[[random.Random, _Series, int, int], None]]] = {
    "iid": _inject_iid,
    "ar1": _inject_ar1,
    "flat": _inject_flat,
    "heavy": _inject_heavy,
    "shift": _inject_shift,
    "seasonal": _inject_seasonal,
    "trend": _inject_trend,
    "drops": _inject_drops,
}
