"""Incidents from window judgements: open, update, resolve, re-open. Pure and replayable.

The same ``IncidentTracker`` runs live (the alerting service feeds it verdicts) and in
backtests (fed window aggregates): given the same windows, baselines and policy it yields the
same incidents with the same ids. No clock, no I/O; duplicate or out-of-order windows are
ignored, so at-least-once delivery is harmless.

Per doc type and rule, every window slot (one window length of event time) is classed as

- critical / breach: ``judge_window`` said critical / warning, or pooled evidence is over
  its limit (below);
- clean: a judged window (enough requests) below threshold, or, with pooling, a window at
  or below threshold whose pooled evidence is under the limit;
- inconclusive: no window in the slot (no traffic), or too few requests and no pooling.

An incident opens after ``open_after`` consecutive breaching slots (inconclusive slots
neither count nor break a run, up to ``resolve_when_silent`` of them) (``open_after_critical``
critical ones), or at once when pooled evidence crosses its limit (the limit is already
evidence gathered over several windows) or a window is beyond anything its type's history
showed (the baseline's extreme threshold). It resolves after ``resolve_after`` clean slots with
no breach between them (inconclusive slots neither count nor break that run: sparse types
resolve too), or after ``resolve_when_silent`` inconclusive slots in a row. Breaching again
within ``reopen_within`` slots of resolving re-opens the same incident instead of a new one:
a flapping type keeps one ticket. Severity only goes up while open (``updated``).

A level shift that persists is accepted as the new normal (``_adapt``, resolution
"adapted"), and given up again, silently, once the type is back down (``_settle``).

Pooling (the evidence of sparse types): a one-sided CUSUM over the type's standardised window
means. For a window of n requests with standard error se = ``spread_at(baseline, n)``,
z = (mean - center) / se, and the shift to detect d = pooling_shift x (threshold - center) / se,
the statistic S = max(0, S + z - d/2) is the log-likelihood ratio of "the type has risen by
that shift" against "it has not" (divided by d), summed over windows. It crosses
``pooling_threshold`` after a few windows of a real rise and stays near 0 on clean traffic.
On correlated windows z is divided by sqrt(R), R the long-run variance ratio the fit measured
(see ``_pool``), so a wandering level does not bank evidence. S is capped so that it falls
back quickly once the evidence stops.

Incident ids hash (policy version, rule, doc type, start of the opening window): the alerting
service can post and ticket idempotently.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final, Literal

from anchorwatch.contracts import Baseline, DriftEvent, DriftEvidence, Reason, WindowAggregate
from anchorwatch.contracts.models import DriftEventType, Severity, Verdict
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.window import (
    BEYOND_HISTORY,
    DAY_MS,
    MIN_SPREAD,
    Judgement,
    baseline_at,
    judge_window,
    same_mean,
    spread_at,
)

ChangeKind = Literal["opened", "updated", "resolved", "reopened"]
EvidenceKind = Literal["window", "pooled"]
Resolution = Literal["clean", "silent", "adapted"]
SlotState = Literal["critical", "breach", "elevated", "clean", "inconclusive"]

#: The CUSUM statistic is held below this multiple of its limit: a long incident must not
#: bank so much evidence that the type stays "breaching" for long after it recovered.
POOLING_CAP: Final = 1.5
#: Lag-1 autocorrelation up to which a type's windows count as independent draws, whose
#: pooled evidence may judge windows big enough to judge alone.
INDEPENDENT_WINDOWS: Final = 0.3
#: A spiky type's window adds to its pooled evidence as if it were at most this many
#: references above the center (see ``_pool``).
SPIKY_CLIP: Final = 3.0
#: Windows in a row with exactly the same mean that make a held level (see ``_step_up``).
HOLD_WINDOWS: Final = 10
#: The reason code of a window that stepped up from a held level by more than the margin.
STEP_UP: Final = "step_from_held_level"


@dataclass(frozen=True)
class Incident:
    incident_id: str
    doc_type: str
    rule: str
    severity: Severity
    evidence: EvidenceKind  # what opened it: single windows, or pooled evidence
    first_breach_ms: int  # start of the first breaching window of the run that opened it
    opened_at_ms: int  # end of the window that opened it: the earliest it could be raised
    resolved_at_ms: int | None
    resolution: Resolution | None
    peak_mean_drift: float
    peak_window_start_ms: int
    last_breach_ms: int  # start of the latest breaching window
    breach_windows: int
    reopened: int  # times it was re-opened
    baseline_version: str | None  # of the window that opened it
    threshold: float  # the figure that window was compared with
    adapted_from: float | None = None  # resolution "adapted": the center it moved from
    adapted_to: float | None = None  # ... and the level accepted as the new normal
    noisy: bool = False  # opened as the storm_after-th page in a day: stays open, counts
    excursions: int = 0  # the excursions it holds instead of paging them

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IncidentChange:
    kind: ChangeKind
    incident: Incident  # as it is after the change
    window_start_ms: int  # the slot that caused it
    window: WindowAggregate | None  # None when there was no window (silence)
    judgement: Judgement | None


@dataclass
class _RunState:
    """One (doc type, rule): plain values only, so it serialises (see ``export_state``)."""

    size_ms: int = 60_000
    last_slot_ms: int | None = None
    run: int = 0  # consecutive breaching slots
    critical_run: int = 0
    run_start_ms: int | None = None
    gap: int = 0  # inconclusive slots since the run's last breach
    run_peak: float = 0.0
    run_peak_ms: int = 0
    clean_run: int = 0  # clean slots since the last breach, while open
    silent: int = 0  # consecutive inconclusive slots, while open
    cusum: float = 0.0
    held_mean: float | None = None  # the latest window mean, and for how many windows in a
    held_run: int = 0  # row (with requests) it was exactly that: a level that holds
    step_from: float | None = None  # the held level a step up is measured from (see _step_up)
    recent: list[float] = field(default_factory=list)  # window means while open (adapting)
    spike: list[float] = field(default_factory=list)  # residuals of the run above threshold
    spike_cusum: float = 0.0  # the pooled evidence before that run began
    spike_held: bool = False  # the run was one of the type's ordinary spikes: not paged
    pages: list[int] = field(default_factory=list)  # slots that paged in the last day
    open: Incident | None = None
    resolved: Incident | None = None  # the latest resolved incident: may be re-opened
    resolved_slot_ms: int | None = None


_RUN_FIELDS: Final = tuple(f.name for f in fields(_RunState))


def _run_record(st: _RunState) -> dict[str, Any]:
    """``asdict(st)`` without its deep copies, which made it most of a batch's time: every
    field is a plain value, a list of floats or an ``Incident`` of plain values."""
    record = {name: getattr(st, name) for name in _RUN_FIELDS}
    record["recent"] = list(st.recent)
    for key in ("open", "resolved"):
        if record[key] is not None:
            record[key] = dict(vars(record[key]))
    return record


@dataclass(frozen=True)
class _Slot:
    start_ms: int
    end_ms: int
    state: SlotState
    evidence: EvidenceKind | None  # for breaches: window or pooled-only
    window: WindowAggregate | None
    judgement: Judgement | None
    # Pooled evidence over its limit, whether or not the window itself also breached.
    pooled: bool = False
    # Against a fitted baseline: the window mean above its center, the margin, the type's
    # spike record and how many days of history it rests on; the evidence before this window.
    residual: float | None = None
    margin: float | None = None
    record: tuple[float, ...] = ()
    center: float = 0.0
    history_days: float = 0.0
    cusum_before: float = 0.0

    @property
    def beyond_history(self) -> bool:
        """A critical window beyond anything its type's history showed: enough alone."""
        return (
            self.state == "critical"
            and self.judgement is not None
            and any(r.code == BEYOND_HISTORY for r in self.judgement.reasons)
        )


def incident_id(policy_version: str, rule: str, doc_type: str, window_start_ms: int) -> str:
    digest = hashlib.sha256(
        f"{policy_version}\x1f{rule}\x1f{doc_type}\x1f{window_start_ms}".encode()
    )
    return f"i1-{digest.hexdigest()[:32]}"


def judgement_from_verdict(verdict: Verdict) -> Judgement:
    """The Flink job's judgement of a window, as ``judge_window`` would have returned it."""
    return Judgement(
        rule=verdict.rule,
        threshold=verdict.threshold,
        critical_threshold=verdict.critical_threshold,
        min_requests=verdict.min_requests,
        breach_level=verdict.breach_level,
        baseline_version=verdict.baseline_version,
        reasons=list(verdict.reasons),
    )


class IncidentTracker:
    """Incident state for every (doc type, rule) of a policy."""

    def __init__(
        self,
        policy: PolicyConfig,
        baselines: Mapping[str, Baseline] | None = None,
        *,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self.policy = policy
        self._baselines: dict[str, Baseline] = dict(baselines or {})
        self._rules = {r.name: r for r in policy.rules}
        self._static = {r.name: r.static.rule() for r in policy.rules}
        self._states: dict[tuple[str, str], _RunState] = {}
        # Types judged against a baseline this tracker moved to an accepted new level.
        self._adapted: set[str] = set()
        # The latest baseline given for each type (fitted, published): the one an adapted
        # type returns to when its shift is over.
        self._fitted: dict[str, Baseline] = dict(self._baselines)
        if state is not None:
            self._restore(state)

    # ----------------------------------------------------------------- inputs

    def set_baseline(self, baseline: Baseline) -> None:
        """A new baseline (e.g. read from the compacted topic) applies from the next window.
        It replaces one this tracker adapted only when fitted later than the adaptation."""
        held = self._baselines.get(baseline.doc_type)
        self._fitted[baseline.doc_type] = baseline
        if (
            baseline.doc_type in self._adapted
            and held is not None
            and baseline.fitted_at_ms <= held.fitted_at_ms
        ):
            return
        self._adapted.discard(baseline.doc_type)
        self._baselines[baseline.doc_type] = baseline

    def baseline(self, doc_type: str) -> Baseline | None:
        return self._baselines.get(doc_type)

    def observe(
        self, window: WindowAggregate, judgement: Judgement | None = None
    ) -> list[IncidentChange]:
        """Feed one window of one doc type. ``judgement`` is the Flink job's verdict for the
        baseline rules (see ``judgement_from_verdict``); without it the window is judged
        here with the tracker's baselines. Windows at or before one already seen for the
        same type are ignored."""
        changes: list[IncidentChange] = []
        for rule in self.policy.rules:
            st = self._state(window.doc_type, rule.name)
            if st.last_slot_ms is not None and window.window_start_ms <= st.last_slot_ms:
                continue
            st.size_ms = window.window_end_ms - window.window_start_ms
            if st.last_slot_ms is not None:
                changes += self._silence(window.doc_type, rule, st, window.window_start_ms)
            slot = self._judge(rule, st, window, judgement)
            changes += self._step(window.doc_type, rule, st, slot)
            st.last_slot_ms = window.window_start_ms
        return changes

    def observe_verdict(self, verdict: Verdict) -> list[IncidentChange]:
        return self.observe(verdict.window, judgement_from_verdict(verdict))

    def advance(self, doc_type: str, until_ms: int) -> list[IncidentChange]:
        """Account for slots before ``until_ms`` in which no window of ``doc_type`` arrived
        (call it from a timer, with the watermark): silent incidents resolve."""
        changes: list[IncidentChange] = []
        for rule in self.policy.rules:
            st = self._states.get((doc_type, rule.name))
            if st is None or st.last_slot_ms is None:
                continue
            # Only whole slots that have ended by until_ms.
            last_complete = until_ms - st.size_ms
            if last_complete <= st.last_slot_ms:
                continue
            aligned = last_complete - (last_complete - st.last_slot_ms) % st.size_ms
            changes += self._silence(doc_type, rule, st, aligned + st.size_ms)
            st.last_slot_ms = aligned
        return changes

    def replay(self, windows: Iterable[WindowAggregate]) -> list[IncidentChange]:
        """Feed windows in event-time order (sorted here by window start)."""
        ordered = sorted(windows, key=lambda w: (w.window_start_ms, w.doc_type))
        changes: list[IncidentChange] = []
        for w in ordered:
            changes += self.observe(w)
        return changes

    # ----------------------------------------------------------------- outputs

    def open_incidents(self) -> list[Incident]:
        return sorted(
            (st.open for st in self._states.values() if st.open is not None),
            key=lambda i: (i.opened_at_ms, i.doc_type, i.rule),
        )

    def export_state(self, doc_types: Collection[str] | None = None) -> dict[str, Any]:
        """Everything needed to continue after a restart, as JSON-compatible values;
        ``doc_types``: the states of these types only (what a batch changed: exporting
        every type's per batch grows with the types, 0.3 s a batch at 1,000)."""
        return {
            "policy_version": self.policy.version,
            "states": [
                {"doc_type": d, "rule": r, **_run_record(st)}
                for (d, r), st in self._states.items()
                if doc_types is None or d in doc_types
            ],
            "adapted": [
                self._baselines[d].model_dump(mode="json")
                for d in sorted(self._adapted)
                if d in self._baselines
            ],
        }

    # ----------------------------------------------------------------- internals

    def _restore(self, state: Mapping[str, Any]) -> None:
        if state.get("policy_version") != self.policy.version:
            return  # a new policy version starts afresh, as its ids do
        for raw in state.get("states", []):
            item = dict(raw)
            doc_type, rule = item.pop("doc_type"), item.pop("rule")
            if rule not in self._rules:
                continue
            for key in ("open", "resolved"):
                if item.get(key) is not None:
                    item[key] = Incident(**item[key])
            self._states[(doc_type, rule)] = _RunState(**item)
        for raw in state.get("adapted", []):
            adapted = Baseline.model_validate(raw)
            self._baselines[adapted.doc_type] = adapted
            self._adapted.add(adapted.doc_type)

    def _state(self, doc_type: str, rule: str) -> _RunState:
        key = (doc_type, rule)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _RunState()
        return st

    def _judge(
        self,
        rule: RuleConfig,
        st: _RunState,
        window: WindowAggregate,
        judgement: Judgement | None,
    ) -> _Slot:
        start, end = window.window_start_ms, window.window_end_ms
        baseline = None
        if rule.compare == "baseline":
            stored = self._baselines.get(window.doc_type)
            if stored is not None and stored.status == "fitted":
                baseline = baseline_at(stored, start)
            # The job judged against the published baseline; a type whose level this
            # tracker accepted as the new normal is judged here, with the same pure rule.
            if judgement is None or window.doc_type in self._adapted:
                judgement = judge_window(window, baseline, self._static[rule.name])
        else:
            judgement = judge_window(window, None, self._static[rule.name])

        conclusive = window.request_count >= judgement.min_requests
        level = judgement.breach_level
        mean = window.mean_drift
        # Separate trigger and recovery levels: while open, only a window well back
        # towards normal counts towards resolving.
        recovery = judgement.threshold
        if st.open is not None and baseline is not None:
            recovery = baseline.center + rule.recovery_share * (
                judgement.threshold - baseline.center
            )
        pooled_breach = pooled_clean = pooled = False
        if st.spike_held and (conclusive or level != "none") and mean <= judgement.threshold:
            # One of the type's ordinary spikes just ended: the evidence it pooled is given
            # back before this window is judged on what is left of it.
            st.cusum = min(st.cusum, st.spike_cusum)
        cusum_before = st.cusum
        stored_record = (baseline.spike_record or []) if baseline is not None else []
        if rule.pooling and baseline is not None and window.request_count > 0:
            pooled = True
            spiky = any(h > judgement.threshold - baseline.center for h in stored_record)
            st.cusum = self._pool(st.cusum, baseline, window, spiky=spiky)
            # Pooled evidence judges the windows too small to judge alone, and any window of
            # a type whose windows are independent draws. Where neighbouring windows are
            # correlated, a big window is judged by its own mean: its neighbours are no
            # independent evidence for it, and pooling them pages on every slow wander.
            independent = (baseline.autocorrelation or 0.0) <= INDEPENDENT_WINDOWS
            pooled_breach = (not conclusive or independent) and (
                st.cusum >= self.policy.pooling_threshold
            )
            # A small window that itself looks high is no evidence of recovery.
            pooled_clean = not pooled_breach and mean <= recovery

        stepped = False
        if rule.compare == "baseline" and baseline is not None and window.request_count > 0:
            stepped = self._step_up(rule, st, baseline, window, judgement, conclusive)
            if stepped and level == "none":
                margin = judgement.threshold - baseline.center
                assert st.step_from is not None
                judgement = replace(
                    judgement,
                    reasons=[
                        *judgement.reasons,
                        Reason(
                            code=STEP_UP,
                            message=f"mean drift {mean:.3f} stepped up "
                            f"{mean - st.step_from:.3f} from {st.step_from:.3f}, the level "
                            f"it held for {HOLD_WINDOWS}+ windows (margin {margin:.3f})",
                        ),
                    ],
                )

        state: SlotState
        evidence: EvidenceKind | None = None
        if level == "critical":
            state, evidence = "critical", "window"
        elif level == "warning" or stepped:
            state, evidence = "breach", "window"
        elif pooled_breach:
            state, evidence = "breach", "pooled"
        elif (conclusive or pooled) and mean > recovery:
            state = "elevated"
        elif (conclusive and level == "none") or pooled_clean:
            state = "clean"
        else:
            state = "inconclusive"
        if baseline is None:
            return _Slot(start, end, state, evidence, window, judgement, pooled_breach)
        return _Slot(
            start,
            end,
            state,
            evidence,
            window,
            judgement,
            pooled_breach,
            # Judged alone (enough requests, or significant at its own size): a spike.
            residual=mean - baseline.center if conclusive or level != "none" else None,
            margin=judgement.threshold - baseline.center,
            record=tuple(baseline.spike_record or ()),
            center=baseline.center,
            history_days=(baseline.history_end_ms - baseline.history_start_ms) / DAY_MS,
            cusum_before=cusum_before,
        )

    def _step_up(
        self,
        rule: RuleConfig,
        st: _RunState,
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
        base = st.step_from
        if same_mean(mean, st.held_mean):
            st.held_run += 1
        else:
            if st.held_mean is not None and st.held_run >= HOLD_WINDOWS:
                base = st.held_mean
            st.held_mean, st.held_run = mean, 1
        margin = judgement.threshold - baseline.center
        stepped = (
            base is not None
            and conclusive
            and margin > 0
            and mean - base > margin
            and mean > baseline.center + rule.recovery_share * margin
        )
        # A judged window that is no step ends it; a window too small to judge does not.
        st.step_from = base if stepped or not conclusive else None
        return stepped

    def _pool(
        self, cusum: float, baseline: Baseline, window: WindowAggregate, *, spiky: bool = False
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
        margin = baseline.threshold - baseline.center
        if margin <= 0:
            return 0.0
        se = max(spread_at(baseline, window.request_count), MIN_SPREAD)
        phi = baseline.autocorrelation or 0.0
        discount = math.sqrt((1.0 - phi) / (1.0 + phi))
        z = (window.mean_drift - baseline.center) / se
        reference = self.policy.pooling_shift * margin / se / 2.0
        if spiky:
            z = min(z, SPIKY_CLIP * reference)
        # One window adds at most half the limit: a single heavy-tailed spike is never
        # pooled evidence on its own (the window rule judges it).
        step = min(discount * z - reference, self.policy.pooling_threshold / 2.0)
        cap = POOLING_CAP * self.policy.pooling_threshold
        return min(cap, max(0.0, cusum + step))

    def _silence(
        self, doc_type: str, rule: RuleConfig, st: _RunState, next_start_ms: int
    ) -> list[IncidentChange]:
        """Empty slots between the last window and ``next_start_ms``: inconclusive. After
        enough of them nothing changes any more, so a long gap costs a bounded loop."""
        assert st.last_slot_ms is not None
        missing = (next_start_ms - st.last_slot_ms) // st.size_ms - 1
        changes: list[IncidentChange] = []
        for i in range(min(missing, rule.resolve_when_silent + 1)):
            start = st.last_slot_ms + (i + 1) * st.size_ms
            slot = _Slot(start, start + st.size_ms, "inconclusive", None, None, None)
            changes += self._step(doc_type, rule, st, slot)
        return changes

    def _step(
        self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot
    ) -> list[IncidentChange]:
        breach = slot.state in ("breach", "critical")
        mean = slot.window.mean_drift if slot.window is not None else None
        if breach:
            if st.run == 0:
                st.run_start_ms, st.run_peak, st.run_peak_ms = slot.start_ms, -1.0, slot.start_ms
            st.run += 1
            st.critical_run = st.critical_run + 1 if slot.state == "critical" else 0
            st.gap = 0
            if mean is not None and mean > st.run_peak:
                st.run_peak, st.run_peak_ms = mean, slot.start_ms
        elif slot.state == "inconclusive" and st.gap < rule.resolve_when_silent:
            # No traffic, or too few requests to judge: neither counts nor breaks a run, so
            # a sparse type, or rows sampled every few windows, can still show a sustained
            # breach; after resolve_when_silent such slots the run is forgotten.
            st.gap += 1
        else:
            # A judged window that is no breach ends a run.
            st.run = st.critical_run = st.gap = 0
        _track_spike(st, slot)

        if st.open is None:
            if slot.window is not None and doc_type in self._adapted:
                self._settle(doc_type, rule, st, slot)
            by_run = st.run >= rule.open_after or st.critical_run >= rule.open_after_critical
            # Pooled evidence over its limit opens at once, also on a window that breaches
            # alone but has no run yet: a lower sensitivity, whose smaller margin makes
            # such a window breach, must not wait where a higher one opens on the pool.
            if breach and not by_run and not slot.beyond_history and slot.pooled:
                slot = replace(slot, evidence="pooled")
            spike = _spike(st, slot) if breach and not slot.beyond_history else None
            # A record broken opens at once, by one window as by more (see _spike): a
            # spiky type's single windows above the threshold are ordinary, a record is not.
            record_broken = isinstance(spike, Reason) and spike.code == RECORD
            opens = breach and (by_run or slot.beyond_history or slot.pooled or record_broken)
            if not opens:
                spike = None
            if spike == USUAL_SPIKE:
                st.spike_held = True  # one of the type's ordinary spikes: not a page
                return []
            if isinstance(spike, Reason):
                slot = _with_reason(slot, spike)
            # An incident opens critical only on open_after_critical critical windows in a
            # row, the evidence escalating takes: a lower sensitivity, which may have an
            # incident open already, would not escalate on less. So one window beyond the
            # history, or a critical window ending a run of warnings, opens as a warning.
            confirmed = st.critical_run >= rule.open_after_critical
            return [self._open(doc_type, rule, st, slot, confirmed)] if opens else []
        return self._update(doc_type, rule, st, slot)

    def _open(
        self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot, confirmed: bool
    ) -> IncidentChange:
        assert slot.judgement is not None
        assert st.run_start_ms is not None
        severity: Severity = "critical" if slot.state == "critical" and confirmed else "warning"
        evidence: EvidenceKind = slot.evidence or "window"
        st.clean_run = st.silent = 0
        st.pages = [*(t for t in st.pages if slot.start_ms - t < DAY_MS), slot.start_ms]
        noisy = rule.storm_after > 0 and len(st.pages) >= rule.storm_after
        if noisy:
            broke = any(r.code == RECORD for r in slot.judgement.reasons)
            slot = _with_reason(
                slot,
                Reason(
                    code=NOISY,
                    message=f"noisy: {len(st.pages)} excursions in the last 24 h"
                    + ("" if broke else ", none above its record")
                    + f"; kept as one incident until {rule.storm_quiet} windows pass without "
                    "a breach. Consider pinning this type's threshold.",
                ),
            )
        assert slot.judgement is not None
        recent = (
            st.resolved is not None
            and st.resolved_slot_ms is not None
            and (slot.start_ms - st.resolved_slot_ms) // st.size_ms <= rule.reopen_within
        )
        if recent and st.resolved is not None:
            incident = replace(
                st.resolved,
                severity=_max_severity(st.resolved.severity, severity),
                resolved_at_ms=None,
                resolution=None,
                peak_mean_drift=max(st.resolved.peak_mean_drift, st.run_peak),
                peak_window_start_ms=(
                    st.run_peak_ms
                    if st.run_peak > st.resolved.peak_mean_drift
                    else st.resolved.peak_window_start_ms
                ),
                last_breach_ms=slot.start_ms,
                breach_windows=st.resolved.breach_windows + st.run,
                reopened=st.resolved.reopened + 1,
                noisy=noisy,
                excursions=0,
            )
            kind: ChangeKind = "reopened"
        else:
            incident = Incident(
                incident_id=incident_id(self.policy.version, rule.name, doc_type, slot.start_ms),
                doc_type=doc_type,
                rule=rule.name,
                severity=severity,
                evidence=evidence,
                first_breach_ms=st.run_start_ms,
                opened_at_ms=slot.end_ms,
                resolved_at_ms=None,
                resolution=None,
                peak_mean_drift=max(st.run_peak, 0.0),
                peak_window_start_ms=st.run_peak_ms,
                last_breach_ms=slot.start_ms,
                breach_windows=st.run,
                reopened=0,
                baseline_version=slot.judgement.baseline_version,
                threshold=slot.judgement.threshold,
                noisy=noisy,
            )
            kind = "opened"
        st.open, st.resolved, st.resolved_slot_ms = incident, None, None
        st.recent = []
        return IncidentChange(kind, incident, slot.start_ms, slot.window, slot.judgement)

    def _update(
        self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot
    ) -> list[IncidentChange]:
        incident = st.open
        assert incident is not None
        if slot.window is not None and rule.adapt_after > 0:
            st.recent = [*st.recent[-(rule.adapt_after - 1) :], slot.window.mean_drift]
            adapted = self._adapt(doc_type, rule, st, slot)
            if adapted is not None:
                return [adapted]
        if slot.state in ("breach", "critical"):
            st.clean_run = st.silent = 0
            mean = slot.window.mean_drift if slot.window is not None else incident.peak_mean_drift
            # Escalation takes the same evidence as opening critical: one heavy-tailed
            # window must not page again.
            critical = slot.state == "critical" and st.critical_run >= rule.open_after_critical
            spike = _spike(st, slot)
            if spike == USUAL_SPIKE:
                critical = False  # an ordinary spike escalates nothing
            elif incident.noisy and isinstance(spike, Reason) and spike.code == RECORD:
                critical = True  # a noisy type's excursions page again once they break records
                slot = _with_reason(slot, spike)
            severity = _max_severity(incident.severity, "critical" if critical else "warning")
            escalated = severity != incident.severity
            incident = replace(
                incident,
                severity=severity,
                last_breach_ms=slot.start_ms,
                breach_windows=incident.breach_windows + 1,
                excursions=incident.excursions + (incident.noisy and st.run == 1),
                peak_mean_drift=max(incident.peak_mean_drift, mean),
                peak_window_start_ms=(
                    slot.start_ms
                    if mean > incident.peak_mean_drift
                    else incident.peak_window_start_ms
                ),
            )
            st.open = incident
            if escalated:
                return [
                    IncidentChange("updated", incident, slot.start_ms, slot.window, slot.judgement)
                ]
            return []
        if slot.state == "elevated":
            st.clean_run = st.silent = 0
            return []
        if slot.state == "clean":
            st.silent = 0
            st.clean_run += 1
            if st.clean_run >= (rule.storm_quiet if incident.noisy else rule.resolve_after):
                return [self._resolve(st, slot, "clean")]
            return []
        st.silent += 1
        if st.silent >= rule.resolve_when_silent:
            return [self._resolve(st, slot, "silent")]
        return []

    def _adapt(
        self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot
    ) -> IncidentChange | None:
        """Accept a level shift that persisted as the new normal: the last ``adapt_after``
        windows of the open incident sit above the threshold (their median does) and level
        (their two halves' medians differ by under half the margin: a plateau, not a ramp).
        The type's baseline moves by the shift, margins kept; the incident resolves as
        'adapted'. Only windows of the incident count, so a shift is announced once."""
        stored = self._baselines.get(doc_type)
        if (
            rule.compare != "baseline"
            or stored is None
            or stored.status != "fitted"
            or len(st.recent) < rule.adapt_after
        ):
            return None
        now = baseline_at(stored, slot.start_ms)
        margin = now.threshold - now.center
        level = _median(st.recent)
        half = len(st.recent) // 2
        steady = abs(_median(st.recent[:half]) - _median(st.recent[half:])) <= margin / 2
        if margin <= 0 or level <= now.threshold or not steady:
            return None
        offset = level - now.center
        moved = _shifted(stored, offset, slot.end_ms)
        self._baselines[doc_type] = moved
        self._adapted.add(doc_type)
        for (d, _), other in self._states.items():
            if d == doc_type:
                other.cusum = 0.0  # evidence against the old level means nothing now
        assert st.open is not None
        st.open = replace(st.open, adapted_from=now.center, adapted_to=level)
        return self._resolve(st, slot, "adapted")

    def _settle(self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot) -> None:
        """An accepted shift that is over moves the baseline back, on the same evidence that
        moved it: the last ``adapt_after`` windows outside incidents sit level (as in
        ``_adapt``) and more than the margin below the moved center. Back within the fitted
        baseline's threshold, the fitted baseline applies again; otherwise the baseline
        moves down to their level. Without this a creep that was accepted and then went
        away would leave the type judged against a level it no longer has, blind to the
        next rise and diagnosed as a drop on every window."""
        assert slot.window is not None
        if rule.compare != "baseline" or rule.adapt_after <= 0:
            return
        st.recent = [*st.recent[-(rule.adapt_after - 1) :], slot.window.mean_drift]
        moved, fitted = self._baselines.get(doc_type), self._fitted.get(doc_type)
        if moved is None or fitted is None or len(st.recent) < rule.adapt_after:
            return
        now = baseline_at(moved, slot.start_ms)
        margin = now.threshold - now.center
        level = _median(st.recent)
        half = len(st.recent) // 2
        steady = abs(_median(st.recent[:half]) - _median(st.recent[half:])) <= margin / 2
        if margin <= 0 or not steady or level >= now.center - margin:
            return
        base = baseline_at(fitted, slot.start_ms)
        if level <= base.threshold:
            self._baselines[doc_type] = fitted
            self._adapted.discard(doc_type)
        else:
            self._baselines[doc_type] = _shifted(fitted, level - base.center, slot.end_ms)
        for (d, _), other in self._states.items():
            if d == doc_type:
                other.cusum = 0.0
                other.recent = []

    def _resolve(self, st: _RunState, slot: _Slot, how: Resolution) -> IncidentChange:
        assert st.open is not None
        incident = replace(st.open, resolved_at_ms=slot.end_ms, resolution=how)
        st.open, st.resolved, st.resolved_slot_ms = None, incident, slot.start_ms
        st.clean_run = st.silent = 0
        st.recent = []
        # The evidence pooled during the incident is spent: what is left of it after the
        # type came back must not re-open it on the first window above the center.
        st.cusum = 0.0
        return IncidentChange("resolved", incident, slot.start_ms, slot.window, slot.judgement)


def _max_severity(a: Severity, b: Severity) -> Severity:
    return "critical" if "critical" in (a, b) else "warning"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _shifted(baseline: Baseline, offset: float, at_ms: int) -> Baseline:
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


#: ``_spike``'s answer for an excursion within the type's ordinary spikes.
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
#: many margins (see ``_spike``).
UNSEEN_SPIKE: Final = 2.0
#: The reason code of a noisy type's one incident.
NOISY: Final = "noisy"


def _track_spike(st: _RunState, slot: _Slot) -> None:
    """Follow the run of windows above the threshold (``_judge`` gives back the evidence an
    ordinary spike pooled when it ends: it is normal for this type, and must not open an
    incident on the quiet windows after it)."""
    if slot.margin is None or (slot.residual is None and slot.state == "inconclusive"):
        return  # no window, or too small to judge and no pooled evidence: the run goes on
    if slot.residual is not None and slot.residual > slot.margin:
        if not st.spike:
            st.spike_cusum = slot.cusum_before
        st.spike.append(slot.residual)
        return
    st.spike, st.spike_held = [], False


def _spike(st: _RunState, slot: _Slot) -> str | Reason | None:
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


def _with_reason(slot: _Slot, reason: Reason) -> _Slot:
    if slot.judgement is None:
        return slot
    return replace(
        slot, judgement=replace(slot.judgement, reasons=[*slot.judgement.reasons, reason])
    )


# --------------------------------------------------------------------------- downstream


def drift_event(change: IncidentChange, emitted_at_ms: int) -> DriftEvent:
    """The machine-readable event for a change: ANCHOR_DRIFT_ALERT when an incident opens,
    re-opens or escalates, ANCHOR_DRIFT_RESOLVED when it resolves. The event id is
    deterministic and distinct for each change of an incident."""
    inc = change.incident
    resolved = change.kind == "resolved"
    event_type: DriftEventType = "ANCHOR_DRIFT_RESOLVED" if resolved else "ANCHOR_DRIFT_ALERT"
    digest = hashlib.sha256(
        f"{inc.incident_id}\x1f{change.kind}\x1f{inc.reopened}\x1f{inc.severity}".encode()
    )
    w, j = change.window, change.judgement
    reasons: list[Reason] = list(j.reasons) if j is not None else []
    if w is None:
        reasons.append(
            Reason(code="silent", message="no conclusive window: resolved for lack of evidence")
        )
    if resolved and inc.resolution == "adapted":
        reasons.append(Reason(code="baseline_adapted", message=adapted_message(inc)))
    evidence = DriftEvidence(
        window_start_ms=w.window_start_ms if w is not None else inc.peak_window_start_ms,
        mean_drift=w.mean_drift if w is not None else inc.peak_mean_drift,
        threshold=j.threshold if j is not None else inc.threshold,
        request_count=w.request_count if w is not None else 0,
        baseline_version=j.baseline_version if j is not None else inc.baseline_version,
        reasons=reasons,
    )
    return DriftEvent(
        event_id=f"e1-{digest.hexdigest()[:32]}",
        event_type=event_type,
        incident_id=inc.incident_id,
        doc_type=inc.doc_type,
        severity=inc.severity,
        opened_at_ms=inc.opened_at_ms,
        emitted_at_ms=emitted_at_ms,
        resolved_at_ms=inc.resolved_at_ms if resolved else None,
        evidence=evidence,
    )


def adapted_message(incident: Incident) -> str:
    """'medical_report moved from 0.52 to 0.61 and stayed: baseline adapted'."""
    return (
        f"{incident.doc_type} moved from {incident.adapted_from or 0.0:.2f} to "
        f"{incident.adapted_to or 0.0:.2f} and stayed: baseline adapted"
    )


def final_incidents(changes: Iterable[IncidentChange]) -> list[Incident]:
    """Every incident in its latest state (open ones with ``resolved_at_ms`` None)."""
    final: dict[str, Incident] = {}
    for c in changes:
        final[c.incident.incident_id] = c.incident
    return sorted(final.values(), key=lambda i: (i.opened_at_ms, i.doc_type, i.rule))
