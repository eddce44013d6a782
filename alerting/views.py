"""What the renderers are shown of an incident (``IncidentView``): built from a change the
detector made, or from an open incident as the store holds it (a post held back while
muted goes out from there; an acknowledgement, of the watchdog's notice too, whose row
holds its latest view)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from anchorwatch.alerting.payload import view_from_json
from anchorwatch.alerting.render import IncidentState, IncidentView, WindowPoint
from anchorwatch.alerting.store import IncidentRow
from anchorwatch.contracts import Reason, WindowAggregate
from anchorwatch.policy.incident_types import IncidentChange

#: The state a notification of each kind of change shows.
STATES: Final[dict[str, IncidentState]] = {
    "opened": "open",
    "reopened": "open",
    "updated": "updated",
    "resolved": "resolved",
}


def change_view(
    change: IncidentChange, window_size_ms: int, dashboard_url: str | None
) -> IncidentView:
    inc, j = change.incident, change.judgement
    window = change.window
    reasons: list[Reason] = list(j.reasons) if j is not None else []
    if window is None:
        # Resolved for silence: the slot had no window at all.
        window = WindowAggregate(
            doc_type=inc.doc_type,
            window_start_ms=change.window_start_ms,
            window_end_ms=change.window_start_ms + window_size_ms,
            request_count=0,
            mean_drift=0.0,
        )
        reasons.append(
            Reason(code="silent", message="no conclusive window: resolved for lack of traffic")
        )
    return IncidentView(
        incident_id=inc.incident_id,
        doc_type=inc.doc_type,
        severity=inc.severity,
        state=STATES[change.kind],
        opened_at_ms=inc.opened_at_ms,
        resolved_at_ms=inc.resolved_at_ms,
        window=window,
        threshold=j.threshold if j is not None else inc.threshold,
        baseline_version=j.baseline_version if j is not None else inc.baseline_version,
        reasons=reasons,
        peak_mean_drift=inc.peak_mean_drift,
        dashboard_url=dashboard_url,
        adapted_from=inc.adapted_from if inc.resolution == "adapted" else None,
        adapted_to=inc.adapted_to if inc.resolution == "adapted" else None,
        first_breach_ms=inc.first_breach_ms,
    )


#: The row record's key for the reasons of a change held back from people (``row_view``).
HELD_REASONS = "held_reasons"
#: The row record's key of the watchdog notice's latest view (``watchdog_post.py``).
NOTICE_VIEW = "notice_view"


#: The row record's key of a held incident's latest breakdown (where, which model): the
#: window history keeps only its drift and latency, and a released post must say the rest.
HELD_BREAKDOWN = "held_breakdown"
_BREAKDOWN_FIELDS = frozenset({"kinds", "top_anchors", "models", "other_models"})


def held_breakdown(window: WindowAggregate) -> dict[str, Any]:
    """What a held incident's row keeps of its window's breakdown ({}: none)."""
    return window.model_dump(mode="json", include=set(_BREAKDOWN_FIELDS), exclude_none=True)


def held_reasons(row: IncidentRow | None, reasons: Sequence[Reason]) -> list[dict[str, str]]:
    """The reasons to keep on a held incident's row: those it was held with, and any new
    code a later change brought (the opening diagnosis is never dropped by an update)."""
    kept = list(row.record.get(HELD_REASONS, ())) if row is not None else []
    codes = {r["code"] for r in kept}
    return kept + [r.model_dump() for r in reasons if r.code not in codes]


def row_view(
    row: IncidentRow, history: list[WindowPoint], dashboard_url: str | None
) -> IncidentView:
    """An open incident as stored, with its type's latest window (the watchdog's notice: its
    latest view, as its row holds it)."""
    if NOTICE_VIEW in row.record:
        view = view_from_json(row.record[NOTICE_VIEW])
        return replace(view, state="open", resolved_at_ms=None, acked_by=row.acked_by)
    last = history[-1] if history else None
    window = WindowAggregate.model_validate(
        {
            "doc_type": row.doc_type,
            "window_start_ms": last.window_start_ms if last else row.opened_at_ms,
            "window_end_ms": last.window_end_ms if last else row.opened_at_ms,
            "request_count": last.request_count if last else 0,
            "mean_drift": last.mean_drift if last else 0.0,
            # The point keeps the window's latency; a held row keeps the rest of the
            # breakdown of the last window it was held with.
            "latency_p50_ms": last.latency_p50_ms if last else None,
            "latency_p95_ms": last.latency_p95_ms if last else None,
            **row.record.get(HELD_BREAKDOWN, {}),
        }
    )
    return IncidentView(
        incident_id=row.incident_id,
        doc_type=row.doc_type,
        severity=row.severity,  # type: ignore[arg-type]  # the store holds what was written
        state="open",
        opened_at_ms=row.opened_at_ms,
        resolved_at_ms=None,
        window=window,
        threshold=last.threshold if last else float(row.record["threshold"]),
        baseline_version=row.record.get("baseline_version"),
        peak_mean_drift=float(row.record["peak_mean_drift"]),
        reasons=[Reason.model_validate(r) for r in row.record.get(HELD_REASONS, ())],
        dashboard_url=dashboard_url,
        acked_by=row.acked_by,
        first_breach_ms=row.record.get("first_breach_ms"),
    )
