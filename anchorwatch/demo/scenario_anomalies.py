"""The anomalies injected into a scenario's types, family by family, and their labels.

A type's series is drafted window by window (``SeriesDraft``): each family's injection
(``INJECT``) adds offsets to the level, replaces values (drops, flat lines) and records a
``ScenarioLabel`` for every labelled event, with what a policy should do about it (see
``anchorwatch.demo.scenarios``); single-window noise spikes go in unlabelled.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Final

from anchorwatch.demo.scenarios import (
    DAY_MINUTES,
    DROP_CODES,
    FLAT_LINE_CODES,
    GAP_MINUTES,
    GRID,
    HOUR_MINUTES,
    HUGE_SPIKE,
    MINUTE_MS,
    MODERATE_SPIKE_CAP,
    PRACTICAL_MARGIN,
    RECORD_FACTOR,
    STRIPPED_CODES,
    Expect,
    ScenarioLabel,
    TypeSpec,
)


class SeriesDraft:
    """One type's series while it is drawn: its arrays, window by window (``window_ms``
    each: a minute, or five for the daily family) from the start of its fit history, and the
    labels. Indexes are windows: ``day`` and ``hour`` convert."""

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


def _jump(rng: random.Random, s: SeriesDraft, start: int, end: int) -> None:
    size = max(PRACTICAL_MARGIN, rng.uniform(6.0, 10.0) * s.spec.marginal_sigma)
    s.add(start, end, size)
    s.label(start, end, "jump", size)


def _huge_spike(rng: random.Random, s: SeriesDraft, start: int) -> None:
    size = max(HUGE_SPIKE, rng.uniform(10.0, 12.0) * s.spec.marginal_sigma)
    s.add(start, start + 1, size)
    s.label(start, start + 1, "spike", size)


def _noise_spikes(
    rng: random.Random, s: SeriesDraft, per_day: int, size: Callable[[], float]
) -> None:
    """Unlabelled single-window spikes (noise), kept an hour away from every label."""
    busy = [
        ((lab.start_ms - s.first_ms) // s.window_ms, (lab.end_ms - s.first_ms) // s.window_ms)
        for lab in s.labels
    ]
    for _ in range(per_day * s.samples // s.day):
        m = rng.randrange(s.samples)
        if all(m < a - s.hour or m >= b + s.hour for a, b in busy):
            s.add(m, m + 1, size())


def _moderate(rng: random.Random, s: SeriesDraft) -> Callable[[], float]:
    return lambda: min(MODERATE_SPIKE_CAP, rng.uniform(3.0, 6.0) * s.spec.marginal_sigma)


def _durations(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(5, 60) for _ in range(n)]


def _inject_iid(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    for start, end in _slots(rng, first, span, _durations(rng, span // DAY_MINUTES)):
        _jump(rng, s, start, end)


def _inject_with_spikes(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    """Jumps and, except on sparse types, two huge single-window spikes; moderate spikes."""
    n = span // DAY_MINUTES + 1
    durations = _durations(rng, n)
    spikes = set() if s.spec.tier == "sparse" else set(rng.sample(range(n), 2))
    for i, (start, end) in enumerate(_slots(rng, first, span, durations)):
        if i in spikes:
            _huge_spike(rng, s, start)
        else:
            _jump(rng, s, start, end)


def _inject_ar1(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    _inject_with_spikes(rng, s, first, span)
    _noise_spikes(rng, s, 4, _moderate(rng, s))


def _inject_heavy(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    _inject_with_spikes(rng, s, first, span)  # the noise's own tail makes the ordinary spikes


def _inject_flat(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    for start, end in _slots(rng, first, span, _durations(rng, span // DAY_MINUTES)):
        size = round(rng.uniform(0.1, 0.2) / GRID) * GRID
        s.add(start, end, size)
        s.label(start, end, "jump", size)
    _noise_spikes(rng, s, 6, lambda: rng.randint(1, 3) * GRID)


def _inject_shift(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
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


def _inject_trend(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
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


def _inject_drops(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
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


def _inject_seasonal(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    _inject_iid(rng, s, first, span)


def _inject_bursts(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    """Jumps above the ordinary bursts and, except on sparse types, two record spikes (the
    bursts themselves are in the noise, see ``scenario_series.draw_bursts``)."""
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


def _inject_daily(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    """A jump a day, 3-12 windows (15-60 minutes), anywhere on the wave."""
    durations = [rng.randint(3, 12) for _ in range(span // s.day)]
    gap = GAP_MINUTES * MINUTE_MS // s.window_ms
    for start, end in _slots(rng, first, span, durations, gap):
        size = rng.uniform(PRACTICAL_MARGIN, 2 * PRACTICAL_MARGIN)
        s.add(start, end, size)
        s.label(start, end, "jump", size)


def _inject_quiet(rng: random.Random, s: SeriesDraft, first: int, span: int) -> None:
    """No incident: only the unlabelled single-window spikes of the kinds that have them."""
    if s.spec.kind == "ar1":
        _noise_spikes(rng, s, 4, _moderate(rng, s))
    elif s.spec.kind == "flat":
        _noise_spikes(rng, s, 6, lambda: rng.randint(1, 3) * GRID)


INJECT: Final[dict[str, Callable[[random.Random, SeriesDraft, int, int], None]]] = {
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
