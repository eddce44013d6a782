"""Baseline adaptation: when a type's recent windows sit on a new level, and the baseline
moved to it.

The incident tracker (``incidents``) accepts a level shift that persisted as the type's new
normal (``IncidentTracker._adapt``) and gives it up once the type is back down
(``IncidentTracker._settle``); both rest on the same two pure pieces, held here so the
tracker keeps only the bookkeeping of which baseline applies to which type:

- ``plateau``: the level a run of window means sits at, when it sits level (a plateau, not a
  ramp);
- ``shifted``: a baseline moved by an offset, margins kept, with a version of its own.
"""

from __future__ import annotations

import hashlib

from anchorwatch.contracts import Baseline
from anchorwatch.policy.series import median


def plateau(recent: list[float], now: Baseline) -> float | None:
    """The level (the median) of the window means ``recent`` if they sit level: their two
    halves' medians differ by under half the margin of ``now``, the baseline at their time.
    None for a ramp, or for a baseline without a margin."""
    margin = now.threshold - now.center
    level = median(recent)
    half = len(recent) // 2
    # One window has no halves to compare (adapt_after = 1): it sits where it is.
    steady = half == 0 or abs(median(recent[:half]) - median(recent[half:])) <= margin / 2
    if margin <= 0 or not steady:
        return None
    return level


def shifted(baseline: Baseline, offset: float, at_ms: int) -> Baseline:
    """``baseline`` moved by ``offset`` (hourly profile too), margins kept, dated ``at_ms``;
    a version of its own, derived from the one it adapts."""

    def clip(x: float) -> float:
        return min(1.0, max(0.0, x))

    threshold = clip(baseline.threshold + offset)
    digest = hashlib.sha256(f"{baseline.version}\x1f{offset!r}\x1f{at_ms}".encode())
    return baseline.model_copy(
        update={
            "version": f"a1-{digest.hexdigest()[:20]}",
            "fitted_at_ms": max(at_ms, baseline.fitted_at_ms),
            "center": clip(baseline.center + offset),
            "threshold": threshold,
            "critical_threshold": max(threshold, clip(baseline.critical_threshold + offset)),
            "hourly_center": (
                [clip(c + offset) for c in baseline.hourly_center]
                if baseline.hourly_center is not None
                else None
            ),
        }
    )
