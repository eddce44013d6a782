"""A type's upper tail, read past what its history shows: peaks over threshold (as in
SPOT/DSPOT, Siffer et al., KDD 2017) and the spike record. Pure statistics.

Short histories (a day or two) cannot show how often a type's ordinary highs reach a given
level in a week: the highest of 2,880 windows says nothing about the highest of 10,080. The
excesses over a high quantile of a series follow a generalised Pareto distribution whatever
the series (Pickands-Balkema-de Haan), so the level a series exceeds with a small
probability ``risk`` per window is

    z = t + (sigma / xi) * ((risk * n / n_t) ** -xi - 1)      (xi != 0; the limit at 0)

with ``t`` the high quantile, ``n_t`` the excesses over it among ``n`` values, and sigma, xi
the Pareto scale and shape fitted to the excesses. The fit here is by probability-weighted
moments (Hosking and Wallis, 1987): closed form, no optimiser, and as good as maximum
likelihood for the 20 to 200 excesses a short history gives.

A type's *spikes* are read on k-window levels: ``sustained(residuals, k)`` is, for every run
of k neighbouring windows, the lowest of them (how high the type stayed for k windows). The
spike record for k is the highest such level the history held, raised to the tail's level
at the page budget: a live excursion of k windows no higher than that is one of the type's
ordinary spikes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The quantile over which excesses are fitted (SPOT's calibration uses the 98th).
TAIL_LEVEL = 0.98
#: The fewest excesses a Pareto fit is trusted on; with fewer the empirical maximum stands.
MIN_EXCESSES = 20
#: Shape bounds: beyond 0.5 the variance is infinite and the moment fit breaks down; below
#: -0.5 the tail ends so abruptly that nothing a page budget asks for lies beyond it.
MAX_SHAPE = 0.5
MIN_SHAPE = -0.5
#: Excesses whose worth the fitted shape is given: with n excesses a heavy tail's shape
#: counts n / (n + SHAPE_PRIOR) of itself. The moment estimate of the shape strays by about
#: 0.2 on 30 excesses, and a spike record extrapolated on a shape that strayed upward sits
#: far above anything the type can do (a record no spike ever breaks).
SHAPE_PRIOR = 50
#: Spikes (runs above the margin no longer than ``SPIKE_WINDOWS``) a history must hold
#: before they are the type's ordinary behaviour: fewer are as likely the incidents a
#: history holds as its habits.
MIN_SPIKES = 3
#: Spike lengths (in windows) a record is kept for: one- to three-window excursions.
SPIKE_WINDOWS = 3


@dataclass(frozen=True)
class Pareto:
    """The excesses over ``threshold`` of ``n`` values: ``excesses`` of them, Pareto with
    ``scale`` and ``shape``."""

    threshold: float
    scale: float
    shape: float
    excesses: int
    n: int

    def level(self, risk: float) -> float:
        """The value exceeded with probability ``risk`` per value."""
        ratio = risk * self.n / self.excesses
        if ratio >= 1.0:
            return self.threshold
        if abs(self.shape) < 1e-6:
            return self.threshold - self.scale * math.log(ratio)
        return self.threshold + self.scale / self.shape * (float(ratio**-self.shape) - 1.0)


def fit_pareto(values: Sequence[float], level: float = TAIL_LEVEL) -> Pareto | None:
    """The generalised Pareto tail of ``values`` over their ``level`` quantile, or None when
    fewer than ``MIN_EXCESSES`` exceed it (or all excesses are equal)."""
    if len(values) < MIN_EXCESSES:
        return None
    ordered = sorted(values)
    threshold = ordered[min(len(ordered) - 1, int(level * len(ordered)))]
    excesses = [v - threshold for v in ordered if v > threshold]
    n = len(excesses)
    if n < MIN_EXCESSES:
        return None
    # Probability-weighted moments a0 = E[X], a1 = E[X (1 - F(X))] on plotting positions.
    a0 = sum(excesses) / n
    a1 = sum(x * (1.0 - (i + 0.65) / n) for i, x in enumerate(excesses)) / n
    if a0 <= 0.0 or a0 - 2.0 * a1 <= 0.0:
        return None
    shape = 2.0 - a0 / (a0 - 2.0 * a1)  # Hosking's k is -shape
    scale = 2.0 * a0 * a1 / (a0 - 2.0 * a1)
    if shape > 0.0:
        shape *= n / (n + SHAPE_PRIOR)
    shape = min(MAX_SHAPE, max(MIN_SHAPE, shape))
    if scale <= 0.0:
        return None
    return Pareto(threshold, scale, shape, n, len(values))


def sustained(residuals: Sequence[float | None], k: int) -> list[float]:
    """For every run of ``k`` neighbouring windows (None breaks a run: a window left out),
    the lowest of them: the level the series held for k windows."""
    # Every run as a tuple of k neighbours, zipped from k shifted views of the series.
    runs = zip(*(residuals[j:] for j in range(k)), strict=False)
    return [min(run) for run in runs if None not in run]


def tail_level(values: Sequence[float], risk: float) -> float | None:
    """The level ``values`` exceed with probability ``risk`` each, from their Pareto tail:
    never below their own maximum (a page budget cannot ask the history's own highs to
    page). None without values."""
    if not values:
        return None
    highest = max(values)
    pareto = fit_pareto(values)
    if pareto is None:
        return highest
    return max(highest, pareto.level(risk))


def spikes(residuals: Sequence[float | None], margin: float) -> int:
    """Runs of windows above ``margin`` (None ends a run) no longer than ``SPIKE_WINDOWS``."""
    count = run = 0
    for r in [*residuals, None]:
        if r is not None and r > margin:
            run += 1
            continue
        count += 0 < run <= SPIKE_WINDOWS
        run = 0
    return count


def spike_record(residuals: Sequence[float | None], risk: float, margin: float) -> list[float]:
    """Per spike length k = 1..``SPIKE_WINDOWS``: the highest level the series held for k
    windows, and where that reached above ``margin`` (the type has such spikes), extended
    to the level it would reach once per ``1 / risk`` windows. A short history read past
    itself reaches about the threshold for any type: only spikes it actually showed above
    the margin make a type spiky. Never lower for a shorter spike than for a longer one: a
    level held for k windows is held for fewer."""
    out = []
    for k in range(1, SPIKE_WINDOWS + 1):
        levels = sustained(residuals, k)
        if not levels:
            out.append(0.0)
            continue
        highest = max(levels)
        extended = tail_level(levels, risk) if highest > margin else highest
        out.append(max(extended or 0.0, 0.0))
    for k in range(len(out) - 2, -1, -1):
        out[k] = max(out[k], out[k + 1])
    return out
