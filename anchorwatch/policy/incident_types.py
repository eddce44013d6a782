"""The incident tracker's data: what it emits, what it keeps, and what downstream makes of it.

Held apart from the tracker (``incidents``) so that the judgements it consults (pooled
evidence and step-ups in ``evidence``, ordinary spikes and storms in ``spikes``) can read and
update the same state without importing the tracker: the policy reads top-down.

- ``Incident`` and ``IncidentChange``: what the tracker emits; ``incident_id`` names an
  incident so the alerting service can post and ticket idempotently;
- ``judgement_from_verdict``: the Flink job's verdict as the judgement the tracker takes;
- ``RunState``: everything the tracker keeps per (doc type, rule), plain values only so it
  serialises (``run_record``, and back: ``run_state``); ``Slot``: one window slot as the
  tracker classed it;
- downstream: ``drift_event`` (the machine-readable event of a change), ``adapted_message``
  and ``final_incidents`` (every incident in its latest state).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final, Literal

from anchorwatch.contracts import DriftEvent, DriftEvidence, Reason, WindowAggregate
from anchorwatch.contracts.models import DriftEventType, Severity, Verdict
from anchorwatch.policy.window import BEYOND_HISTORY, Judgement

ChangeKind = Literal["opened", "updated", "resolved", "reopened"]
EvidenceKind = Literal["window", "pooled"]
Resolution = Literal["clean", "silent", "adapted"]
SlotState = Literal["critical", "breach", "elevated", "clean", "inconclusive"]


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
class RunState:
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
    step_from: float | None = None  # the held level a step up is measured from (see step_up)
    recent: list[float] = field(default_factory=list)  # window means while open (adapting)
    spike: list[float] = field(default_factory=list)  # residuals of the run above threshold
    spike_cusum: float = 0.0  # the pooled evidence before that run began
    spike_held: bool = False  # the run was one of the type's ordinary spikes: not paged
    pages: list[int] = field(default_factory=list)  # slots that paged in the last day
    open: Incident | None = None
    resolved: Incident | None = None  # the latest resolved incident: may be re-opened
    resolved_slot_ms: int | None = None


_RUN_FIELDS: Final = tuple(f.name for f in fields(RunState))


def run_record(st: RunState) -> dict[str, Any]:
    """``asdict(st)`` without its deep copies, which made it most of a batch's time: every
    field is a plain value, a list of floats or an ``Incident`` of plain values."""
    record = {name: getattr(st, name) for name in _RUN_FIELDS}
    record["recent"] = list(st.recent)
    for key in ("open", "resolved"):
        if record[key] is not None:
            record[key] = dict(vars(record[key]))
    return record


def run_state(record: Mapping[str, Any]) -> RunState:
    """The ``RunState`` a ``run_record`` was made of (without its doc type and rule)."""
    item = dict(record)
    for key in ("open", "resolved"):
        if item.get(key) is not None:
            item[key] = Incident(**item[key])
    return RunState(**item)


@dataclass(frozen=True)
class Slot:
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

    def with_reason(self, reason: Reason) -> Slot:
        """This slot with ``reason`` added to its judgement's (none to add to: unchanged)."""
        if self.judgement is None:
            return self
        return replace(
            self, judgement=replace(self.judgement, reasons=[*self.judgement.reasons, reason])
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
        # Where, which model, at what cost: the window's breakdown (None from a job before
        # it, or without a window).
        kinds=w.kinds if w is not None else None,
        top_anchors=w.top_anchors if w is not None else None,
        models=w.models if w is not None else None,
        other_models=w.other_models if w is not None else None,
        latency_p50_ms=w.latency_p50_ms if w is not None else None,
        latency_p95_ms=w.latency_p95_ms if w is not None else None,
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
