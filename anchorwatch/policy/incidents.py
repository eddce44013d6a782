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

An incident opens after ``open_after`` consecutive breaching slots (``open_after_critical``
critical ones), or at once when pooled evidence crosses its limit (the limit is already
evidence gathered over several windows). It resolves after ``resolve_after`` clean slots with
no breach between them (inconclusive slots neither count nor break that run: sparse types
resolve too), or after ``resolve_when_silent`` inconclusive slots in a row. Breaching again
within ``reopen_within`` slots of resolving re-opens the same incident instead of a new one:
a flapping type keeps one ticket. Severity only goes up while open (``updated``).

Pooling (the evidence of sparse types): a one-sided CUSUM over the type's standardised window
means. For a window of n requests with standard error se = ``spread_at(baseline, n)``,
z = (mean - center) / se, and the shift to detect d = pooling_shift x (threshold - center) / se,
the statistic S = max(0, S + d*z - d*d/2) is the log-likelihood ratio of "the type has risen
by that shift" against "it has not", summed over requests. It crosses
``pooling_threshold`` after a few requests of a real rise however they spread over windows,
and stays near 0 on clean traffic. S is capped so that it falls back quickly once the
evidence stops.

Incident ids hash (policy version, rule, doc type, start of the opening window): the alerting
service can post and ticket idempotently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

from anchorwatch.contracts import Baseline, DriftEvent, DriftEvidence, Reason, WindowAggregate
from anchorwatch.contracts.models import DriftEventType, Severity, Verdict
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.fitting import MIN_SPREAD, spread_at
from anchorwatch.policy.window import Judgement, baseline_at, judge_window

ChangeKind = Literal["opened", "updated", "resolved", "reopened"]
EvidenceKind = Literal["window", "pooled"]
Resolution = Literal["clean", "silent"]
SlotState = Literal["critical", "breach", "clean", "inconclusive"]

#: The CUSUM statistic is held below this multiple of its limit: a long incident must not
#: bank so much evidence that the type stays "breaching" for long after it recovered.
POOLING_CAP: Final = 1.5


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
    run_peak: float = 0.0
    run_peak_ms: int = 0
    clean_run: int = 0  # clean slots since the last breach, while open
    silent: int = 0  # consecutive inconclusive slots, while open
    cusum: float = 0.0
    open: Incident | None = None
    resolved: Incident | None = None  # the latest resolved incident: may be re-opened
    resolved_slot_ms: int | None = None


@dataclass(frozen=True)
class _Slot:
    start_ms: int
    end_ms: int
    state: SlotState
    evidence: EvidenceKind | None  # for breaches: window or pooled-only
    window: WindowAggregate | None
    judgement: Judgement | None


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
        if state is not None:
            self._restore(state)

    # ----------------------------------------------------------------- inputs

    def set_baseline(self, baseline: Baseline) -> None:
        """A new baseline (e.g. read from the compacted topic) applies from the next window."""
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

    def export_state(self) -> dict[str, Any]:
        """Everything needed to continue after a restart, as JSON-compatible values."""
        return {
            "policy_version": self.policy.version,
            "states": [
                {"doc_type": d, "rule": r, **asdict(st)} for (d, r), st in self._states.items()
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
            if judgement is None:
                judgement = judge_window(window, baseline, self._static[rule.name])
        else:
            judgement = judge_window(window, None, self._static[rule.name])

        conclusive = window.request_count >= judgement.min_requests
        level = judgement.breach_level
        pooled_breach = pooled_clean = False
        if rule.pooling and baseline is not None and window.request_count > 0:
            st.cusum = self._pool(st.cusum, baseline, window)
            pooled_breach = st.cusum >= self.policy.pooling_threshold
            # A small window that itself looks high is no evidence of recovery.
            pooled_clean = not pooled_breach and window.mean_drift <= judgement.threshold

        state: SlotState
        evidence: EvidenceKind | None = None
        if level == "critical":
            state, evidence = "critical", "window"
        elif level == "warning":
            state, evidence = "breach", "window"
        elif pooled_breach:
            state, evidence = "breach", "pooled"
        elif (conclusive and level == "none") or pooled_clean:
            state = "clean"
        else:
            state = "inconclusive"
        return _Slot(start, end, state, evidence, window, judgement)

    def _pool(self, cusum: float, baseline: Baseline, window: WindowAggregate) -> float:
        margin = baseline.threshold - baseline.center
        if margin <= 0:
            return 0.0
        se = max(spread_at(baseline, window.request_count), MIN_SPREAD)
        d = self.policy.pooling_shift * margin / se
        z = (window.mean_drift - baseline.center) / se
        cap = POOLING_CAP * self.policy.pooling_threshold
        return min(cap, max(0.0, cusum + d * z - d * d / 2))

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
            if mean is not None and mean > st.run_peak:
                st.run_peak, st.run_peak_ms = mean, slot.start_ms
        else:
            # Any slot that is not a breach ends a run: "consecutive" means in event time.
            st.run = st.critical_run = 0

        if st.open is None:
            opens = breach and (
                st.run >= rule.open_after
                or st.critical_run >= rule.open_after_critical
                or slot.evidence == "pooled"
            )
            return [self._open(doc_type, rule, st, slot)] if opens else []
        return self._update(rule, st, slot)

    def _open(self, doc_type: str, rule: RuleConfig, st: _RunState, slot: _Slot) -> IncidentChange:
        assert slot.judgement is not None
        assert st.run_start_ms is not None
        severity: Severity = "critical" if slot.state == "critical" else "warning"
        evidence: EvidenceKind = slot.evidence or "window"
        st.clean_run = st.silent = 0
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
            )
            kind = "opened"
        st.open, st.resolved, st.resolved_slot_ms = incident, None, None
        return IncidentChange(kind, incident, slot.start_ms, slot.window, slot.judgement)

    def _update(self, rule: RuleConfig, st: _RunState, slot: _Slot) -> list[IncidentChange]:
        incident = st.open
        assert incident is not None
        if slot.state in ("breach", "critical"):
            st.clean_run = st.silent = 0
            mean = slot.window.mean_drift if slot.window is not None else incident.peak_mean_drift
            severity = _max_severity(
                incident.severity, "critical" if slot.state == "critical" else "warning"
            )
            escalated = severity != incident.severity
            incident = replace(
                incident,
                severity=severity,
                last_breach_ms=slot.start_ms,
                breach_windows=incident.breach_windows + 1,
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
        if slot.state == "clean":
            st.silent = 0
            st.clean_run += 1
            if st.clean_run >= rule.resolve_after:
                return [self._resolve(st, slot, "clean")]
            return []
        st.silent += 1
        if st.silent >= rule.resolve_when_silent:
            return [self._resolve(st, slot, "silent")]
        return []

    def _resolve(self, st: _RunState, slot: _Slot, how: Resolution) -> IncidentChange:
        assert st.open is not None
        incident = replace(st.open, resolved_at_ms=slot.end_ms, resolution=how)
        st.open, st.resolved, st.resolved_slot_ms = None, incident, slot.start_ms
        st.clean_run = st.silent = 0
        # Evidence banked during the incident must not open the next one.
        st.cusum = 0.0
        return IncidentChange("resolved", incident, slot.start_ms, slot.window, slot.judgement)


def _max_severity(a: Severity, b: Severity) -> Severity:
    return "critical" if "critical" in (a, b) else "warning"


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


def final_incidents(changes: Iterable[IncidentChange]) -> list[Incident]:
    """Every incident in its latest state (open ones with ``resolved_at_ms`` None)."""
    final: dict[str, Incident] = {}
    for c in changes:
        final[c.incident.incident_id] = c.incident
    return sorted(final.values(), key=lambda i: (i.opened_at_ms, i.doc_type, i.rule))
