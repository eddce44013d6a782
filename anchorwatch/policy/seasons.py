"""A type's rhythm: its center per hour of day and per day of the week, fitted from
whatever days and weeks its history holds and believed as far as they agree. Pure."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from anchorwatch.contracts import WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.series import clip, median
from anchorwatch.policy.window import DAY_MS, HOUR_MS, centers_at, day_of_week, hour_of_day


def hourly_centers(
    ws: Sequence[WindowAggregate], center: float, policy: PolicyConfig, notes: list[str]
) -> list[float] | None:
    """Per-hour centers from whatever days the history holds, each hour's offset from the
    flat center shrunk towards it by how far the days agree (``_profile_weight``).

    Coverage is counted in time, not windows: an hour needs ``seasonal_min_windows_per_hour``
    windows, or half of its slots on the days it was seen when the windows are longer than
    a minute (two days of 5-minute samples have 24 per hour, and a smooth daily wave in them
    is as plain as in a week of minutes)."""
    if policy.seasonality == "off" or not ws:
        return None
    size = max(ws[0].window_end_ms - ws[0].window_start_ms, 1)
    slots_per_hour = max(HOUR_MS // size, 1)
    by_hour: dict[int, list[float]] = defaultdict(list)
    by_day: dict[tuple[int, int], list[float]] = defaultdict(list)
    days: dict[int, set[int]] = defaultdict(set)
    # Grouped by the hour they start in first (one dict lookup a window), then by hour of
    # day and day: an hour's windows in the order they came, as the medians need no other.
    by_clock_hour: dict[int, list[float]] = defaultdict(list)
    for w in ws:
        by_clock_hour[w.window_start_ms // HOUR_MS].append(w.mean_drift)
    for clock_hour, means in by_clock_hour.items():
        hour, day = hour_of_day(clock_hour * HOUR_MS), clock_hour // 24
        by_hour[hour].extend(means)
        by_day[(hour, day)] = means
        days[hour].add(day)

    def needed(hour: int) -> int:
        half_the_slots = math.ceil(0.5 * slots_per_hour * len(days[hour]))
        return min(policy.seasonal_min_windows_per_hour, max(half_the_slots, 1))

    short = [
        h
        for h in range(24)
        if len(by_hour[h]) < needed(h) or len(days[h]) < policy.seasonal_min_days
    ]
    if short:
        h = min(range(24), key=lambda hour: (len(days[hour]), len(by_hour[hour])))
        notes.append(
            f"seasonality off: every hour of day needs {policy.seasonal_min_windows_per_hour} "
            f"windows (or half its slots) on {policy.seasonal_min_days} different days; "
            f"{len(short)} of 24 hours fall short (e.g. {h:02d}h UTC: {len(by_hour[h])} "
            f"windows on {len(days[h])} days)"
        )
        return None
    offsets = [median(by_hour[h]) - center for h in range(24)]
    weight = _profile_weight(offsets, by_day, days, policy)
    return [clip(center + weight[h] * offsets[h]) for h in range(24)]


def weekday_offsets(
    ws: Sequence[WindowAggregate],
    center: float,
    hourly: Sequence[float] | None,
    policy: PolicyConfig,
    notes: list[str],
) -> list[float] | None:
    """Per day of the week, how far its days sit from the hourly profile (or the flat
    center): the median of those days' median residuals, believed as far as the weeks
    agree (as hours are, ``_profile_weight``). Needs ``weekly_min_weeks`` of history, every
    day of the week seen that often."""
    if policy.seasonality == "off" or not ws:
        return None
    # The dates first (in the order they come): most histories are too short to go on.
    seen = dict.fromkeys(w.window_start_ms // DAY_MS for w in ws)
    dates: dict[int, list[int]] = defaultdict(list)
    for date in seen:
        dates[day_of_week(date * DAY_MS)].append(date)
    fewest = min(len(dates[d]) for d in range(7))
    if fewest < policy.weekly_min_weeks:
        if (max(seen) - min(seen) + 1) >= 7 * policy.weekly_min_weeks:
            notes.append(
                f"weekly cycle off: every day of the week needs {policy.weekly_min_weeks} "
                f"days of history; one has {fewest}"
            )
        return None
    by_date: dict[int, list[float]] = defaultdict(list)
    starts = [w.window_start_ms for w in ws]
    for w, at in zip(ws, centers_at(center, hourly, None, starts), strict=True):
        by_date[w.window_start_ms // DAY_MS].append(w.mean_drift - at)
    per_date = {date: median(values) for date, values in by_date.items()}
    offsets = [median([per_date[x] for x in dates[d]]) for d in range(7)]
    weights = agreement_weights(offsets, [[per_date[x] for x in dates[d]] for d in range(7)])
    # Shrunk to the flat center.
    out = [max(-1.0, min(1.0, w * o)) for w, o in zip(weights, offsets, strict=True)]
    # Whole days, not windows, tell whether the offsets explain anything: a robust spread
    # of the windows would not move for two days a week off the level.
    before = sum(v**2 for v in per_date.values())
    after = sum((v - out[day_of_week(date * DAY_MS)]) ** 2 for date, v in per_date.items())
    gain = 1.0 - math.sqrt(after / before) if before > 0 else 0.0
    if policy.seasonality == "auto" and gain < policy.seasonal_min_gain:
        notes.append(
            f"weekly cycle not used: the weekday offsets explain only {max(gain, 0.0):.0%} of "
            f"how days differ (auto needs {policy.seasonal_min_gain:.0%})"
        )
        return None
    return out


def _profile_weight(
    offsets: Sequence[float],
    by_day: dict[tuple[int, int], list[float]],
    days: dict[int, set[int]],
    policy: PolicyConfig,
) -> list[float]:
    """How much of each hour's offset to believe: signal / (signal + noise / days).

    The noise is how far one day's median of an hour strays from another day's of the same
    hour (pooled over the hours); the signal is what the offsets vary by beyond that. So a
    rhythm that repeats exactly is taken whole from two days (a smooth noiseless wave must
    not page at its peak on day three), and hourly medians of pure noise count for nothing.
    A single day cannot show its own noise: there, ``days / (days + seasonal_shrinkage)``."""
    if any(len(days[h]) < 2 for h in range(24)):
        return [len(days[h]) / (len(days[h]) + policy.seasonal_shrinkage) for h in range(24)]
    return agreement_weights(
        offsets, [[median(by_day[(h, d)]) for d in sorted(days[h])] for h in range(24)]
    )


def agreement_weights(offsets: Sequence[float], repeats: Sequence[Sequence[float]]) -> list[float]:
    """How much of each group's offset (an hour's, a day of the week's) to believe, from
    its repeats (the hour's median on each day it was seen; at least two each):
    signal / (signal + noise / repeats). The noise is the variance between repeats of a
    group, pooled over the groups; the signal is what the offsets vary by beyond it."""
    spreads = []
    for values in repeats:
        mid = sum(values) / len(values)
        spreads.append(sum((v - mid) ** 2 for v in values) / (len(values) - 1))
    noise = sum(spreads) / len(spreads)
    mean_repeats = sum(len(values) for values in repeats) / len(repeats)
    level = sum(offsets) / len(offsets)
    between = sum((o - level) ** 2 for o in offsets) / (len(offsets) - 1)
    signal = max(0.0, between - noise / mean_repeats)
    out = []
    for values in repeats:
        error = noise / len(values)
        out.append(signal / (signal + error) if signal + error > 0 else 1.0)
    return out
