"""Detection bench, its data: the generator-based labelled scenarios and the clean week.

``make_scenario`` generates traffic with labelled incidents and aggregates it into one-minute
windows as the Flink job does; ``simulate_clean`` samples a clean week of one type with the
generator's drift model in numpy (bench/detection.py's module doc, item 2); ``prepare`` builds
both for one seed (a worker process). Scored in bench/detection_score.py, printed by
bench/detection.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anchorwatch.backtest import aggregate_windows
from anchorwatch.contracts import WindowAggregate
from anchorwatch.demo.generator import DocTypeProfile, TrafficConfig, generate
from anchorwatch.history import Label

MINUTE_MS = 60_000
DAY_MINUTES = 1440
# The generator's split of a type's spread into per-request and per-anchor parts.
REQUEST_SHARE, ANCHOR_SHARE = 0.6, 0.8
FAULT_RATE = 0.01


@dataclass(frozen=True)
class Scenario:
    seed: int
    profiles: tuple[DocTypeProfile, ...]
    labels: list[Label]
    windows: list[WindowAggregate]
    fit_until_ms: int
    events: int


def tier(p: DocTypeProfile) -> str:
    return "busy" if p.rate_per_minute >= 30 else "sparse" if p.rate_per_minute <= 3 else "normal"


def make_scenario(seed: int, types: int, hours: int, fit_hours: int) -> Scenario:
    minutes = hours * 60
    # About one drift incident per type per 2 hours and a fault incident per 8 hours; the
    # generator keeps incidents of one type apart, so each label is one thing to catch.
    config = TrafficConfig(
        seed=seed,
        minutes=minutes,
        doc_types=types,
        incidents=types * hours // 2,
        fault_incidents=types * hours // 8,
        background_fault_rate=FAULT_RATE,
    )
    traffic = generate(config)
    events = [r.event for r in traffic.records() if r.event is not None]
    labels = [
        Label(i.doc_type, i.start_ms, i.end_ms, i.kind, i.magnitude) for i in traffic.incidents
    ]
    return Scenario(
        seed=seed,
        profiles=traffic.profiles,
        labels=labels,
        windows=aggregate_windows(events),
        fit_until_ms=config.start_ms + fit_hours * 60 * MINUTE_MS,
        events=len(events),
    )


def simulate_clean(
    profile: DocTypeProfile, start_ms: int, minutes: int, seed: int
) -> list[WindowAggregate]:
    """Clean one-minute windows of one type: the generator's drift model, sampled with numpy
    (see the module doc)."""
    rng = np.random.default_rng(seed)
    out: list[WindowAggregate] = []
    for day_start in range(0, minutes, DAY_MINUTES):
        span = min(DAY_MINUTES, minutes - day_start)
        n = rng.poisson(profile.rate_per_minute, span)
        total = int(n.sum())
        if total == 0:
            continue
        anchors = np.maximum(
            1, np.rint(rng.normal(profile.anchors_mean, profile.anchors_mean * 0.3, total))
        ).astype(np.int64)
        level = profile.base_drift + rng.normal(0.0, profile.spread * REQUEST_SHARE, total)
        per_anchor = np.repeat(level, anchors) + rng.normal(
            0.0, profile.spread * ANCHOR_SHARE, int(anchors.sum())
        )
        drift = np.round(np.clip(per_anchor, 0.0, 1.0), 4)
        offsets = np.concatenate(([0], np.cumsum(anchors)[:-1]))
        request = np.add.reduceat(drift, offsets) / anchors
        # Faulty requests: 2 of the generator's 3 fault kinds carry no anchors (drift 0).
        faulty = (rng.random(total) < FAULT_RATE) & (rng.integers(0, 3, total) < 2)
        request[faulty] = 0.0
        minute_of = np.repeat(np.arange(span), n)
        sums = np.bincount(minute_of, weights=request, minlength=span)
        for m in np.flatnonzero(n):
            start = start_ms + (day_start + int(m)) * MINUTE_MS
            out.append(
                WindowAggregate.model_construct(
                    doc_type=profile.name,
                    window_start_ms=start,
                    window_end_ms=start + MINUTE_MS,
                    request_count=int(n[m]),
                    mean_drift=min(1.0, float(sums[m] / n[m])),
                )
            )
    return out


def clean_week(scenario: Scenario, days: int) -> dict[str, list[WindowAggregate]]:
    start = scenario.windows[-1].window_end_ms  # after the labelled span, nothing overlaps
    start -= start % MINUTE_MS
    return {
        p.name: simulate_clean(p, start, days * DAY_MINUTES, seed=scenario.seed * 1000 + i)
        for i, p in enumerate(scenario.profiles)
    }


def prepare(
    args: tuple[int, int, int, int, int],
) -> tuple[Scenario, dict[str, list[WindowAggregate]]]:
    seed, types, hours, fit_hours, days = args
    scenario = make_scenario(seed, types, hours, fit_hours)
    return scenario, clean_week(scenario, days)
