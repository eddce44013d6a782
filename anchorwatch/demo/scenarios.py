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

This module holds what the scenarios are made of (the numbers above, a type's spec, its
labels, the scenario); ``scenario_grid.scenario`` lays a family's types out and draws each:
its series (``scenario_series``) and the anomalies injected into it (``scenario_anomalies``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


def family_window_ms(family: str) -> int:
    """The size of a family's windows."""
    return DAILY_WINDOW_MS if family == "daily" else MINUTE_MS
