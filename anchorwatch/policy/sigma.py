"""The per-request sigma of a type's window means, the fit's measure of its spread (see
``fitting``'s module doc). Pure statistics."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from anchorwatch.contracts import WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.series import normal_quantile, quantile, robust_sigma, sustained_marks
from anchorwatch.policy.window import MIN_SPREAD

#: The fewest windows beyond the tail quantile that the tail estimate rests on.
TAIL_WINDOWS = 10


def residuals(
    ws: Sequence[WindowAggregate], centers: Sequence[float], *, scaled: bool = True
) -> list[float]:
    """Window residuals, mean - center (``centers``: each window's, ``centers_at``), on the
    per-request scale (x sqrt(n)) unless ``scaled`` is False."""
    if not scaled:
        return [w.mean_drift - c for w, c in zip(ws, centers, strict=True)]
    return [
        (w.mean_drift - c) * math.sqrt(w.request_count) for w, c in zip(ws, centers, strict=True)
    ]


def request_sigma(
    ws: Sequence[WindowAggregate], centers: Sequence[float], grid: float, policy: PolicyConfig
) -> float:
    """Per-request sigma from window residuals scaled by sqrt(n) (see the module doc of
    ``fitting``); ``ws`` in time order, ``centers`` each window's center, ``grid`` their
    ``grid_sigma`` (the same for every center: worked out once per fit).

    The larger of two estimates, so neither a collapsed MAD nor a heavy upper tail makes
    ordinary windows look extraordinary:

    - the MAD of the residuals (robust: incidents in the history do not widen it);
    - what the history's upper tail implies: the ``tail_quantile`` of the residuals over
      the normal quantile. Isolated spikes stay in (they are part of normal operation);
      sustained excursions (``SUSTAINED`` windows in a row beyond 3 MAD sigmas, the shape of
      an incident) are left out. Flat or quantised histories whose MAD is zero get their
      spread from here, or at least from the grid their values sit on.
    """
    scaled = residuals(ws, centers)
    mad_sigma = robust_sigma(scaled)
    cut = 3.0 * max(mad_sigma, grid, MIN_SPREAD)
    marks = sustained_marks(scaled, cut)
    kept = [r for r, excursion in zip(scaled, marks, strict=True) if not excursion]
    # A quantile is only as good as the windows beyond it: at least TAIL_WINDOWS of them.
    level = min(policy.tail_quantile, 1.0 - TAIL_WINDOWS / max(len(kept), 1))
    if kept and level > 0.5:
        tail = quantile(sorted(kept), level)
        tail_sigma = max(tail, 0.0) / normal_quantile(level)
    else:
        tail_sigma = 0.0
    return max(mad_sigma, tail_sigma, grid)


def grid_sigma(ws: Sequence[WindowAggregate]) -> float:
    """A quantised history (values on a grid, e.g. 0.01) cannot resolve changes below its
    step: half a step, on the per-request scale, is the least spread it can claim."""
    values = sorted({round(w.mean_drift, 9) for w in ws})
    steps = [b - a for a, b in itertools.pairwise(values) if b - a > 1e-9]
    if not steps:
        return 0.0
    counts = sorted(w.request_count for w in ws)
    return 0.5 * min(steps) * math.sqrt(counts[len(counts) // 2])
