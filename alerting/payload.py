"""What an outbox entry for Slack or Jira carries: the incident view and its window history,
fixed when the change was decided, so a resend (after a crash, or a retry) renders the same
message. The engine writes it; the integrations read it back as a ``Note``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from anchorwatch.alerting.breakdown_text import with_history
from anchorwatch.alerting.render import IncidentView, WindowPoint, pack_kind_means
from anchorwatch.alerting.store import OutboxEntry
from anchorwatch.contracts import Reason, WindowAggregate, validate
from anchorwatch.contracts.breakdown import KINDS

#: The view's fields of a group or the watchdog's notice: left out of a drift incident's
#: payload (which stays as it was; an entry written before they existed reads as drift).
KIND_FIELDS = ("kind", "code", "members", "signals")
#: The view's fields for the breakdown's comparison with the windows before the incident:
#: left out while None, so a payload without them stays as it was.
BEFORE_FIELDS = ("first_breach_ms", "kinds_before", "drift_before")


def view_to_json(view: IncidentView) -> dict[str, Any]:
    data = asdict(view)
    data["window"] = view.window.model_dump(mode="json", exclude_none=True)
    if view.window.models is not None:
        # A model None (requests naming none) is a value here, not an absent field.
        data["window"]["models"] = [m.model_dump(mode="json") for m in view.window.models]
    data["reasons"] = [r.model_dump(mode="json") for r in view.reasons]
    for name in BEFORE_FIELDS:
        if data[name] is None:
            del data[name]
    if view.kind == "drift":
        for name in KIND_FIELDS:
            del data[name]
    else:
        data["members"] = [list(m) for m in view.members]
        data["signals"] = list(view.signals)
    return data


def view_from_json(data: dict[str, Any]) -> IncidentView:
    values = dict(data)
    values["window"] = validate(WindowAggregate, values["window"])
    values["reasons"] = [validate(Reason, r) for r in values.get("reasons") or []]
    values["members"] = tuple((str(d), str(s)) for d, s in values.get("members") or ())
    values["signals"] = tuple(str(s) for s in values.get("signals") or ())
    return IncidentView(**values)


def history_to_json(points: Sequence[WindowPoint]) -> list[list[Any]]:
    """One row per point: ``[start, end, mean, threshold, requests]``, and when the window
    had a breakdown ``latency p50, p95`` (ms or null) and its means per anchor kind (in
    ``KINDS`` order, null for a kind it had none of; null without). Rows of an older
    service have five values and read as points without a breakdown."""
    rows: list[list[Any]] = []
    for p in points:
        row: list[Any] = [
            p.window_start_ms,
            p.window_end_ms,
            p.mean_drift,
            p.threshold,
            p.request_count,
        ]
        if p.has_breakdown:
            means = p.kind_means()
            kinds = [_rounded(means.get(k)) for k in KINDS] if means is not None else None
            row += [p.latency_p50_ms, p.latency_p95_ms, kinds]
        rows.append(row)
    return rows


def history_from_json(rows: Sequence[Sequence[Any]]) -> list[WindowPoint]:
    points = []
    for r in rows:
        point = WindowPoint(int(r[0]), int(r[1]), float(r[2]), float(r[3]), int(r[4]))
        if len(r) >= 8:
            kinds = r[7]
            means = (
                {k: float(v) for k, v in zip(KINDS, kinds, strict=False) if v is not None}
                if isinstance(kinds, list)
                else None
            )
            point = replace(
                point,
                latency_p50_ms=_ms(r[5]),
                latency_p95_ms=_ms(r[6]),
                kind_drift=pack_kind_means(means),
            )
        points.append(point)
    return points


def _rounded(value: float | None) -> float | None:
    # The packed float32 back in the digits it has (0.85, not 0.8500000238418579).
    return round(value, 6) if value is not None else None


def _ms(value: Any) -> int | None:
    return int(value) if value is not None else None


def notification_payload(
    view: IncidentView, history: Sequence[WindowPoint], *, force_comment: bool = False
) -> dict[str, Any]:
    """What a Slack or Jira entry renders from: the view with the figures before the
    incident its breakdown is compared with (``breakdown_text.with_history``).
    ``force_comment``: a Jira update that must comment whatever the comment interval (a
    severity change, a re-opening)."""
    return {
        "view": view_to_json(with_history(view, history)),
        "history": history_to_json(history),
        "force_comment": force_comment,
    }


@dataclass(frozen=True)
class Note:
    """An entry's payload read back."""

    view: IncidentView
    history: list[WindowPoint]
    force_comment: bool

    @classmethod
    def of(cls, entry: OutboxEntry) -> Note:
        p = entry.payload
        return cls(
            view_from_json(p["view"]),
            history_from_json(p.get("history") or []),
            bool(p.get("force_comment")),
        )
