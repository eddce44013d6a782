"""What a window adds to the evidence beyond its own judgement: pooled evidence and step-ups.

``judge_window`` looks at one window alone. The incident tracker (``incidents``) weighs two
more kinds of evidence on each window, both kept in the type's ``RunState``, and held here so
that the tracker holds the state machine and this module the statistics it consults:

- pooled evidence (``pool_window``, ``cusum_step``): a one-sided CUSUM over the type's
  standardised window means, which sees a sparse type's rise that no window shows alone.
  For a window of n requests with standard error se = ``spread_at(baseline, n)``,
  z = (mean - center) / se, and the shift to detect d = pooling_shift x (threshold - center)
  / se, the statistic S = max(0, S + z - d/2) is the log-likelihood ratio of "the type has
  risen by that shift" against "it has not" (divided by d), summed over windows. It crosses
  ``pooling_threshold`` after a few windows of a real rise and stays near 0 on clean
  traffic. On correlated windows z is divided by sqrt(R), R the long-run variance ratio the
  fit measured, so a wandering level does not bank evidence. S is capped (``POOLING_CAP``)
  so that it falls back quickly once the evidence stops;
- a step up from a held level (``step_up``): on a type whose drift holds its value for
  ``HOLD_WINDOWS`` windows in a row, a sudden rise by more than the margin is the anomaly,
  however high it lands.
"""

from __future__ import annotations

import math
from typing import Final

from anchorwatch.contracts import Baseline, Reason, WindowAggregate
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.incident_types import RunState
from anchorwatch.policy.window import MIN_SPREAD, Judgement, same_mean, spread_at

#: The CUSUM statistic is held below this multiple of its limit: a long incident must not
#: bank so much evidence that the type stays "breaching" for long after it recovered.
POOLING_CAP: Final = 1.5
#: Lag-1 autocorrelation up to which a type's windows count as independent draws, whose
#: pooled evidence may judge windows big enough to judge alone.
INDEPENDENT_WINDOWS: Final = 0.3
#: A spiky type's window adds to its pooled evidence as if it were at most this many
#: references above the center (see ``cusum_step``).
SPIKY_CLIP: Final = 3.0
#: Windows in a row with exactly the same mean that make a held level (see ``step_up``).
HOLD_WINDOWS: Final = 10
#: The reason code of a window that stepped up from a held level by more than the margin.
STEP_UP: Final = "step_from_held_level"


def pool_window(
    policy: PolicyConfig,
    st: RunState,
    baseline: Baseline,
    window: WindowAggregate,
    judgement: Judgement,
    conclusive: bool,
) -> bool:
    """Add ``window`` to the type's pooled evidence (``st.cusum``): whether that evidence
    now judges the window a breach."""
    stored_record = baseline.spike_record or []
    spiky = any(h > judgement.threshold - baseline.center for h in stored_record)
    st.cusum = cusum_step(policy, st.cusum, baseline, window, spiky=spiky)
    # Pooled evidence judges the windows too small to judge alone, and any window of
    # a type whose windows are independent draws. Where neighbouring windows are
    # correlated, a big window is judged by its own mean: its neighbours are no
    # independent evidence for it, and pooling them pages on every slow wander.
    independent = (baseline.autocorrelation or 0.0) <= INDEPENDENT_WINDOWS
    return (not conclusive or independent) and (st.cusum >= policy.pooling_threshold)


def cusum_step(
    policy: PolicyConfig,
    cusum: float,
    baseline: Baseline,
    window: WindowAggregate,
    *,
    spiky: bool = False,
) -> float:
    """One CUSUM step. On correlated windows a sum of k of them varies R times more than
    k independent ones (R = (1 + phi) / (1 - phi), phi from the fit), so each window's
    evidence z is divided by sqrt(R) and the reference is not: the CUSUM then drifts
    down on normal traffic as fast as on independent windows, and its false-alarm rate
    is what ``pooling_threshold`` promises for them (discounting the reference as well
    would let a slow wander of the level bank evidence). The reference (half the shift
    to detect) grows with the margin, so a higher sensitivity never pools more
    evidence.

    ``spiky``: the type's ordinary spikes reach above its threshold, a tail no Gaussian
    likelihood ratio describes (two of its spikes would pool into a page). Its evidence
    is clipped at ``SPIKY_CLIP`` references: a window counts no more than one that
    high, so a sustained rise still pools within a few windows and a lone spike
    cannot."""
    return cusum_at(
        policy,
        cusum,
        baseline,
        (baseline.center, baseline.threshold),
        window.request_count,
        window.mean_drift,
        spiky=spiky,
    )


def cusum_at(
    policy: PolicyConfig,
    cusum: float,
    baseline: Baseline,
    at: tuple[float, float],
    request_count: int,
    mean: float,
    *,
    spiky: bool = False,
) -> float:
    """``cusum_step`` for a window of ``request_count`` requests and ``mean``, with the
    center and threshold ``at`` the window (``figures_at``: no copy of the baseline)."""
    center, threshold = at
    margin = threshold - center
    if margin <= 0:
        return 0.0
    se = max(spread_at(baseline, request_count), MIN_SPREAD)
    phi = baseline.autocorrelation or 0.0
    discount = math.sqrt((1.0 - phi) / (1.0 + phi))
    z = (mean - center) / se
    reference = policy.pooling_shift * margin / se / 2.0
    if spiky:
        z = min(z, SPIKY_CLIP * reference)
    # One window adds at most half the limit: a single heavy-tailed spike is never
    # pooled evidence on its own (the window rule judges it).
    step = min(discount * z - reference, policy.pooling_threshold / 2.0)
    cap = POOLING_CAP * policy.pooling_threshold
    return min(cap, max(0.0, cusum + step))


def step_up(
    rule: RuleConfig,
    st: RunState,
    baseline: Baseline,
    window: WindowAggregate,
    judgement: Judgement,
    conclusive: bool,
) -> bool:
    """A step up from a level that held: whether ``window`` breaches by it.

    On a type whose drift holds its value (quantised, flat: the same mean for
    ``HOLD_WINDOWS`` windows in a row), the level wanders in small steps between long
    holds, and the fitted threshold must sit above the whole wander: a jump from the
    bottom of it can stay below. There a sudden rise by more than the margin from the
    level just held is the anomaly, however high it lands, as long as it lands above
    the recovery level (``center + recovery_share x margin``). The windows right after
    the hold breach while they stay that far up; the run rules then apply as to any
    breach. Series that never repeat a mean exactly (anything with noise) never hold,
    so this never judges them. Both limits grow with the sensitivity (the margin)."""
    mean = window.mean_drift
    base = step_base(st, mean)
    hold(st, mean)
    margin = judgement.threshold - baseline.center
    stepped = steps(rule, base, mean, baseline.center, margin, conclusive)
    # A judged window that is no step ends it; a window too small to judge does not.
    st.step_from = base if stepped or not conclusive else None
    return stepped


def step_base(st: RunState, mean: float) -> float | None:
    """The level a step up to ``mean`` is measured from (``st`` unchanged): the one a step
    already under way left, or the level just held, when ``mean`` ends the hold."""
    if (
        st.held_mean is not None
        and not same_mean(mean, st.held_mean)
        and st.held_run >= HOLD_WINDOWS
    ):
        return st.held_mean
    return st.step_from


def hold(st: RunState, mean: float) -> None:
    """Count ``mean`` into the level the type holds."""
    if same_mean(mean, st.held_mean):
        st.held_run += 1
    else:
        st.held_mean, st.held_run = mean, 1


def steps(
    rule: RuleConfig,
    base: float | None,
    mean: float,
    center: float,
    margin: float,
    conclusive: bool,
) -> bool:
    """Whether ``mean`` is a step up from ``base`` (see ``step_up``)."""
    return (
        base is not None
        and conclusive
        and margin > 0
        and mean - base > margin
        and mean > center + rule.recovery_share * margin
    )


def step_up_reason(st: RunState, baseline: Baseline, judgement: Judgement, mean: float) -> Reason:
    """Why a window no threshold flagged breaches: it stepped up from the held level."""
    margin = judgement.threshold - baseline.center
    assert st.step_from is not None
    return Reason(
        code=STEP_UP,
        message=f"mean drift {mean:.3f} stepped up "
        f"{mean - st.step_from:.3f} from {st.step_from:.3f}, the level "
        f"it held for {HOLD_WINDOWS}+ windows (margin {margin:.3f})",
    )
