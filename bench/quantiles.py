"""Latency quantiles that count what never arrived.

A sample that never arrived (or arrived after the run's timeout) is a miss: it is kept in
the quantiles as +infinity instead of being dropped, so it sorts last and shows in p99 (in
p50 too once half the samples are misses), and the number of misses is printed beside the
figures. Dropping misses would report the latency of the samples that made it only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The value a miss is counted as.
MISS = math.inf


def quantile(values: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0..1) of ``values`` by linear interpolation between the closest
    ranks (as ``statistics.quantiles(method="inclusive")``); +infinity when it falls on or
    next to a miss; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    h = p * (len(ordered) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    frac = h - lo
    if frac == 0 or ordered[lo] == ordered[hi]:
        return ordered[lo]
    if math.isinf(ordered[hi]):
        return MISS
    return ordered[lo] + frac * (ordered[hi] - ordered[lo])


def misses(values: Sequence[float]) -> int:
    return sum(1 for v in values if math.isinf(v))


def ms(seconds: float, width: int = 6) -> str:
    """Seconds as milliseconds; a miss as "inf" (never arrived in time), no values as "-"."""
    if math.isnan(seconds):
        return f"{'-':>{width}} ms"
    if math.isinf(seconds):
        return f"{'inf':>{width}} ms"
    return f"{seconds * 1000:{width}.1f} ms"


def summary(values: Sequence[float]) -> str:
    """p50, p99 and max in ms, misses counted as +inf, and how many there were."""
    if not values:
        return "no samples"
    return (
        f"p50 {ms(quantile(values, 0.5))}  p99 {ms(quantile(values, 0.99))}  "
        f"max {ms(max(values))}  ({misses(values)} of {len(values)} missed, counted as +inf)"
    )
