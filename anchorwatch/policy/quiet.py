"""The common window in one step: one that leaves its type as calm as it found it.

Most windows of a type with nothing in the making are judged clean and change no more than
a few of the type's counters: no incident is open, no run of breaches is going on, the
pooled evidence stays under its limit and nothing steps up. The incident tracker
(``incidents``) hands such a type's windows here first: a window that is such a no-op is
accounted for directly, with exactly the state changes the full path (``_silence``,
``_judge``, ``_step``) makes of it, and without the objects that path builds for it (the
baseline moved to the window, the judgement and its reasons, the slot). Anything else takes
the full path: an open incident, a run, a spike held, a breach or a window above the
threshold, pooled evidence at its limit, a step up, a window too small for any evidence.
The tracker sends only unpinned types judged against a fitted baseline of their own (not
one it adapted) by a baseline rule.

The fit replays each history through the tracker two or more times (``fitting``), and the
alerting service runs it once per verdict: this is most of their windows, at a fraction of
the full path's cost. ``test_quiet_windows`` holds it to the full path's results.
"""

from __future__ import annotations

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.evidence import INDEPENDENT_WINDOWS, cusum_at, hold, step_base, steps
from anchorwatch.policy.incident_types import RunState
from anchorwatch.policy.window import Judgement, figures_at


def quiet_window(
    policy: PolicyConfig,
    rule: RuleConfig,
    st: RunState,
    stored: Baseline | None,
    window: WindowAggregate,
    judgement: Judgement | None,
) -> bool:
    """Whether ``window`` is a no-op for ``rule`` (see the module doc) on a type with the
    baseline ``stored`` (the tracker's: no settings pin, not adapted); when it is, its
    changes to ``st`` are made here (bar ``last_slot_ms`` and ``size_ms``, the tracker's
    own), else ``st`` is left as it was. ``judgement``: the job's, as
    ``IncidentTracker.observe`` takes it."""
    if (
        rule.compare != "baseline"
        or stored is None
        or stored.status != "fitted"
        or stored.pin is not None
    ):
        return False
    # At rest: no incident, run or held spike. The empty slots since the last window then
    # only count towards a gap, which this clean window ends again.
    if st.open is not None or st.run or st.critical_run or st.spike_held:
        return False
    start, n, mean = window.window_start_ms, window.request_count, window.mean_drift
    at = figures_at(stored, start)  # the baseline the full path judges with (baseline_at)
    center = at[0]
    if judgement is None:
        # judge_window's threshold: the stored baseline moved to the window, as here.
        limit, min_requests = at[1], stored.min_requests
    elif judgement.breach_level != "none":
        return False
    else:
        limit, min_requests = judgement.threshold, judgement.min_requests
    # At or below the threshold: no breach level (judge_window), not "elevated" (the
    # recovery level is the threshold while no incident is open), no spike (its residual,
    # mean - center, is at most the margin, threshold - center: rounding is monotonic).
    if not mean <= limit:
        return False
    conclusive = n >= min_requests
    pooled = rule.pooling and n > 0
    if not (conclusive or pooled):
        return False  # an inconclusive slot: it counts towards a gap
    margin = limit - center
    cusum = st.cusum
    if pooled:  # pool_window
        record = stored.spike_record or []
        spiky = bool(record) and max(record) > margin  # any spike above the margin
        cusum = cusum_at(policy, cusum, stored, (center, at[1]), n, mean, spiky=spiky)
        independent = (stored.autocorrelation or 0.0) <= INDEPENDENT_WINDOWS
        if (not conclusive or independent) and cusum >= policy.pooling_threshold:
            return False
    base = step_base(st, mean)
    if steps(rule, base, mean, center, margin, conclusive):
        return False
    # A clean slot: what pool_window, step_up, _step and track_spike make of it.
    st.cusum = cusum
    hold(st, mean)
    st.step_from = base if not conclusive else None
    st.run = st.critical_run = st.gap = 0
    st.spike = []  # a new list, as track_spike's: a state exported before keeps its own
    return True
