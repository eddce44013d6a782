"""What an outbox entry for Slack or Jira carries: the incident view and its window history,
fixed when the change was decided, so a resend (after a crash, or a retry) renders the same
message. The engine writes it; the integrations read it back as a ``Note``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.store import OutboxEntry
from anchorwatch.contracts import Reason, WindowAggregate, validate

#: The view's fields of a group or the watchdog's notice: left out of a drift incident's
#: payload (which stays as it was; an entry written before they existed reads as drift).
KIND_FIELDS = ("kind", "code", "members", "signals")


def view_to_json(view: IncidentView) -> dict[str, Any]:
    data = asdict(view)
    data["window"] = view.window.model_dump(mode="json", exclude_none=True)
    data["reasons"] = [r.model_dump(mode="json") for r in view.reasons]
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


def history_to_json(points: Sequence[WindowPoint]) -> list[list[float]]:
    return [
        [p.window_start_ms, p.window_end_ms, p.mean_drift, p.threshold, p.request_count]
        for p in points
    ]


def history_from_json(rows: Sequence[Sequence[float]]) -> list[WindowPoint]:
    return [WindowPoint(int(r[0]), int(r[1]), float(r[2]), float(r[3]), int(r[4])) for r in rows]


def notification_payload(
    view: IncidentView, history: Sequence[WindowPoint], *, force_comment: bool = False
) -> dict[str, Any]:
    """What a Slack or Jira entry renders from. ``force_comment``: a Jira update that must
    comment whatever the comment interval (a severity change, a re-opening)."""
    return {
        "view": view_to_json(view),
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
