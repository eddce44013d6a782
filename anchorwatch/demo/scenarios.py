"""Production-like window series with labels, for evaluating detection where it is hard.

The traffic generator's windows are independent draws around a fixed level; production series
are not. Each scenario *family* here gives a population of doc types (``types``, tiers in
turn: busy ~100 requests per window, normal ~20, sparse ~2 (Poisson counts; windows without
requests are absent, as in the drift job), and ``fixed`` with exactly 100 requests and
nothing but count and mean, like a metric exported per minute). Every type has a short fit
history (1, 2 or 3 days, in turn) and then ``eval_days`` of one-minute windows to replay;
anomalies are injected in the replayed span only. The ``daily`` family differs: five-minute
windows (``Scenario.window_ms``, ``family_window_ms``), every type ``fixed`` with exactly two
days of history; there, "window" and every index into a type's arrays mean a five-minute
sample, not a minute.

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
- ``bursty``: a request-count-like series: a level plus overdispersed (Poisson-gamma, i.e.
  negative-binomial, normalised) noise, and ordinary *bursts*: 1-6 per hour (by type) a window
  jumps up and falls back the next (one burst in five lasts two windows); burst heights are
  lognormal (median 3 sigma) truncated at the type's ``burst_cap`` (8-12 sigma, at most
  ``BURST_CAP_LIMIT``), in the fit history as in the replay, never labelled (a page on one is
  false). Labelled: jumps lasting 5-60 windows of 2-3 typical burst heights (at least
  ``PRACTICAL_MARGIN``), and, except on sparse types, two single-window spikes (``spike``)
  that break the type's record: 1.5-2 times ``burst_cap`` (at least ``PRACTICAL_MARGIN``).
- ``spiky``: a byte-counter-like series (disk writes): a low quiet level (0.02-0.05) with
  gamma (positively skewed) noise of 15-30 % of it, and ordinary spikes of 1-2 windows at a
  rate from 4 a day to 4 an hour (by type), lognormal heights with the window at 3 times the
  level typically and up to 10 times (``burst_cap``: 5-9 times the level), unlabelled.
  Labelled as in ``bursty``: jumps (5-60 windows, 2-3 typical spike heights, at least
  ``PRACTICAL_MARGIN``) and two record-breaking single-window spikes.
- ``daily``: a smooth daily wave (a sine of amplitude 0.05-0.2) sampled every five minutes,
  ``fixed`` tier for every type (count 100, no sd), exactly two days of history; even type
  indexes noiseless, odd ones with Gaussian noise of 2-5 % of the amplitude; values rounded
  to 4 places. Labelled: one jump a day of 3-12 windows (15-60 minutes), +0.1 to +0.2 on top
  of the wave. The wave's peak is not an anomaly: a page there is false.
- ``quiet``: no incident at all, no label: every page is false. The types borrow the series
  of other families in turn (``QUIET_KINDS``: ar1 with its moderate spikes, heavy, bursty,
  flat with its grid spikes, seasonal, spiky; ``TypeSpec.kind``), with 1-3 days of history.

Decisions the labels encode (``ScenarioLabel.expect``):

- ``alert``: must page. Jumps (``jump``); a single window at least ``HUGE_SPIKE`` above the
  level (``spike``, not on sparse types, whose single windows are too noisy to tell); a creep
  (``ramp``, from its first rising window to its end) must have paged once it has risen by
  ``max(PRACTICAL_MARGIN, 5 sigma)``: its ``due_ms``, from which its delay counts (an
  earlier page on the creep is true, with a delay of 0 or less). A single window of moderate
  size (3-6 sigma, at most ``MODERATE_SPIKE_CAP``) is noise and is not labelled: an alert on
  it is a false alarm. In ``bursty`` and ``spiky`` the ordinary bursts (up to the type's
  ``burst_cap``, kept in ``TypeSeries.bursts``) are that noise, and a ``spike`` is a window
  at least 1.5 times ``burst_cap`` above the level, whatever ``HUGE_SPIKE`` says.
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
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from anchorwatch.contracts import WindowAggregate
from anchorwatch.history import Label

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
FAMILIES: Final = (
    "iid",
    "ar1",
    "flat",
    "heavy",
    "shift",
    "seasonal",
    "trend",
    "drops",
    "bursty",
    "spiky",
    "daily",
    "quiet",
)
#: The ``daily`` family's window: five minutes (every other family: one minute).
DAILY_WINDOW_MS: Final = 5 * MINUTE_MS
#: The ``daily`` family's fit history, the same for every type.
DAILY_FIT_DAYS: Final = 2
#: The series the ``quiet`` family's types borrow, in turn.
QUIET_KINDS: Final = ("ar1", "heavy", "bursty", "flat", "seasonal", "spiky")
#: No ordinary burst of a ``bursty`` type is taller than this, whatever its sigma.
BURST_CAP_LIMIT: Final = 0.25
#: The lognormal spread (sd of the log) of ordinary burst heights.
BURST_SPREAD: Final = 0.7
#: The share of ordinary bursts that last two windows (the rest: one).
TWO_WINDOW_BURSTS: Final = 0.2
#: A labelled record spike: this many times the type's ``burst_cap`` (a range).
RECORD_FACTOR: Final = (1.5, 2.0)
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
    amplitude: float = 0.0  # daily cycle (seasonal, daily)
    phase: float = 0.0
    kind: str = ""  # the series' model when not the family's own (quiet: one of QUIET_KINDS)
    # Ordinary (unlabelled) bursts (bursty, spiky): the chance a window starts one, the
    # median height and the largest height the generator can produce, above the level.
    burst_rate: float = 0.0
    burst_median: float = 0.0
    burst_cap: float = 0.0

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
    # Per window (a minute; daily: five) from the first of the fit history: what was added to
    # the level, and whether the value was replaced (drops, flat lines); the ordinary bursts
    # in the noise (bursty, spiky; empty for the others). For checks and plots.
    injected: list[float]
    held: list[bool]
    bursts: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    family: str
    seed: int
    eval_start_ms: int  # where every type's fit history ends and its replay starts
    eval_end_ms: int
    types: tuple[TypeSeries, ...]
    window_ms: int = MINUTE_MS  # every window's size (family_window_ms)

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
        family,
        seed,
        eval_start,
        eval_start + eval_days * DAY_MINUTES * MINUTE_MS,
        series,
        family_window_ms(family),
    )


def family_window_ms(family: str) -> int:
    """The size of a family's windows."""
    return DAILY_WINDOW_MS if family == "daily" else MINUTE_MS


# --------------------------------------------------------------------------- one type


class _Series:
    """The arrays of one type, window by window (``window_ms`` each: a minute, or five for
    the daily family) from the start of its fit history. Indexes are windows: ``day`` and
    ``hour`` convert."""

    def __init__(self, spec: TypeSpec, samples: int, first_ms: int, window_ms: int) -> None:
        self.spec, self.samples, self.first_ms = spec, samples, first_ms
        self.window_ms = window_ms
        self.day = DAY_MINUTES * MINUTE_MS // window_ms  # windows per day
        self.hour = HOUR_MINUTES * MINUTE_MS // window_ms
        self.added = [0.0] * samples  # injected offsets on top of the level
        self.fixed: list[float | None] = [None] * samples  # drops and flat lines: the value
        self.flat = [False] * samples  # flat lines: the requests' drift stops varying too
        self.zero_share = [0.0] * samples
        self.labels: list[ScenarioLabel] = []

    def ms(self, index: int) -> int:
        return self.first_ms + index * self.window_ms

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
        for m in range(start, min(end, self.samples)):
            self.added[m] += offset


def _type_series(
    family: str, seed: int, index: int, eval_start_ms: int, eval_days: int
) -> TypeSeries:
    rng = random.Random(f"anchorwatch-scenario/{family}/{seed}/{index}")
    daily = family == "daily"
    tier: Tier = "fixed" if daily else TIERS[index % len(TIERS)]
    fit_days = DAILY_FIT_DAYS if daily else 1 + index % MAX_FIT_DAYS
    spec = _spec(rng, family, index, tier, fit_days)
    window_ms = family_window_ms(family)
    day = DAY_MINUTES * MINUTE_MS // window_ms
    s = _Series(
        spec, (fit_days + eval_days) * day, eval_start_ms - fit_days * day * window_ms, window_ms
    )
    first = fit_days * day  # first replayed window
    _INJECT[family](rng, s, first, eval_days * day)
    kind = spec.kind or family
    noise = _noise(rng, kind, spec, s.samples)
    bursts = _bursts(rng, spec, s.samples) if spec.burst_rate else []
    if bursts:
        noise = [x + b for x, b in zip(noise, bursts, strict=True)]
    windows = _windows(rng, kind, s, noise)
    held = [v is not None for v in s.fixed]
    labels = sorted(s.labels, key=_label_key)
    return TypeSeries(spec, windows, labels, s.added, held, bursts)


def _label_key(lab: ScenarioLabel) -> tuple[int, int]:
    return (lab.start_ms, lab.end_ms)


def _spec(rng: random.Random, family: str, index: int, tier: Tier, fit_days: int) -> TypeSpec:
    name = f"{family}-{index:02d}-{tier}"
    if family == "bursty":
        return _bursty_spec(rng, name, tier, fit_days)
    if family == "spiky":
        return _spiky_spec(rng, name, tier, fit_days)
    if family == "daily":
        return _daily_spec(rng, name, index, fit_days)
    if family == "quiet":
        kind = QUIET_KINDS[index % len(QUIET_KINDS)]
        spec = _spec(rng, kind, index, tier, fit_days)
        return replace(spec, name=f"{name}-{kind}", kind=kind)
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


def _bursty_spec(rng: random.Random, name: str, tier: Tier, fit_days: int) -> TypeSpec:
    spec = TypeSpec(
        name=name,
        tier=tier,
        fit_days=fit_days,
        center=rng.uniform(0.1, 0.35),
        sigma=rng.uniform(0.006, 0.015),
        request_sigma=rng.uniform(0.02, 0.04),
        phi=0.0,
    )
    ms = spec.marginal_sigma
    return replace(
        spec,
        burst_rate=rng.uniform(1.0, 6.0) / HOUR_MINUTES,
        burst_median=3.0 * ms,
        burst_cap=min(BURST_CAP_LIMIT, rng.uniform(8.0, 12.0) * ms),
    )


def _spiky_spec(rng: random.Random, name: str, tier: Tier, fit_days: int) -> TypeSpec:
    center = rng.uniform(0.02, 0.05)
    # From 4 spikes a day to 4 an hour, log-uniformly.
    rate = math.exp(rng.uniform(math.log(4 / DAY_MINUTES), math.log(4 / HOUR_MINUTES)))
    return TypeSpec(
        name=name,
        tier=tier,
        fit_days=fit_days,
        center=center,
        sigma=center * rng.uniform(0.15, 0.3),
        request_sigma=center * rng.uniform(0.2, 0.4),  # requests vary with the level
        phi=0.0,
        burst_rate=rate,
        burst_median=2.0 * center,  # the window at 3 times the level
        burst_cap=rng.uniform(5.0, 9.0) * center,  # up to 10 times
    )


def _daily_spec(rng: random.Random, name: str, index: int, fit_days: int) -> TypeSpec:
    amplitude = rng.uniform(0.05, 0.2)
    noisy = index % 2 == 1
    return TypeSpec(
        name=name,
        tier="fixed",
        fit_days=fit_days,
        center=rng.uniform(0.25, 0.5),
        sigma=amplitude * rng.uniform(0.02, 0.05) if noisy else 0.0,
        request_sigma=0.0,
        phi=0.0,
        amplitude=amplitude,
        phase=rng.uniform(0.0, 2 * math.pi),
    )


def _noise(rng: random.Random, kind: str, spec: TypeSpec, samples: int) -> list[float]:
    """The noise process: Gaussian AR(1) with marginal sd sigma (phi 0: independent),
    Student-t(3) for the heavy family, a held grid level for the flat family, normalised
    Poisson-gamma counts for bursty, gamma for spiky (both sd sigma, bursts aside), nothing
    for a noiseless daily type (sigma 0)."""
    sigma = spec.sigma
    if kind == "bursty":
        return _count_noise(rng, sigma, samples)
    if kind == "spiky":
        shape = (spec.center / sigma) ** 2  # gamma(k, center / k): mean center, sd sigma
        return [spec.center * (rng.gammavariate(shape, 1.0 / shape) - 1.0) for _ in range(samples)]
    if kind == "daily" and sigma == 0.0:
        return [0.0] * samples
    if kind == "heavy":
        scale = sigma / math.sqrt(3.0)  # a t(3) variable has variance 3
        out = []
        for _ in range(samples):
            t = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3.0)
            out.append(max(-MODERATE_SPIKE_CAP, min(MODERATE_SPIKE_CAP, scale * t)))
        return out
    if kind == "flat":
        return _grid_walk(rng, samples)
    phi = spec.phi
    innovation = sigma * math.sqrt(1.0 - phi * phi)
    x = rng.gauss(0.0, sigma)
    out = []
    for _ in range(samples):
        out.append(x)
        x = phi * x + rng.gauss(0.0, innovation)
    return out


def _count_noise(rng: random.Random, sigma: float, samples: int) -> list[float]:
    """A request count per window, Poisson with a gamma-distributed rate (negative binomial:
    overdispersed, skewed up), as its relative deviation from the mean count, scaled to sd
    sigma."""
    mean = rng.uniform(50.0, 500.0)
    shape = rng.uniform(8.0, 30.0)
    scale = sigma / math.sqrt(1.0 / mean + 1.0 / shape)
    return [
        scale * (_poisson(rng, mean * rng.gammavariate(shape, 1.0 / shape)) / mean - 1.0)
        for _ in range(samples)
    ]


def _bursts(rng: random.Random, spec: TypeSpec, samples: int) -> list[float]:
    """Ordinary bursts: each window starts one with chance ``burst_rate``; it lasts one window
    or (``TWO_WINDOW_BURSTS``) two, the second lower. Heights: lognormal around
    ``burst_median``, drawn again above ``burst_cap`` (so the cap is the record)."""
    out = [0.0] * samples
    m = 0
    while m < samples:
        if rng.random() < spec.burst_rate:
            height = spec.burst_cap + 1.0
            while height > spec.burst_cap:
                height = spec.burst_median * math.exp(rng.gauss(0.0, BURST_SPREAD))
            out[m] = height
            if rng.random() < TWO_WINDOW_BURSTS and m + 1 < samples:
                m += 1
                out[m] = height * rng.uniform(0.3, 1.0)
        m += 1
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
    rng: random.Random, kind: str, s: _Series, noise: list[float]
) -> list[WindowAggregate]:
    spec = s.spec
    out = []
    per_request = spec.tier != "fixed"
    for m in range(s.samples):
        n = _poisson(rng, spec.rate) if per_request else spec.rate
        if n == 0:
            continue
        season = 0.0
        if spec.amplitude:
            season = spec.amplitude * math.sin(2 * math.pi * m / s.day + spec.phase)
        value = spec.center + season + noise[m] + s.added[m]
        if per_request and kind != "flat":
            value += rng.gauss(0.0, spec.request_sigma / math.sqrt(n))
        held = s.fixed[m]
        if held is not None:
            value = held
        value = min(1.0, max(0.0, value))
        if kind == "flat":
            value = round(value / GRID) * GRID
        elif kind == "daily":
            value = round(value, 4)
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
                window_end_ms=start + s.window_ms,
                request_count=n,
                mean_drift=value,
                stddev_drift=stddev,
                zero_anchor_share=zero,
            )
        )
    return out


# --------------------------------------------------------------------------- injections


def _slots(
    rng: random.Random, first: int, span: int, durations: list[int], gap: int = GAP_MINUTES
) -> list[tuple[int, int]]:
    """Non-overlapping (start, end) windows for events of the given durations: the span is cut
    in equal segments, one event placed at random inside each, ``gap`` windows (GAP_MINUTES
    of one-minute windows) from its edges."""
    size = span // len(durations)
    out = []
    for i, d in enumerate(durations):
        room = size - 2 * gap - d
        if room < 0:
            raise ValueError("scenario: events do not fit into the span")
        start = first + i * size + gap + rng.randrange(room + 1)
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
        ((lab.start_ms - s.first_ms) // s.window_ms, (lab.end_ms - s.first_ms) // s.window_ms)
        for lab in s.labels
    ]
    for _ in range(per_day * s.samples // s.day):
        m = rng.randrange(s.samples)
        if all(m < a - s.hour or m >= b + s.hour for a, b in busy):
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


def _inject_bursts(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """Jumps above the ordinary bursts and, except on sparse types, two record spikes (the
    bursts themselves are in the noise, see ``_bursts``)."""
    n = span // s.day + 1
    durations = _durations(rng, n)
    spikes = set() if s.spec.tier == "sparse" else set(rng.sample(range(n), 2))
    for i, (start, end) in enumerate(_slots(rng, first, span, durations)):
        if i in spikes:
            size = max(PRACTICAL_MARGIN, rng.uniform(*RECORD_FACTOR) * s.spec.burst_cap)
            s.add(start, start + 1, size)
            s.label(start, start + 1, "spike", size)
        else:
            size = max(PRACTICAL_MARGIN, rng.uniform(2.0, 3.0) * s.spec.burst_median)
            s.add(start, end, size)
            s.label(start, end, "jump", size)


def _inject_daily(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """A jump a day, 3-12 windows (15-60 minutes), anywhere on the wave."""
    durations = [rng.randint(3, 12) for _ in range(span // s.day)]
    gap = GAP_MINUTES * MINUTE_MS // s.window_ms
    for start, end in _slots(rng, first, span, durations, gap):
        size = rng.uniform(PRACTICAL_MARGIN, 2 * PRACTICAL_MARGIN)
        s.add(start, end, size)
        s.label(start, end, "jump", size)


def _inject_quiet(rng: random.Random, s: _Series, first: int, span: int) -> None:
    """No incident: only the unlabelled single-window spikes of the kinds that have them."""
    if s.spec.kind == "ar1":
        _noise_spikes(rng, s, 4, _moderate(rng, s))
    elif s.spec.kind == "flat":
        _noise_spikes(rng, s, 6, lambda: rng.randint(1, 3) * GRID)


_INJECT: Final[dict[str, Callable[[random.Random, _Series, int, int], None]]] = {
    "iid": _inject_iid,
    "ar1": _inject_ar1,
    "flat": _inject_flat,
    "heavy": _inject_heavy,
    "shift": _inject_shift,
    "seasonal": _inject_seasonal,
    "trend": _inject_trend,
    "drops": _inject_drops,
    "bursty": _inject_bursts,
    "spiky": _inject_bursts,
    "daily": _inject_daily,
    "quiet": _inject_quiet,
}
