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

An owner's pin (``pin``: in the policy's settings, else on the type's baseline record) wins:
a pinned threshold judges the type's baseline rules by fixed figures, like a static rule
(no pooled evidence, step-ups, spike record or adaptation); a pinned minimum volume leaves
smaller windows out of the pooled evidence too; a muted type is judged but never opens an
incident (under any rule; one already open runs its course).

This module holds the state machine; what it consults lives below it. Pooling (the evidence
of sparse types: a one-sided CUSUM over the type's standardised window means, discounted on
correlated windows and capped) and the step up from a held level are in ``evidence``; the
spike gating (a run within the type's ordinary spikes is not paged, one that breaks its spike
record opens at once, a type paging ``storm_after`` times a day keeps one noisy incident) in
``spikes``; the level test and moved baseline of ``_adapt`` and ``_settle`` in
``adaptation``; the records emitted and kept, and the drift events made of them, in
``incident_types``; the shortcut for the windows that change next to nothing in ``quiet``.

Incident ids hash (policy version, rule, doc type, start of the opening window): the alerting
service can post and ticket idempotently.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from operator import attrgetter
from typing import Any

from anchorwatch.contracts import Baseline, BaselinePin, Reason, WindowAggregate
from anchorwatch.contracts.models import Severity, Verdict
from anchorwatch.policy.adaptation import plateau, shifted
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.evidence import pool_window, step_up, step_up_reason
from anchorwatch.policy.incident_types import (
    ChangeKind,
    EvidenceKind,
    Incident,
    IncidentChange,
    Resolution,
    RunState,
    Slot,
    SlotState,
    incident_id,
    judgement_from_verdict,
    run_record,
    run_state,
)
from anchorwatch.policy.quiet import quiet_window
from anchorwatch.policy.spikes import (
    RECORD,
    USUAL_SPIKE,
    count_page,
    give_back,
    judge_spike,
    track_spike,
)
from anchorwatch.policy.window import DAY_MS, Judgement, baseline_at, judge_window


class IncidentTracker:
    """Incident state for every (doc type, rule) of a policy."""

    #: Windows that change next to nothing take a shortcut (``quiet``; off: the full path).
    quiet_windows = True

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
        self._states: dict[tuple[str, str], RunState] = {}
        # Types judged against a baseline this tracker moved to an accepted new level.
        self._adapted: set[str] = set()
        # The latest baseline given for each type (fitted, published): the one an adapted
        # type returns to when its shift is over.
        self._fitted: dict[str, Baseline] = dict(self._baselines)
        self._pins = policy.settings_pins()
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

    def pin(self, doc_type: str) -> BaselinePin | None:
        """The pin that holds for ``doc_type``: its settings pin, else its baseline's."""
        pin = self._pins.get(doc_type)
        if pin is not None:
            return pin
        held = self._baselines.get(doc_type)
        return held.pin if held is not None else None

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
            # The shortcut (``quiet``) for a type judged by its own baseline, unpinned.
            own = window.doc_type not in self._adapted and window.doc_type not in self._pins
            stored = self._baselines.get(window.doc_type) if own and self.quiet_windows else None
            if quiet_window(self.policy, rule, st, stored, window, judgement):
                st.last_slot_ms = window.window_start_ms
                continue
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
        ordered = sorted(windows, key=attrgetter("window_start_ms", "doc_type"))
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
        ``doc_types``: only these types' states (what a batch changed), each looked up."""
        states = self._states
        chosen = states.items() if doc_types is None else [  # looked up, not a scan of all
            (k, st) for d in doc_types for r in self.policy.rules
            if (st := states.get(k := (d, r.name))) is not None
        ]  # fmt: skip
        return {
            "policy_version": self.policy.version,
            "states": [{"doc_type": d, "rule": r, **run_record(st)} for (d, r), st in chosen],
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
            self._states[(doc_type, rule)] = run_state(item)
        for raw in state.get("adapted", []):
            adapted = Baseline.model_validate(raw)
            self._baselines[adapted.doc_type] = adapted
            self._adapted.add(adapted.doc_type)

    def _state(self, doc_type: str, rule: str) -> RunState:
        key = (doc_type, rule)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = RunState()
        return st

    def _judge(
        self,
        rule: RuleConfig,
        st: RunState,
        window: WindowAggregate,
        judgement: Judgement | None,
    ) -> Slot:
        start, end = window.window_start_ms, window.window_end_ms
        baseline = None
        small = False  # below a pinned minimum volume: no evidence of any kind
        if rule.compare == "baseline":
            stored = self._baselines.get(window.doc_type)
            pin = self.pin(window.doc_type)
            fixed = pin is not None and pin.threshold is not None
            if stored is not None and stored.status == "fitted" and not fixed:
                baseline = baseline_at(stored, start)
            # The job judged against the published baseline; a type whose level this
            # tracker accepted as the new normal is judged here, with the same pure rule,
            # and so is a pinned one unless the job judged it by the same pin.
            if pin is not None and (fixed or pin.min_requests is not None):
                mine = judge_window(window, stored, self._static[rule.name], pin=pin)
                if judgement is None or _figures(judgement) != _figures(mine):
                    judgement = mine
                small = window.request_count < judgement.min_requests
            elif judgement is None or window.doc_type in self._adapted:
                # Unmoved: judge_window moves it (twice would double a weekday offset).
                judgement = judge_window(window, baseline and stored, self._static[rule.name])
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
        give_back(st, conclusive or level != "none", mean <= judgement.threshold)
        cusum_before = st.cusum
        if rule.pooling and baseline is not None and window.request_count > 0 and not small:
            pooled = True
            pooled_breach = pool_window(self.policy, st, baseline, window, judgement, conclusive)
            # A small window that itself looks high is no evidence of recovery.
            pooled_clean = not pooled_breach and mean <= recovery

        stepped = False
        if rule.compare == "baseline" and baseline is not None and window.request_count > 0:
            stepped = step_up(rule, st, baseline, window, judgement, conclusive)
            if stepped and level == "none":
                reason = step_up_reason(st, baseline, judgement, mean)
                judgement = replace(judgement, reasons=[*judgement.reasons, reason])

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
            return Slot(start, end, state, evidence, window, judgement, pooled_breach)
        return Slot(
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

    def _silence(
        self, doc_type: str, rule: RuleConfig, st: RunState, next_start_ms: int
    ) -> list[IncidentChange]:
        """Empty slots between the last window and ``next_start_ms``: inconclusive. After
        enough of them nothing changes any more, so a long gap costs a bounded loop."""
        assert st.last_slot_ms is not None
        missing = (next_start_ms - st.last_slot_ms) // st.size_ms - 1
        changes: list[IncidentChange] = []
        for i in range(min(missing, rule.resolve_when_silent + 1)):
            start = st.last_slot_ms + (i + 1) * st.size_ms
            slot = Slot(start, start + st.size_ms, "inconclusive", None, None, None)
            changes += self._step(doc_type, rule, st, slot)
        return changes

    def _step(
        self, doc_type: str, rule: RuleConfig, st: RunState, slot: Slot
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
        track_spike(st, slot)

        if st.open is None:
            if slot.window is not None and doc_type in self._adapted:
                self._settle(doc_type, rule, st, slot)
            by_run = st.run >= rule.open_after or st.critical_run >= rule.open_after_critical
            # Pooled evidence over its limit opens at once, also on a window that breaches
            # alone but has no run yet: a lower sensitivity, whose smaller margin makes
            # such a window breach, must not wait where a higher one opens on the pool.
            if breach and not by_run and not slot.beyond_history and slot.pooled:
                slot = replace(slot, evidence="pooled")
            spike = judge_spike(st, slot) if breach and not slot.beyond_history else None
            # A record broken opens at once, by one window as by more (see judge_spike): a
            # spiky type's single windows above the threshold are ordinary, a record is not.
            record_broken = isinstance(spike, Reason) and spike.code == RECORD
            opens = breach and (by_run or slot.beyond_history or slot.pooled or record_broken)
            if opens and self._muted(doc_type):
                return []  # pinned mute: judged, never opened
            if not opens:
                spike = None
            if spike == USUAL_SPIKE:
                st.spike_held = True  # one of the type's ordinary spikes: not a page
                return []
            if isinstance(spike, Reason):
                slot = slot.with_reason(spike)
            # An incident opens critical only on open_after_critical critical windows in a
            # row, the evidence escalating takes: a lower sensitivity, which may have an
            # incident open already, would not escalate on less. So one window beyond the
            # history, or a critical window ending a run of warnings, opens as a warning.
            confirmed = st.critical_run >= rule.open_after_critical
            return [self._open(doc_type, rule, st, slot, confirmed)] if opens else []
        return self._update(doc_type, rule, st, slot)

    def _open(
        self, doc_type: str, rule: RuleConfig, st: RunState, slot: Slot, confirmed: bool
    ) -> IncidentChange:
        assert slot.judgement is not None
        assert st.run_start_ms is not None
        severity: Severity = "critical" if slot.state == "critical" and confirmed else "warning"
        evidence: EvidenceKind = slot.evidence or "window"
        st.clean_run = st.silent = 0
        noisy, slot = count_page(rule, st, slot)
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
        self, doc_type: str, rule: RuleConfig, st: RunState, slot: Slot
    ) -> list[IncidentChange]:
        incident = st.open
        assert incident is not None
        if slot.window is not None and rule.adapt_after > 0:
            st.recent = [*st.recent, slot.window.mean_drift][-rule.adapt_after :]
            adapted = self._adapt(doc_type, rule, st, slot)
            if adapted is not None:
                return [adapted]
        if slot.state in ("breach", "critical"):
            st.clean_run = st.silent = 0
            mean = slot.window.mean_drift if slot.window is not None else incident.peak_mean_drift
            # Escalation takes the same evidence as opening critical: one heavy-tailed
            # window must not page again.
            critical = slot.state == "critical" and st.critical_run >= rule.open_after_critical
            spike = judge_spike(st, slot)
            if spike == USUAL_SPIKE:
                critical = False  # an ordinary spike escalates nothing
            elif incident.noisy and isinstance(spike, Reason) and spike.code == RECORD:
                critical = True  # a noisy type's excursions page again once they break records
                slot = slot.with_reason(spike)
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
        self, doc_type: str, rule: RuleConfig, st: RunState, slot: Slot
    ) -> IncidentChange | None:
        """Accept a level shift that persisted as the new normal: the last ``adapt_after``
        windows of the open incident sit above the threshold (their median does) and level
        (their two halves' medians differ by under half the margin: a plateau, not a ramp).
        The type's baseline moves by the shift, margins kept; the incident resolves as
        'adapted'. Only windows of the incident count, so a shift is announced once."""
        stored = self._baselines.get(doc_type)
        pin = self.pin(doc_type)
        if (
            rule.compare != "baseline"
            or stored is None
            or stored.status != "fitted"
            or len(st.recent) < rule.adapt_after
            or (pin is not None and pin.threshold is not None)  # an owner's fixed threshold
        ):
            return None
        now = baseline_at(stored, slot.start_ms)
        level = plateau(st.recent, now)
        if level is None or level <= now.threshold:
            return None
        offset = level - now.center
        moved = shifted(stored, offset, slot.end_ms)
        self._baselines[doc_type] = moved
        self._adapted.add(doc_type)
        for (d, _), other in self._states.items():
            if d == doc_type:
                other.cusum = 0.0  # evidence against the old level means nothing now
        assert st.open is not None
        st.open = replace(st.open, adapted_from=now.center, adapted_to=level)
        return self._resolve(st, slot, "adapted")

    def _settle(self, doc_type: str, rule: RuleConfig, st: RunState, slot: Slot) -> None:
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
        st.recent = [*st.recent, slot.window.mean_drift][-rule.adapt_after :]
        moved, fitted = self._baselines.get(doc_type), self._fitted.get(doc_type)
        if moved is None or fitted is None or len(st.recent) < rule.adapt_after:
            return
        now = baseline_at(moved, slot.start_ms)
        level = plateau(st.recent, now)
        if level is None or level >= now.center - (now.threshold - now.center):
            return
        base = baseline_at(fitted, slot.start_ms)
        if level <= base.threshold:
            self._baselines[doc_type] = fitted
            self._adapted.discard(doc_type)
        else:
            self._baselines[doc_type] = shifted(fitted, level - base.center, slot.end_ms)
        for (d, _), other in self._states.items():
            if d == doc_type:
                other.cusum = 0.0
                other.recent = []

    def _resolve(self, st: RunState, slot: Slot, how: Resolution) -> IncidentChange:
        assert st.open is not None
        incident = replace(st.open, resolved_at_ms=slot.end_ms, resolution=how)
        st.open, st.resolved, st.resolved_slot_ms = None, incident, slot.start_ms
        st.clean_run = st.silent = 0
        st.recent = []
        # The evidence pooled during the incident is spent: what is left of it after the
        # type came back must not re-open it on the first window above the center.
        st.cusum = 0.0
        return IncidentChange("resolved", incident, slot.start_ms, slot.window, slot.judgement)

    def _muted(self, doc_type: str) -> bool:
        pin = self.pin(doc_type)
        return pin is not None and pin.mute


def _figures(j: Judgement) -> tuple[float, float, int, str]:
    return j.threshold, j.critical_threshold, j.min_requests, j.breach_level


def _max_severity(a: Severity, b: Severity) -> Severity:
    return "critical" if "critical" in (a, b) else "warning"
