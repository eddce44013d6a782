"""The shapes of a scenario's series: a type's spec drawn for its family (tier, level,
noise sd, autocorrelation, cycle, bursts), its noise process, and its windows.

A window's mean is ``clip(center + season + noise + injected, 0, 1)`` plus, for the Poisson
tiers, the sampling noise of a mean over n requests (``request_sigma / sqrt(n)``); its count
is a Poisson draw around the tier's rate (``fixed``: exactly the rate). See
``anchorwatch.demo.scenarios`` for each family.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from anchorwatch.contracts import WindowAggregate
from anchorwatch.demo.scenario_anomalies import SeriesDraft
from anchorwatch.demo.scenarios import (
    AR1_PHIS,
    BURST_CAP_LIMIT,
    BURST_SPREAD,
    DAY_MINUTES,
    GRID,
    HOUR_MINUTES,
    MODERATE_SPIKE_CAP,
    QUIET_KINDS,
    TIERS,
    TWO_WINDOW_BURSTS,
    Tier,
    TypeSpec,
)


def draw_spec(rng: random.Random, family: str, index: int, tier: Tier, fit_days: int) -> TypeSpec:
    """The spec of type ``index`` of ``family`` (``quiet``: of the family it borrows)."""
    name = f"{family}-{index:02d}-{tier}"
    if family == "bursty":
        return _bursty_spec(rng, name, tier, fit_days)
    if family == "spiky":
        return _spiky_spec(rng, name, tier, fit_days)
    if family == "daily":
        return _daily_spec(rng, name, index, fit_days)
    if family == "quiet":
        kind = QUIET_KINDS[index % len(QUIET_KINDS)]
        spec = draw_spec(rng, kind, index, tier, fit_days)
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


def draw_noise(rng: random.Random, kind: str, spec: TypeSpec, samples: int) -> list[float]:
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


def draw_bursts(rng: random.Random, spec: TypeSpec, samples: int) -> list[float]:
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


def draw_windows(
    rng: random.Random, kind: str, s: SeriesDraft, noise: list[float]
) -> list[WindowAggregate]:
    """The type's windows: level, cycle, noise and what was injected, with the tier's
    request counts and sampling noise; windows without requests are absent."""
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
