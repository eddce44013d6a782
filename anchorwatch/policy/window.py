"""Judge one window: the rule written once, run by the Flink job, the backtest and alerting.

A window is compared with its doc type's baseline when that baseline was fitted on enough
history, otherwise with the static rule (by default the source's `avg > 0.85 and count > 5`).
The figures it compares with (threshold, critical threshold, minimum sample size) come from
the baseline record itself, so every consumer compares against the same numbers. An owner's
pin (in settings, or on the record) wins over them: a pinned threshold judges the type by
fixed figures like a static rule (``pinned_rule``), a pinned minimum volume leaves smaller
windows unjudged.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from anchorwatch.contracts import Baseline, Reason, Verdict, WindowAggregate, verdict_id
from anchorwatch.contracts.models import BaselinePin, BreachLevel, RuleKind

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class StaticRule:
    """The rule for doc types without a usable baseline."""

    threshold: float = 0.85
    critical_threshold: float = 0.9
    min_requests: int = 6  # the source's "request_count > 5"

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= self.critical_threshold <= 1.0:
            raise ValueError("threshold: need 0 <= threshold <= critical_threshold <= 1")
        if self.min_requests < 1:
            raise ValueError("min_requests: must be at least 1")


@dataclass(frozen=True)
class QualityLimits:
    """Shares (of a window's requests or anchors) above which a data-quality signature is
    named in the verdict. Diagnoses explain a window; they do not raise its breach level."""

    zero_anchor_share: float = 0.2
    disabled_share: float = 0.2
    resample_share: float = 0.3
    mean_kl_divergence: float = 1.0


@dataclass(frozen=True)
class Judgement:
    rule: RuleKind
    threshold: float
    critical_threshold: float
    min_requests: int
    breach_level: BreachLevel
    baseline_version: str | None
    reasons: list[Reason] = field(default_factory=list)


def verdict_for(window: WindowAggregate, judgement: Judgement, job_version: str) -> Verdict:
    """The verdict on ``window``: its figures, the judgement and a deterministic id."""
    return Verdict(
        verdict_id=verdict_id(window.doc_type, window.window_start_ms, job_version),
        job_version=job_version,
        window=window,
        rule=judgement.rule,
        baseline_version=judgement.baseline_version,
        threshold=judgement.threshold,
        critical_threshold=judgement.critical_threshold,
        min_requests=judgement.min_requests,
        breach_level=judgement.breach_level,
        reasons=judgement.reasons,
    )


def hour_of_day(window_start_ms: int) -> int:
    return (window_start_ms // HOUR_MS) % 24


def seasonal_center(hourly: Sequence[float], window_start_ms: int) -> float:
    """The center of an hourly profile at ``window_start_ms``: each hour's center holds at
    the middle of its hour, and the profile runs in straight lines between them (midnight
    wraps), so a smooth daily wave is followed within each hour instead of in steps (a
    step profile leaves a 0.13 x amplitude sawtooth that reads as spread)."""
    position = (window_start_ms % DAY_MS) / HOUR_MS - 0.5
    below = math.floor(position)
    frac = position - below
    return hourly[below % 24] * (1.0 - frac) + hourly[(below + 1) % 24] * frac


def day_of_week(window_start_ms: int) -> int:
    """0 for Monday (UTC), as the fit's weekday offsets are indexed."""
    return (window_start_ms // DAY_MS + 3) % 7  # 1970-01-01 was a Thursday


def center_at(
    center: float,
    hourly: Sequence[float] | None,
    weekday: Sequence[float] | None,
    window_start_ms: int,
) -> float:
    """A type's center at ``window_start_ms``: its hourly profile there (or the flat
    center), moved by the offset of that day of the week when the fit found a weekly
    cycle."""
    value = seasonal_center(hourly, window_start_ms) if hourly else center
    if weekday:
        value = min(1.0, max(0.0, value + weekday[day_of_week(window_start_ms)]))
    return value


def centers_at(
    center: float,
    hourly: Sequence[float] | None,
    weekday: Sequence[float] | None,
    starts: Sequence[int],
) -> list[float]:
    """``center_at`` of each window start in ``starts``. It depends on the time of day (and
    the day of the week, with weekday offsets) alone, so each is worked out once: a week of
    one-minute windows holds 1,440 times of day, and the fit needs every window's center
    several times."""
    if not hourly and not weekday:
        return [center] * len(starts)
    period = 7 * DAY_MS if weekday else DAY_MS  # the time of day, and of the week
    known: dict[int, float] = {}
    out = []
    for start in starts:
        key = start % period
        value = known.get(key)
        if value is None:
            value = known[key] = center_at(center, hourly, weekday, start)
        out.append(value)
    return out


def centers_of(baseline: Baseline, starts: Sequence[int]) -> list[float]:
    """``baseline_at(baseline, start).center`` of each window start in ``starts``."""
    if (baseline.hourly_center is None and baseline.weekday_offset is None) or (
        baseline.status != "fitted"
    ):
        return [baseline.center] * len(starts)
    return centers_at(baseline.center, baseline.hourly_center, baseline.weekday_offset, starts)


#: A baseline's figures that move with its center: center, threshold, critical threshold,
#: extreme threshold (see ``baseline_at``).
Figures = tuple[float, float, float, float | None]


def figures_of(baseline: Baseline) -> Figures:
    return (
        baseline.center,
        baseline.threshold,
        baseline.critical_threshold,
        baseline.extreme_threshold,
    )


def figures_at(baseline: Baseline, window_start_ms: int, figures: Figures | None = None) -> Figures:
    """``baseline_at(baseline, window_start_ms)``'s figures without the copy of the record
    (the per-window paths need only these); ``figures``: moved from these instead of the
    baseline's own (as ``baseline_at`` of a baseline it already moved does)."""
    hourly, weekday = baseline.hourly_center, baseline.weekday_offset
    held = figures if figures is not None else figures_of(baseline)
    if (hourly is None and weekday is None) or baseline.status != "fitted":
        return held
    center, threshold, critical, extreme = held
    moved = center_at(center, hourly, weekday, window_start_ms)
    offset = moved - center
    threshold = min(1.0, max(0.0, threshold + offset))
    critical = max(threshold, min(1.0, max(0.0, critical + offset)))
    if extreme is not None:
        extreme = max(critical, min(1.0, max(0.0, extreme + offset)))
    return moved, threshold, critical, extreme


def baseline_at(baseline: Baseline, window_start_ms: int) -> Baseline:
    """The baseline as it applies to the window starting at ``window_start_ms``: with an
    hourly profile or weekday offsets, center and thresholds move with the center there
    (see ``center_at``; the margins stay)."""
    if (baseline.hourly_center is None and baseline.weekday_offset is None) or (
        baseline.status != "fitted"
    ):
        return baseline
    center, threshold, critical, extreme = figures_at(baseline, window_start_ms)
    return baseline.model_copy(
        update={
            "center": center,
            "threshold": threshold,
            "critical_threshold": critical,
            "extreme_threshold": extreme,
        }
    )


def pinned_rule(
    pin: BaselinePin | None, baseline: Baseline | None, static: StaticRule
) -> StaticRule | None:
    """The fixed figures of a pinned threshold (None: no threshold pinned): the pin's
    threshold; its critical threshold, or one as far above it as the type's critical
    threshold was above its warning threshold (the baseline's, else the static rule's), at
    most 1; its minimum volume, else the baseline's (the static rule's)."""
    if pin is None or pin.threshold is None:
        return None
    held: Baseline | StaticRule = baseline if baseline is not None else static
    critical = pin.critical_threshold
    if critical is None:
        critical = min(1.0, pin.threshold + max(held.critical_threshold - held.threshold, 0.0))
    return StaticRule(
        pin.threshold, max(critical, pin.threshold), pin.min_requests or held.min_requests
    )


def pin_words(pin: BaselinePin) -> str:
    """Who pinned, or where: 'by ana: vendor runs high', 'in settings'."""
    who = "in settings" if pin.source == "settings" else f"by {pin.author or 'someone'}"
    return who + (f": {pin.reason}" if pin.reason else "")


def judge_window(
    window: WindowAggregate,
    baseline: Baseline | None,
    static: StaticRule = StaticRule(),
    quality: QualityLimits = QualityLimits(),
    flat: FlatLine | None = None,
    pin: BaselinePin | None = None,
) -> Judgement:
    """``flat``: the type's ``FlatLine`` state including this window, from a judge that
    keeps state between windows (the drift job's); a flat line is then diagnosed on windows
    that carry no standard deviation too. ``pin``: the type's pin in settings, which wins
    over the baseline's own (``baseline.pin``)."""
    reasons: list[Reason] = []
    if pin is None and baseline is not None:
        pin = baseline.pin
    fixed = pinned_rule(pin, baseline, static)
    pinned_min = pin.min_requests if pin is not None else None
    fitted = baseline is not None and baseline.status == "fitted"
    # The fitted baseline at this window: what the drop diagnoses compare with.
    against = baseline_at(baseline, window.window_start_ms) if baseline and fitted else None
    rule: RuleKind
    if fixed is not None and pin is not None:
        # An owner's threshold: fixed figures, judged as a static rule is.
        rule, version = "static", baseline.version if baseline is not None else None
        threshold, critical = fixed.threshold, fixed.critical_threshold
        min_requests = fixed.min_requests
        reasons.append(
            Reason(
                code=PINNED,
                message=f"threshold pinned at {threshold:.3f} (critical {critical:.3f}, "
                f"at least {min_requests} requests) {pin_words(pin)}",
            )
        )
    elif against is not None:
        baseline = against
        rule = "baseline"
        threshold, critical = baseline.threshold, baseline.critical_threshold
        min_requests, version = pinned_min or baseline.min_requests, baseline.version
    else:
        rule, version = "static", None
        threshold, critical = static.threshold, static.critical_threshold
        min_requests = pinned_min or static.min_requests
        why = "no baseline yet" if baseline is None else "baseline has too little history"
        reasons.append(Reason(code="static_rule", message=f"{why}: static rule applies"))

    level: BreachLevel = "none"
    mean, n = window.mean_drift, window.request_count
    # A window too small to be trusted at the threshold still counts when it clears the
    # threshold by ``significance`` standard errors at its own size. Without this, a higher
    # sensitivity (a wider margin, hence a smaller min_requests) could judge a window the
    # lower one ignores, and raising a sensitivity must never add alerts.
    significant = (
        rule == "baseline"
        and pinned_min is None  # a pinned minimum volume: smaller windows do not count
        and baseline is not None
        and n > 0
        and mean - baseline.center
        > (baseline.significance or SIGNIFICANCE) * spread_at(baseline, n)
    )
    if n < min_requests and not significant:
        if mean > threshold:
            reasons.append(
                Reason(
                    code="too_few_requests",
                    message=f"mean drift {mean:.3f} above {threshold:.3f} on only {n} requests "
                    f"(needs {min_requests})",
                )
            )
    elif mean > critical:
        level = "critical"
        reasons.append(
            Reason(
                code="above_critical",
                message=f"mean drift {mean:.3f} above critical threshold {critical:.3f} "
                f"({n} requests)",
            )
        )
        extreme = baseline.extreme_threshold if rule == "baseline" and baseline else None
        if extreme is not None and mean > extreme:
            reasons.append(
                Reason(
                    code=BEYOND_HISTORY,
                    message=f"mean drift {mean:.3f} above {extreme:.3f}, beyond anything "
                    "this type's history showed: one window is enough",
                )
            )
    elif mean > threshold:
        level = "warning"
        reasons.append(
            Reason(
                code="above_threshold",
                message=f"mean drift {mean:.3f} above threshold {threshold:.3f} ({n} requests)",
            )
        )
    reasons.extend(diagnose(window, quality))
    if against is not None:
        reasons.extend(diagnose_against(window, against))
    if flat is not None and flat.flat and all(r.code != FLAT_LINE for r in reasons):
        reasons.append(flat.reason())
    return Judgement(rule, threshold, critical, min_requests, level, version, reasons)


#: The reason code of a window judged by an owner's pinned threshold.
PINNED = "pinned"
#: The reason code of a window beyond anything its type's history showed (see the fit):
#: it opens a critical incident on its own.
BEYOND_HISTORY = "beyond_history"
#: Standard errors by which a small window must clear its threshold to count on its own,
#: for baselines that do not carry the fit's ``significance``.
SIGNIFICANCE = 3.0
#: Below this lower bound of a standard error nothing is measurable (see fitting).
MIN_SPREAD = 1e-4


def spread_at(baseline: Baseline, request_count: int) -> float:
    """Standard error of a window mean over ``request_count`` requests for this type."""
    typical = max(baseline.typical_request_count, 1.0)
    return max(baseline.spread, MIN_SPREAD) * math.sqrt(typical / max(request_count, 1))


def diagnose_against(window: WindowAggregate, baseline: Baseline) -> list[Reason]:
    """Data-quality signatures that only show against the type's normal: drift far below it
    (anchors stripped, snapshots emptied upstream) and drift that stopped varying. They are
    diagnoses, never drift breaches."""
    found: list[Reason] = []
    n = window.request_count
    if n < baseline.min_requests or n == 0:
        return found
    margin = baseline.threshold - baseline.center
    # The margin measures rises; where it is wider than the normal level itself (a low,
    # noisy type) no fall could clear it, so a fall to DROP_SHARE of the normal is far
    # enough, as long as it is also significant at the window's own size.
    reach = min(margin, (1.0 - DROP_SHARE) * baseline.center)
    floor = baseline.center - max(reach, SIGNIFICANCE * spread_at(baseline, n))
    if margin > 0 and window.mean_drift < floor:
        found.append(
            Reason(
                code="drift_drop",
                message=f"mean drift {window.mean_drift:.3f} far below this type's normal "
                f"{baseline.center:.3f} (lower limit {floor:.3f}): anchors stripped or "
                "snapshots emptied upstream?",
            )
        )
    stddev = window.stddev_drift
    if stddev is not None and stddev == 0.0 and n >= 3 and baseline.spread > MIN_SPREAD:
        found.append(
            Reason(
                code=FLAT_LINE,
                message=f"all {n} requests had drift exactly {window.mean_drift:.3f}: the "
                "drift measurement has stopped varying",
            )
        )
    return found


#: The reason code of drift that stopped varying (see ``diagnose_against``, ``FlatLine``).
FLAT_LINE = "flat_line"
#: A window below this share of its type's normal level is a drop whatever the margin.
DROP_SHARE = 0.25
#: Windows in a row with exactly the same mean that make a flat line (``FlatLine``).
FLAT_RUN = 10
#: Weight of one window in ``FlatLine.varying``, and the share of windows whose mean
#: changes, before the run, that makes a type one whose drift varies.
FLAT_WEIGHT = 0.05
FLAT_VARYING = 0.5


def same_mean(a: float, b: float | None) -> bool:
    """Window means of requests that all had the same drift: equal up to the rounding of
    averaging different numbers of copies of one value."""
    return b is not None and abs(a - b) <= SAME_MEAN


#: How far apart two window means may be and still be the same value (see ``same_mean``).
SAME_MEAN = 1e-9


@dataclass(frozen=True)
class FlatLine:
    """What a type's recent windows say about its drift holding still: the state a per-type
    judge keeps between windows (plain values, so it serialises), for types whose windows
    carry nothing but count and mean (no standard deviation to show it in one window).

    A type whose window means usually differ from one window to the next (``varying``: the
    share of windows, exponentially weighted, whose mean differed from the one before, up
    to the current run) and whose last ``FLAT_RUN`` windows had exactly the same mean has
    stopped varying: its drift measurement is stuck. Quantised types whose level holds for
    hours (a flat history) have a low ``varying`` and are never diagnosed for holding."""

    mean: float | None = None  # the latest window's mean
    run: int = 0  # windows in a row (with requests) with exactly that mean
    varying: float = 0.0

    def after(self, window: WindowAggregate) -> FlatLine:
        """The state once ``window`` is seen; windows without requests change nothing."""
        if window.request_count <= 0:
            return self
        mean = window.mean_drift
        if self.mean is None:
            return FlatLine(mean, 1, self.varying)
        if same_mean(mean, self.mean):
            return FlatLine(self.mean, self.run + 1, self.varying)
        # The run ended: its repeats (no change) and this change count now, so the share
        # stays that of the windows before any run still going on.
        held = (1.0 - FLAT_WEIGHT) ** (self.run - 1)
        varying = self.varying * held
        return FlatLine(mean, 1, varying + FLAT_WEIGHT * (1.0 - varying))

    @property
    def flat(self) -> bool:
        return self.run >= FLAT_RUN and self.varying >= FLAT_VARYING

    def reason(self) -> Reason:
        return Reason(
            code=FLAT_LINE,
            message=f"the last {self.run} windows all had mean drift exactly "
            f"{self.mean or 0.0:.4f}: the drift measurement has stopped varying",
        )


def diagnose(window: WindowAggregate, limits: QualityLimits) -> list[Reason]:
    """Known data-quality signatures, named so the people paged know where to look."""
    found = []
    if (share := window.zero_anchor_share) is not None and share > limits.zero_anchor_share:
        found.append(
            Reason(
                code="zero_anchors",
                message=f"{share:.0%} of requests had no anchors (drift stuck at 0.0): documents "
                "without anchor markers",
            )
        )
    if (share := window.disabled_share) is not None and share > limits.disabled_share:
        found.append(
            Reason(
                code="snapshot_disabled",
                message=f"{share:.0%} of requests had snapshot status 'disabled': malformed "
                "anchor markers",
            )
        )
    if (kl := window.mean_kl_divergence) is not None and kl > limits.mean_kl_divergence:
        found.append(
            Reason(
                code="kl_divergence_spike",
                message=f"mean kl_divergence {kl:.2f}: look for invisible Unicode in the inputs",
            )
        )
    if (share := window.resample_share) is not None and share > limits.resample_share:
        found.append(
            Reason(
                code="resample_burst",
                message=f"{share:.0%} of anchors recommended 're-sample'",
            )
        )
    return found
