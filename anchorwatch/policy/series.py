"""Statistics of a type's window series: robust center and spread, how correlated
neighbouring windows are, and how far a short or correlated history widens a prediction
interval. Pure; the fit (``fitting``) and the seasonal profiles (``seasons``) use them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

from anchorwatch.contracts import WindowAggregate
from anchorwatch.policy.window import centers_at


def clip(value: float) -> float:
    """Into [0, 1], where drift lives."""
    return min(1.0, max(0.0, value))


#: Scales a median absolute deviation to a normal standard deviation.
MAD_TO_SIGMA = 1.4826


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


def robust_sigma(values: Sequence[float], mid: float | None = None) -> float:
    """1.4826 x the median absolute deviation from the median: the standard deviation for
    normal data, unmoved by a minority of outliers. ``mid``: the median, when known."""
    if mid is None:
        mid = median(values)
    return MAD_TO_SIGMA * median([abs(v - mid) for v in values])


#: Windows in a row beyond the cut that make an excursion sustained (an incident's shape).
SUSTAINED = 3


def sustained_marks(scaled: Sequence[float], cut: float) -> list[bool]:
    """Marks the residuals that belong to runs of ``SUSTAINED`` or more above ``cut``."""
    marks = [False] * len(scaled)
    i = 0
    while i < len(scaled):
        if scaled[i] <= cut:
            i += 1
            continue
        j = i
        while j < len(scaled) and scaled[j] > cut:
            j += 1
        if j - i >= SUSTAINED:
            marks[i:j] = [True] * (j - i)
        i = j
    return marks


def _winsorised_residuals(
    ordered: Sequence[WindowAggregate],
    center: float,
    hourly: Sequence[float] | None,
    weekday: Sequence[float] | None = None,
) -> list[float | None]:
    """Window means minus their center, clipped at 4 MAD sigmas (so a few spikes cannot fake
    or hide a correlation) and centred on their mean. Sustained excursions (``SUSTAINED``
    windows in a row beyond 3 MAD sigmas either way: the incidents and outages a history
    holds) are None: a 10-minute incident is not the type's normal correlation."""
    centers = centers_at(center, hourly, weekday, [w.window_start_ms for w in ordered])
    res = [w.mean_drift - c for w, c in zip(ordered, centers, strict=True)]
    mid = median(res)
    sigma = robust_sigma(res, mid)
    scale = max(4.0 * sigma, 1e-9)
    res = [min(scale, max(-scale, r - mid)) for r in res]
    marks = sustained_marks([abs(r) for r in res], max(3.0 * sigma, 1e-9))
    kept = [r for r, m in zip(res, marks, strict=True) if not m]
    mean = sum(kept) / len(kept) if kept else 0.0
    return [None if m else r - mean for r, m in zip(res, marks, strict=True)]


def autocorrelation(
    ws: Sequence[WindowAggregate],
    center: float,
    hourly: Sequence[float] | None = None,
    weekday: Sequence[float] | None = None,
) -> float:
    """Lag-1 autocorrelation of window means over neighbouring windows, in [0, 0.99].

    Residuals are winsorised at 4 MAD sigmas first and sustained excursions left out, so a
    few spikes or incidents cannot fake (or hide) the correlation. Negative estimates count
    as 0 (independent windows)."""
    ordered = sorted(ws, key=lambda w: w.window_start_ms)
    if len(ordered) < 3:
        return 0.0
    return _lag1(ordered, _winsorised_residuals(ordered, center, hourly, weekday))


def _lag1(ordered: Sequence[WindowAggregate], dev: Sequence[float | None]) -> float:
    """``autocorrelation`` of ``ordered`` (three windows or more) from their winsorised
    residuals ``dev``."""
    kept = [d for d in dev if d is not None]
    var = sum(d * d for d in kept)
    if var <= 0:
        return 0.0
    size = ordered[0].window_end_ms - ordered[0].window_start_ms
    lagged = [
        a * b
        for i in range(len(ordered) - 1)
        if (a := dev[i]) is not None
        and (b := dev[i + 1]) is not None
        and ordered[i + 1].window_start_ms - ordered[i].window_start_ms == size
    ]
    if len(lagged) < 2:
        return 0.0
    # Normalised by the pairs actually seen, so gaps in traffic do not bias it to zero.
    phi = (sum(lagged) / len(lagged)) / (var / len(kept))
    # From m pairs of independent windows the estimate strays by about 1 / sqrt(m): a
    # sparse type's hundred pairs read 0.15-0.2 by chance. Below twice that it is noise
    # and counts as 0, as the measured long-run ratio counts only beyond twice its error.
    if phi <= 2.0 / math.sqrt(len(lagged)):
        return 0.0
    return min(0.99, phi)


#: Windows (slots of one window length) per block when measuring how much a run of
#: neighbouring windows varies: an hour of one-minute windows.
BLOCK_WINDOWS = 60

#: Blocks the history must span before the measured ratio is used: half a day. On fewer
#: its relative error (0.47 on 12 blocks, 0.82 on 4) lets the hour holding one incident
#: pass as correlation, and lag-1 alone judges a shorter history.
MEASURED_MIN_BLOCKS = 12

#: The largest long-run variance ratio used: that of an AR(1) with phi 0.99.
MAX_LONG_RUN_RATIO = 199.0


def long_run_ratio(
    ws: Sequence[WindowAggregate],
    center: float,
    hourly: Sequence[float] | None = None,
    weekday: Sequence[float] | None = None,
) -> float:
    """How much more a sum of neighbouring window means varies than a sum of independent
    ones: Var(sum of k) / (k Var(one)), 1 for independent windows.

    The lag-1 figure (1 + phi) / (1 - phi) is exact for an AR(1) series, but real series are
    mostly a slowly wandering level plus window noise: their lag-1 correlation is diluted by
    the noise while the wander still adds up over many windows (phi 0.97 under noise reads
    as 0.45: a ratio of 2.6 instead of 30). So the ratio is also measured directly, from
    the variance of the sums over every run of ``BLOCK_WINDOWS`` slots (overlapping batch
    means), and that figure is used when it exceeds the lag-1 one by more than twice its
    own sampling error: independent types keep a ratio of 1."""
    ordered = sorted(ws, key=lambda w: w.window_start_ms)
    if len(ordered) < 3:
        return 1.0  # no pairs: independent (lag-1 autocorrelation 0)
    # The residuals autocorrelation() would work out, once for both figures.
    dev = _winsorised_residuals(ordered, center, hourly, weekday)
    ar1 = _lag1(ordered, dev)
    lag1 = (1.0 + ar1) / (1.0 - ar1)
    kept = [d for d in dev if d is not None]
    var = sum(d * d for d in kept) / max(len(kept), 1)
    size = max(ordered[0].window_end_ms - ordered[0].window_start_ms, 1)
    first = ordered[0].window_start_ms
    slots = [(w.window_start_ms - first) // size for w in ordered]
    span = slots[-1] + 1
    if var <= 0 or span < MEASURED_MIN_BLOCKS * BLOCK_WINDOWS:
        return lag1
    squares = count = 0.0
    total, j, kept_in = 0.0, 0, 0  # sum over [slots[i], slots[i] + BLOCK_WINDOWS), two pointers
    for i in range(len(ordered)):
        if slots[i] + BLOCK_WINDOWS > span:
            break
        while j < len(ordered) and slots[j] < slots[i] + BLOCK_WINDOWS:
            total += dev[j] or 0.0
            kept_in += dev[j] is not None
            j += 1
        squares += total * total
        count += kept_in
        total -= dev[i] or 0.0
        kept_in -= dev[i] is not None
    if count <= 0:
        return lag1
    measured = squares / count / var
    # Overlapping batch means: the estimate's relative sd is about sqrt(8 b / (3 N)).
    error = math.sqrt(8.0 * BLOCK_WINDOWS / (3.0 * span))
    if measured > lag1 * (1.0 + 2.0 * error):
        return min(MAX_LONG_RUN_RATIO, measured)
    return min(MAX_LONG_RUN_RATIO, lag1)


def equivalent_autocorrelation(ratio: float) -> float:
    """The phi of an AR(1) series with this long-run variance ratio, (R - 1) / (R + 1): the
    lag-1 autocorrelation itself for an AR(1) series. Stored in the baseline record; pooled
    evidence and the effective number of windows follow from it."""
    return min(0.99, max(0.0, (ratio - 1.0) / (ratio + 1.0)))


def effective_windows(windows: int, phi: float) -> float:
    """How many independent windows ``windows`` AR(1)-correlated ones are worth."""
    return max(1.0, windows * (1.0 - phi) / (1.0 + phi))


def spread_inflation(effective: float, sensitivity: float) -> float:
    """Factor on a spread estimated from ``effective`` independent windows so that
    ``sensitivity`` spreads above the center is where a *new* window lands as rarely as a
    normal one lands ``sensitivity`` sigmas up: the prediction interval, not the estimate.
    With the spread itself estimated, a new window's standardised distance follows a
    Student t with effective - 1 degrees of freedom, scaled by sqrt(1 + 1 / effective):
    ~1.01 on a day of independent windows, 1.3 on 20 effective ones, 2.4 on 7. Capped at
    3. It grows with the sensitivity, so a higher one still never gives a lower threshold."""
    k = max(effective - 1.0, 1.0)
    tail = 1.0 - NormalDist().cdf(sensitivity)
    limit = MAX_INFLATION * sensitivity
    if tail <= 0.0 or _t_tail(limit, k) > tail:
        return MAX_INFLATION
    low, high = sensitivity, limit
    for _ in range(60):
        mid = (low + high) / 2.0
        if _t_tail(mid, k) > tail:
            low = mid
        else:
            high = mid
    factor = high * math.sqrt(1.0 + 1.0 / max(effective, 1.0)) / sensitivity
    return min(MAX_INFLATION, max(1.0, factor))


#: The most a short or correlated history widens its spread.
MAX_INFLATION = 3.0


def _t_tail(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (t >= 0):
    I_x(df / 2, 1 / 2) / 2 with x = df / (df + t^2)."""
    return 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction
    (modified Lentz), on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return math.exp(log_front) * h / a


def normal_quantile(p: float) -> float:
    """The standard normal quantile (Python's own inverse CDF)."""
    return NormalDist().inv_cdf(p)
