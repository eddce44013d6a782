"""Spike gating: whether a run above the threshold is one of the type's ordinary spikes, and
when a type that pages too often becomes one noisy incident (a storm).

A spiky type's single windows above its threshold are ordinary: its fitted baseline carries
a spike record (per length k, how high its history stayed for k windows in a row), and a run
that stays within it is not paged. Held here, apart from the incident tracker
(``incidents``), which holds the state machine and consults this module on every breach:

- ``track_spike`` follows the run of windows above the threshold in the type's
  ``RunState``; ``give_back`` returns the evidence an ordinary spike pooled once it ends;
- ``judge_spike`` says whether the run is ordinary (``USUAL_SPIKE``), breaks the record or
  outlasts the type's spikes (a ``RECORD`` or ``SUSTAINED`` reason), or has nothing to be
  compared with;
- ``count_page`` counts the type's pages in the last day: the ``storm_after``-th opens a
  ``NOISY`` incident that stays open and holds the excursions that follow.
"""

from __future__ import annotations

from typing import Final

from anchorwatch.contracts import Reason
from anchorwatch.policy.config import RuleConfig
from anchorwatch.policy.incident_types import RunState, Slot
from anchorwatch.policy.window import DAY_MS

#: ``judge_spike``'s answer for an excursion within the type's ordinary spikes.
USUAL_SPIKE: Final = "usual"
#: Reason codes of an excursion that broke the type's spike record, or outlasted its spikes.
RECORD: Final = "spike_record_broken"
SUSTAINED: Final = "sustained_excursion"
#: The fewest windows a spiky type's ordinary spikes are allowed to last.
MIN_SPIKE_WINDOWS: Final = 2
#: How far above its record (its height above the center) a spiky type's excursion must
#: peak to break it: a third again. The record is read on a short history's few highest
#: spikes, so an ordinary spike of the next week tops it by a little about once a week.
SINGLE_RECORD: Final = 1.35
#: A type with no spikes above its threshold: a single window pages once its rise is this
#: many margins (see ``judge_spike``).
UNSEEN_SPIKE: Final = 2.0
#: The reason code of a noisy type's one incident.
NOISY: Final = "noisy"


def track_spike(st: RunState, slot: Slot) -> None:
    """Follow the run of windows above the threshold (``give_back`` gives back the evidence
    an ordinary spike pooled when it ends: it is normal for this type, and must not open an
    incident on the quiet windows after it)."""
    if slot.margin is None or (slot.residual is None and slot.state == "inconclusive"):
        return  # no window, or too small to judge and no pooled evidence: the run goes on
    if slot.residual is not None and slot.residual > slot.margin:
        if not st.spike:
            st.spike_cusum = slot.cusum_before
        st.spike.append(slot.residual)
        return
    st.spike, st.spike_held = [], False


def give_back(st: RunState, judged: bool, below: bool) -> None:
    """One of the type's ordinary spikes just ended (the run was held, and this window,
    ``judged`` alone, is ``below`` the threshold): the evidence it pooled is given back
    before this window is judged on what is left of it."""
    if st.spike_held and judged and below:
        st.cusum = min(st.cusum, st.spike_cusum)


def judge_spike(st: RunState, slot: Slot) -> str | Reason | None:
    """Whether the run above the threshold is one of the type's ordinary spikes
    (``USUAL_SPIKE``), breaks its record or outlasts its spikes (a reason that says so), or
    the type has no spikes above its threshold to compare with (None).

    The record holds, per length k, how high the history stayed for k windows in a row;
    the run is ordinary while it is no longer than the longest spike that reached above
    the threshold (two windows at least, on a type whose single windows do: a short
    history shows few of its two-window spikes) and no window of it tops the single
    windows' record by ``SINGLE_RECORD``."""
    margin = slot.margin
    if not st.spike or margin is None or not slot.record:
        return None
    record = slot.record
    usual = max((k for k, h in enumerate(record, 1) if h > margin), default=0)
    center = slot.center
    if usual == 0:
        # No spikes of its own above the threshold: a single window twice as high above
        # the center as the threshold (and its record) is beyond them all the same.
        high = st.spike[0]
        if len(st.spike) == 1 and high > UNSEEN_SPIKE * max(margin, record[0]):
            return Reason(
                code=RECORD,
                message=f"highest in {slot.history_days:.0f} days of history: drift "
                f"{center + high:.3f}, twice as far above its normal {center:.3f} as its "
                "threshold, and it has no such spikes",
            )
        return None
    if usual < MIN_SPIKE_WINDOWS <= len(record):
        usual = MIN_SPIKE_WINDOWS
    run = st.spike
    if len(run) > usual:
        return Reason(
            code=SUSTAINED,
            message=f"sustained {len(run)} windows above the threshold: this type's "
            f"ordinary spikes last at most {usual}",
        )
    # How high: a run as long as the type's spikes is one of them unless a window of it
    # tops the single windows' record by a third again (one window is the least evidence of
    # all). The records of longer spikes say how long they run; their heights, read on
    # the few long spikes a short history holds, are too uncertain to page on.
    peak = max(run)
    if peak > SINGLE_RECORD * record[0]:
        return Reason(
            code=RECORD,
            message=f"highest in {slot.history_days:.0f} days of history: drift "
            f"{center + peak:.3f}, a third again as far above its normal {center:.3f} as "
            f"this type's record of {center + record[0]:.3f}",
        )
    return USUAL_SPIKE


def count_page(rule: RuleConfig, st: RunState, slot: Slot) -> tuple[bool, Slot]:
    """Count the page ``slot`` opens against the type's last day: whether it is noisy (the
    ``storm_after``-th: its incident stays open until ``storm_quiet`` windows pass without a
    breach, and counts the excursions it holds), and the slot with the reason that says so."""
    st.pages = [*(t for t in st.pages if slot.start_ms - t < DAY_MS), slot.start_ms]
    noisy = rule.storm_after > 0 and len(st.pages) >= rule.storm_after
    if noisy:
        assert slot.judgement is not None
        broke = any(r.code == RECORD for r in slot.judgement.reasons)
        slot = slot.with_reason(
            Reason(
                code=NOISY,
                message=f"noisy: {len(st.pages)} excursions in the last 24 h"
                + ("" if broke else ", none above its record")
                + f"; kept as one incident until {rule.storm_quiet} windows pass without "
                "a breach. Consider pinning this type's threshold.",
            ),
        )
    return noisy, slot
