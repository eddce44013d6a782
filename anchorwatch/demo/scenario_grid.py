"""A scenario laid out: ``types`` doc types of a family, in turn across the tiers (busy,
normal, sparse, fixed) and fit histories of 1, 2 or 3 days (``daily``: every type fixed,
two days), all replayed over the same ``eval_days`` from ``START_MS + MAX_FIT_DAYS`` days;
each type drawn from its own seeded stream: anomalies injected, noise, windows.
"""

from __future__ import annotations

import random

from anchorwatch.demo.scenario_anomalies import INJECT, SeriesDraft
from anchorwatch.demo.scenario_series import draw_bursts, draw_noise, draw_spec, draw_windows
from anchorwatch.demo.scenarios import (
    DAILY_FIT_DAYS,
    DAY_MINUTES,
    FAMILIES,
    MAX_FIT_DAYS,
    MINUTE_MS,
    START_MS,
    TIERS,
    Scenario,
    ScenarioLabel,
    Tier,
    TypeSeries,
    family_window_ms,
)


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


def _type_series(
    family: str, seed: int, index: int, eval_start_ms: int, eval_days: int
) -> TypeSeries:
    rng = random.Random(f"anchorwatch-scenario/{family}/{seed}/{index}")
    daily = family == "daily"
    tier: Tier = "fixed" if daily else TIERS[index % len(TIERS)]
    fit_days = DAILY_FIT_DAYS if daily else 1 + index % MAX_FIT_DAYS
    spec = draw_spec(rng, family, index, tier, fit_days)
    window_ms = family_window_ms(family)
    day = DAY_MINUTES * MINUTE_MS // window_ms
    s = SeriesDraft(
        spec, (fit_days + eval_days) * day, eval_start_ms - fit_days * day * window_ms, window_ms
    )
    first = fit_days * day  # first replayed window
    INJECT[family](rng, s, first, eval_days * day)
    kind = spec.kind or family
    noise = draw_noise(rng, kind, spec, s.samples)
    bursts = draw_bursts(rng, spec, s.samples) if spec.burst_rate else []
    if bursts:
        noise = [x + b for x, b in zip(noise, bursts, strict=True)]
    windows = draw_windows(rng, kind, s, noise)
    held = [v is not None for v in s.fixed]
    labels = sorted(s.labels, key=_label_key)
    return TypeSeries(spec, windows, labels, s.added, held, bursts)


def _label_key(lab: ScenarioLabel) -> tuple[int, int]:
    return (lab.start_ms, lab.end_ms)
