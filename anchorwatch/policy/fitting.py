"""Fit a doc type's baseline from the one-minute windows of its history. Pure statistics.

For each type, over its windows (request count n_i, mean drift m_i):

- ``center``: the median of the window means (per UTC hour of day too, when seasonal);
- ``spread``: how far a window mean strays at the type's typical request count. A mean over
  n requests has standard error sigma / sqrt(n), so the residuals are first put on one scale,
  u_i = (m_i - center) * sqrt(n_i), whose robust spread (1.4826 x MAD) estimates the
  per-request sigma; ``spread = sigma / sqrt(typical_request_count)``. A window of n requests
  then strays by ``spread * sqrt(typical / n)`` (see ``spread_at``): busy and sparse windows of
  the same type are judged on the same footing. Median and MAD ignore the incidents and
  data-quality faults the history holds, as long as they cover under half of it.
- ``threshold = max(center + max(sensitivity x spread, min_margin), threshold_floor)`` and
  ``critical_threshold`` alike with the critical figures, both capped at 1;
- ``min_requests``: the smallest n whose standard error fits ``significance`` times into the
  margin ``threshold - center``, so one window alone is trusted only when its mean is precise
  enough to mean something; at least ``min_requests_floor``.

Types with fewer than ``min_windows`` windows are marked ``insufficient_history`` and carry
the static rule's figures, which is what ``judge_window`` applies to them.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.window import HOUR_MS, hour_of_day
from anchorwatch.policy.window import baseline_at as baseline_at  # the old import path

DAY_MS = 24 * HOUR_MS
#: Scales a median absolute deviation to a normal standard deviation.
MAD_TO_SIGMA = 1.4826
#: Lower bound of a fitted spread: a type whose windows never vary still has rounding noise,
#: and every standard error derived from it must stay finite.
MIN_SPREAD = 1e-4


@dataclass(frozen=True)
class FitResult:
    baseline: Baseline
    notes: tuple[str, ...]  # why a type is unfitted, why seasonality is off, capped figures


def median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) of sorted values."""
    if not ordered:
        raise ValueError("quantile of no values")
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def robust_sigma(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation from the median: the standard deviation for
    normal data, unmoved by a minority of outliers."""
    mid = median(values)
    return MAD_TO_SIGMA * median([abs(v - mid) for v in values])


def spread_at(baseline: Baseline, request_count: int) -> float:
    """Standard error of a window mean over ``request_count`` requests for this type."""
    typical = max(baseline.typical_request_count, 1.0)
    return max(baseline.spread, MIN_SPREAD) * math.sqrt(typical / max(request_count, 1))


def baseline_version(doc_type: str, fitted_at_ms: int, start_ms: int, end_ms: int) -> str:
    """Deterministic, and new on every refit (the fit time is part of it)."""
    digest = hashlib.sha256(f"{doc_type}\x1f{fitted_at_ms}\x1f{start_ms}\x1f{end_ms}".encode())
    return f"b1-{digest.hexdigest()[:20]}"


def fit_baseline(
    doc_type: str,
    windows: Sequence[WindowAggregate],
    policy: PolicyConfig,
    *,
    fitted_at_ms: int,
    history_start_ms: int,
    history_end_ms: int,
) -> FitResult:
    """Fit one type from its windows (any order; windows without requests are ignored)."""
    ws = [w for w in windows if w.request_count > 0]
    notes: list[str] = []
    common: dict[str, Any] = {
        "doc_type": doc_type,
        "version": baseline_version(doc_type, fitted_at_ms, history_start_ms, history_end_ms),
        "fitted_at_ms": fitted_at_ms,
        "history_start_ms": history_start_ms,
        "history_end_ms": history_end_ms,
        "window_count": len(ws),
    }
    means = sorted(w.mean_drift for w in ws)
    counts = [float(w.request_count) for w in ws]
    if len(ws) < policy.min_windows:
        notes.append(
            f"insufficient history: {len(ws)} windows, needs {policy.min_windows}; "
            "the static rule applies"
        )
        static = policy.fallback
        baseline = Baseline(
            **common,
            status="insufficient_history",
            center=median(means) if ws else 0.0,
            spread=_request_sigma(ws, median(means)) / math.sqrt(median(counts)) if ws else 0.0,
            p95=quantile(means, 0.95) if ws else 0.0,
            p99=quantile(means, 0.99) if ws else 0.0,
            typical_request_count=median(counts) if ws else 0.0,
            threshold=static.threshold,
            critical_threshold=static.critical_threshold,
            min_requests=static.min_requests,
        )
        return FitResult(baseline, tuple(notes))

    center = median(means)
    typical = median(counts)
    sigma = _request_sigma(ws, center)
    hourly = _hourly_centers(ws, policy, notes)
    if hourly is not None:
        seasonal_sigma = _request_sigma(ws, center, hourly)
        if policy.seasonality == "auto" and seasonal_sigma > (1 - policy.seasonal_min_gain) * sigma:
            notes.append(
                f"seasonality not used: the hourly profile narrows the spread by only "
                f"{1 - seasonal_sigma / sigma:.0%} (auto needs {policy.seasonal_min_gain:.0%})"
                if sigma > 0
                else "seasonality not used: the spread is already zero"
            )
            hourly = None
        else:
            sigma = seasonal_sigma
    spread = max(sigma / math.sqrt(typical), MIN_SPREAD)

    margin = max(policy.sensitivity * spread, policy.min_margin)
    critical_margin = max(policy.critical_sensitivity * spread, policy.critical_min_margin)
    threshold = _clip(max(center + margin, policy.threshold_floor))
    critical = _clip(max(center + critical_margin, threshold))
    if threshold >= 1.0:
        notes.append(
            f"threshold capped at 1.0: center {center:.3f} leaves no room for a rise of "
            f"{margin:.3f}; this type cannot breach"
        )
    # Smallest n with significance * spread_at(n) <= margin (the margin as actually stored).
    room = threshold - center
    if room > 0:
        needed = typical * (policy.significance * spread / room) ** 2
        min_requests = max(policy.min_requests_floor, math.ceil(needed - 1e-9))
    else:
        min_requests = policy.min_requests_floor
    baseline = Baseline(
        **common,
        status="fitted",
        center=center,
        spread=spread,
        p95=quantile(means, 0.95),
        p99=quantile(means, 0.99),
        typical_request_count=typical,
        threshold=threshold,
        critical_threshold=critical,
        min_requests=min_requests,
        hourly_center=hourly,
    )
    return FitResult(baseline, tuple(notes))


def fit_baselines(
    windows: Iterable[WindowAggregate],
    policy: PolicyConfig,
    *,
    fitted_at_ms: int,
    history_start_ms: int | None = None,
    history_end_ms: int | None = None,
    on_type: Callable[[str], None] | None = None,
) -> dict[str, FitResult]:
    """Fit every type seen in ``windows``. The history range defaults to the windows' own
    span; ``on_type`` is called after each type (progress for long fits)."""
    per_type: dict[str, list[WindowAggregate]] = defaultdict(list)
    first, last = None, None
    for w in windows:
        per_type[w.doc_type].append(w)
        first = w.window_start_ms if first is None else min(first, w.window_start_ms)
        last = w.window_end_ms if last is None else max(last, w.window_end_ms)
    start = history_start_ms if history_start_ms is not None else first
    end = history_end_ms if history_end_ms is not None else last
    if start is None or end is None:
        return {}
    results = {}
    for doc_type in sorted(per_type):
        results[doc_type] = fit_baseline(
            doc_type,
            per_type[doc_type],
            policy,
            fitted_at_ms=fitted_at_ms,
            history_start_ms=start,
            history_end_ms=max(start, end),
        )
        if on_type is not None:
            on_type(doc_type)
    return results


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def _request_sigma(
    ws: Sequence[WindowAggregate], center: float, hourly: Sequence[float] | None = None
) -> float:
    """Per-request sigma from window residuals scaled by sqrt(n) (see the module doc)."""
    scaled = [
        (w.mean_drift - (hourly[hour_of_day(w.window_start_ms)] if hourly else center))
        * math.sqrt(w.request_count)
        for w in ws
    ]
    return robust_sigma(scaled)


def _hourly_centers(
    ws: Sequence[WindowAggregate], policy: PolicyConfig, notes: list[str]
) -> list[float] | None:
    if policy.seasonality == "off":
        return None
    by_hour: dict[int, list[float]] = defaultdict(list)
    days: dict[int, set[int]] = defaultdict(set)
    for w in ws:
        hour = hour_of_day(w.window_start_ms)
        by_hour[hour].append(w.mean_drift)
        days[hour].add(w.window_start_ms // DAY_MS)
    short = [
        h
        for h in range(24)
        if len(by_hour[h]) < policy.seasonal_min_windows_per_hour
        or len(days[h]) < policy.seasonal_min_days
    ]
    if short:
        h = min(range(24), key=lambda hour: (len(days[hour]), len(by_hour[hour])))
        notes.append(
            f"seasonality off: every hour of day needs {policy.seasonal_min_windows_per_hour} "
            f"windows on {policy.seasonal_min_days} different days; {len(short)} of 24 hours "
            f"fall short (e.g. {h:02d}h UTC: {len(by_hour[h])} windows on {len(days[h])} days)"
        )
        return None
    return [median(by_hour[h]) for h in range(24)]
