"""The statistics of the release gate: a sample's summary, Student's t distribution and
Welch's interval for a difference of two means. Pure, standard library only.

The t quantile is computed, not approximated: the distribution function is the regularized
incomplete beta function (continued fraction, modified Lentz), and the quantile its inverse
by bisection to 1e-12. The distribution function is good to about 1e-10 at a million
degrees of freedom (lgamma of large arguments loses digits) and better below. Welch's
degrees of freedom are rarely whole numbers, so a table would not do; scipy is not a
dependency, and a closed-form expansion (Cornish-Fisher) is off by more than a rounding
error below about 5 degrees of freedom. Above 1e7 degrees of freedom the normal quantile is
used: it differs from t's by (z^3 + z) / 4df, under 3e-7 there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

_BETA_EPS: Final = 1e-15
_BETA_TINY: Final = 1e-300
_BETA_MAX_TERMS: Final = 100_000
_NORMAL_ABOVE_DF: Final = 1e7
_QUANTILE_TOLERANCE: Final = 1e-12


@dataclass(frozen=True, slots=True)
class Sample:
    """One model's documents of one doc type: count, mean and (n - 1) variance."""

    n: int
    mean: float
    variance: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Sample:
        if len(values) < 2:
            raise ValueError(f"a sample needs at least 2 values, got {len(values)}")
        n = len(values)
        mean = math.fsum(values) / n
        # Two passes with fsum: no cancellation for the tight spreads of a test set.
        variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
        return cls(n, mean, variance)

    @property
    def std_error_sq(self) -> float:
        return self.variance / self.n


@dataclass(frozen=True, slots=True)
class Interval:
    """A difference of means (candidate minus production) with its confidence interval."""

    difference: float
    low: float
    high: float
    df: float
    confidence: float


def _beta_fraction(a: float, b: float, x: float) -> float:
    # Continued fraction of the incomplete beta function (Numerical Recipes 6.4, modified
    # Lentz); converges fast for x < (a + 1) / (a + b + 2), which the caller ensures.
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _BETA_TINY else _BETA_TINY)
    h = d
    for m in range(1, _BETA_MAX_TERMS):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):  # fmt: skip
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _BETA_TINY else _BETA_TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _BETA_TINY else _BETA_TINY
            h *= d * c
        if abs(d * c - 1.0) < _BETA_EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for 0 <= x <= 1, a, b > 0."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if df > _NORMAL_ABOVE_DF:
        return NormalDist().cdf(t)
    tail = 0.5 * regularized_beta(df / (df + t * t), df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, for 0 < p < 1 and df > 0."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df > _NORMAL_ABOVE_DF:
        return NormalDist().inv_cdf(p)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    while high - low > _QUANTILE_TOLERANCE * max(1.0, high):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def welch_interval(candidate: Sample, production: Sample, confidence: float = 0.95) -> Interval:
    """Welch's two-sided interval for candidate.mean - production.mean (unequal variances,
    Welch-Satterthwaite degrees of freedom)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    difference = candidate.mean - production.mean
    a, b = candidate.std_error_sq, production.std_error_sq
    se_sq = a + b
    if se_sq == 0.0:
        # Both samples constant: the difference is known exactly; the pooled df is shown.
        df = float(candidate.n + production.n - 2)
        return Interval(difference, difference, difference, df, confidence)
    df = se_sq**2 / (a**2 / (candidate.n - 1) + b**2 / (production.n - 1))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(se_sq)
    return Interval(difference, difference - half, difference + half, df, confidence)
