"""Window series for the baseline-fit tests: one doc type's minutes, synthetic or by hand."""

from __future__ import annotations

import math
import random

from anchorwatch.contracts import WindowAggregate

T0 = 1_764_374_400_000  # 2025-11-29T00:00Z: hour 0 of a day
MIN = 60_000


def w(i: int, mean: float, n: int, doc_type: str = "nda") -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=T0 + i * MIN,
        window_end_ms=T0 + (i + 1) * MIN,
        request_count=n,
        mean_drift=min(1.0, max(0.0, mean)),
    )


def synthetic(
    count: int,
    *,
    center: float = 0.3,
    sigma: float = 0.06,
    rate: float = 20.0,
    seed: int = 1,
    daily: float = 0.0,
) -> list[WindowAggregate]:
    """Windows whose requests have drift N(center (+ a daily cycle), sigma): the mean of n
    of them is N(center, sigma / sqrt(n)); n is Poisson(rate), windows with n = 0 absent."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        n = poisson(rng, rate)
        if n == 0:
            continue
        level = center + daily * math.sin(2 * math.pi * (i % 1440) / 1440)  # a smooth wave
        out.append(w(i, rng.gauss(level, sigma / math.sqrt(n)), n))
    return out


def poisson(rng: random.Random, lam: float) -> int:
    n, t = 0, rng.expovariate(lam)
    while t < 1.0:
        n += 1
        t += rng.expovariate(lam)
    return n
