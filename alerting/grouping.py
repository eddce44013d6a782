"""Grouping and inhibition of data-quality incidents: pure decisions, no I/O.

A *data-quality incident* is one whose opening window carried a diagnosis of
``[grouping] codes`` (``anchorwatch.policy.window.diagnose``: zero_anchors,
snapshot_disabled, ...); its code is stored with it (``IncidentRow.quality_code``).

Grouping, as Alertmanager's ``group_wait``: such an incident is first held
(``held_by = "group-wait"``) for ``wait_s`` of wall time, so the types a gateway fault hits
in the same minute can gather. The engine decides between batches (``release_held``): when
``min_types`` incidents of one code wait whose opening windows lie within ``within_s`` of
the first, they become the members of ONE group incident (a row of its own, rule
``group``, id a hash of the code and the first member's opening window, so a restart that
decides again makes the same one); fewer are posted each on its own. An incident of a code
whose group is open joins it at once (no wait). Members are judged, stored, counted and
sent downstream as drift events as any incident; people hear of them only through the
group's thread and ticket: opened listing the types, updated as types join, escalate and
recover, resolved once every member has. Each decision is written in the same transaction
as the outbox entries it causes, so a crash never loses or doubles one.

Inhibition: an incident opened while another incident of the same doc type, a data-quality
one, is open is held (``held_by = "inhibited by <id>"``): it is the same cause seen by a
drift rule. It is posted once, as it stands, when the data-quality incident resolves and it
is still open; resolved before, people never hear of it.

A silence wins over both: a muted data-quality incident is held by its silence and posted
on its own when that ends. One resolved while still waiting for its group is posted on its
own (opened and resolved), as it would be without grouping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, Literal

from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.store import IncidentRow
from anchorwatch.alerting.views import STATES
from anchorwatch.contracts import Reason, WindowAggregate

#: ``held_by`` of an incident waiting for its group's decision.
GROUP_WAIT: Final = "group-wait"
#: ``held_by`` of an inhibited incident: this, then the id of the incident inhibiting it.
INHIBITED_BY: Final = "inhibited by "
#: The ``rule`` of a group incident's row (members keep their own rule).
GROUP_RULE: Final = "group"
#: The ``rule`` of the watchdog's notice's row (``watchdog_post.py``).
WATCHDOG_RULE: Final = "watchdog"
#: Rows no detector follows (a group, the watchdog's notice): the engine keeps the open ones
#: with the groups (an acknowledgement finds them there), not as open incidents of a type.
FOLLOWED_ELSEWHERE: Final = frozenset({GROUP_RULE, WATCHDOG_RULE})

HoldKind = Literal["silence", "group-wait", "inhibited"]


def quality_code(reasons: Iterable[Reason], codes: Sequence[str]) -> str | None:
    """The first of ``codes`` among the reasons (None: not a data-quality incident)."""
    found = {r.code for r in reasons}
    return next((c for c in codes if c in found), None)


def group_id(code: str, first_opened_at_ms: int) -> str:
    """Deterministic: the same members decided again (after a crash) make the same group."""
    digest = hashlib.sha256(f"group\x1f{code}\x1f{first_opened_at_ms}".encode())
    return f"g1-{digest.hexdigest()[:32]}"


def hold_kind(held_by: str) -> HoldKind:
    if held_by == GROUP_WAIT:
        return "group-wait"
    return "inhibited" if held_by.startswith(INHIBITED_BY) else "silence"


def inhibitor(held_by: str | None) -> str | None:
    """The incident id an inhibited incident waits for (None: not inhibited)."""
    if held_by is None or not held_by.startswith(INHIBITED_BY):
        return None
    return held_by[len(INHIBITED_BY) :]


def clusters(waiting: Sequence[IncidentRow], within_ms: int) -> list[list[IncidentRow]]:
    """The waiting incidents of one code, by opening window, cut where one opened more than
    ``within_ms`` after the first of its cluster."""
    out: list[list[IncidentRow]] = []
    for row in sorted(waiting, key=lambda r: (r.opened_at_ms, r.doc_type, r.incident_id)):
        if out and row.opened_at_ms - out[-1][0].opened_at_ms <= within_ms:
            out[-1].append(row)
        else:
            out.append([row])
    return out


# --------------------------------------------------------------------------- the group row


def member_entry(row: IncidentRow, state: str) -> dict[str, Any]:
    return {
        "doc_type": row.doc_type,
        "severity": row.severity,
        "state": state,
        "opened_at_ms": row.opened_at_ms,
        "peak_mean_drift": float(row.record.get("peak_mean_drift", 0.0)),
    }


def new_group(code: str, members: Sequence[IncidentRow], now_ms: int) -> IncidentRow:
    """The group incident of ``members`` (ordered by opening window), before its first post."""
    first = members[0]
    entries = {m.incident_id: member_entry(m, "open") for m in members}
    record = {"code": code, "members": entries}
    return IncidentRow(
        incident_id=group_id(code, first.opened_at_ms),
        doc_type=f"{code} group",
        rule=GROUP_RULE,
        state="open",
        severity=_severity(entries),
        opened_at_ms=first.opened_at_ms,
        resolved_at_ms=None,
        record=record,
        next_seq=1,
        last_update_window_ms=first.opened_at_ms,
        updated_ms=now_ms,
        quality_code=code,
    )


def with_member(group: IncidentRow, row: IncidentRow, state: str, now_ms: int) -> IncidentRow:
    """The group with ``row`` added or its entry changed (state, severity, peak)."""
    members = dict(group.record["members"])
    members[row.incident_id] = member_entry(row, state)
    record = {**group.record, "members": members}
    resolved = all(m["state"] == "resolved" for m in members.values())
    return replace(
        group,
        record=record,
        severity=_severity(members),
        state="resolved" if resolved else "open",
        resolved_at_ms=now_ms if resolved else None,
        updated_ms=now_ms,
    )


def _severity(members: Mapping[str, Mapping[str, Any]]) -> str:
    return "critical" if any(m["severity"] == "critical" for m in members.values()) else "warning"


def group_view(
    group: IncidentRow, kind: str, latest: WindowPoint | None, note: str | None = None
) -> IncidentView:
    """What people see of the group (kind ``group``): its code and its member types in the
    order they were hit, each open or recovered (the renderers list them, bounded); ``note``
    (what changed) as its reason; the latest member window (not shown: no drift figures)."""
    code = str(group.record["code"])
    members: dict[str, dict[str, Any]] = group.record["members"]
    entries = sorted(members.values(), key=lambda m: (m["opened_at_ms"], m["doc_type"]))
    label = f"{code}: {len(members)} doc types"
    reasons = [Reason(code="group_change", message=note)] if note else []
    start = latest.window_start_ms if latest else group.opened_at_ms
    window = WindowAggregate(
        doc_type=label,
        window_start_ms=start,
        window_end_ms=latest.window_end_ms if latest else start + 60_000,  # one window
        request_count=latest.request_count if latest else 0,
        mean_drift=latest.mean_drift if latest else 0.0,
    )
    return IncidentView(
        incident_id=group.incident_id,
        doc_type=label,
        severity=group.severity,  # type: ignore[arg-type]  # warning or critical, as written
        state=STATES[kind],
        opened_at_ms=group.opened_at_ms,
        resolved_at_ms=group.resolved_at_ms if kind == "resolved" else None,
        window=window,
        threshold=latest.threshold if latest else 0.0,
        baseline_version=None,
        reasons=reasons,
        peak_mean_drift=max((float(m["peak_mean_drift"]) for m in entries), default=0.0),
        acked_by=group.acked_by,
        kind="group",
        code=code,
        members=tuple(
            (str(m["doc_type"]), "recovered" if m["state"] == "resolved" else "open")
            for m in entries
        ),
    )
