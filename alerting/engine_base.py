"""What the engine's parts share (``engine.py`` decides batches, ``engine_release.py`` works
between them): the records of a batch, the open incidents and groups it keeps in memory, and
the posts both make: a held incident posted at last, a group incident's change
(``grouping.py``), the release of incidents a data-quality incident inhibited.

Everything here writes into a ``Batch``; the caller commits it in one transaction with the
rows it changed, so each post is decided and queued exactly once.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from anchorwatch.alerting.crash import CrashHook
from anchorwatch.alerting.fanout import Fanout
from anchorwatch.alerting.grouping import (
    FOLLOWED_ELSEWHERE,
    INHIBITED_BY,
    group_view,
    hold_kind,
    new_group,
    with_member,
)
from anchorwatch.alerting.payload import notification_payload
from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import Muting
from anchorwatch.alerting.store import BatchWrite, IncidentRow, Store
from anchorwatch.alerting.views import STATES, row_view
from anchorwatch.contracts import Reason

log = logging.getLogger(__name__)

#: Why a held post goes out now, by what held it (``grouping.hold_kind``).
_RELEASED = {
    "silence": "held back while muted; posted now that it is not",
    "group-wait": "waited for other doc types with the same diagnosis; posted on its own",
    "inhibited": "held back while a data-quality incident of this doc type was open; "
    "posted now that it resolved",
}


@dataclass(frozen=True)
class RawMessage:
    """One record of the verdicts topic, as the consumer hands it over."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    #: The record's Kafka timestamp (ms; the job's producer sets it when it writes the
    #: verdict), None when the broker gives none.
    timestamp_ms: int | None = None


@dataclass
class TypeState:
    last_window_start_ms: int
    history: deque[WindowPoint]
    partition: int  # of the verdicts topic: a doc type is the key, so it stays on one


@dataclass
class Batch:
    write: BatchWrite
    consumed_ms: int
    muting: Muting  # the silences and maintenance windows in force as it is decided
    touched: set[str] = field(default_factory=set)
    rows: dict[str, IncidentRow] = field(default_factory=dict)  # incident rows to write


class EngineBase:
    """The engine's memory and shared posts; see ``Engine``."""

    _settings: AlertingSettings
    _store: Store
    _metrics: ServiceMetrics
    _fanout: Fanout
    _silences: SilenceBook
    _clock: Callable[[], float]
    _crash: CrashHook
    _types: dict[str, TypeState]
    _open: dict[str, IncidentRow]
    _open_by_type: dict[str, set[str]]
    _groups: dict[str, IncidentRow]  # open group incidents (``grouping.py``) by id
    _partitions: frozenset[int] | None  # owned, with the work split; None: all

    def _fence_groups(self, write: BatchWrite) -> None:
        """Grouping shared by instances: the write's epoch check (``engine_shared.py``)."""

    def _groups_committed(self, write: BatchWrite) -> None:
        """Grouping shared by instances: the epoch it moved to (``engine_shared.py``)."""

    def _partition_of(self, doc_type: str) -> int:
        """The verdict partition of a type's decisions (0: a row of no doc type)."""
        known = self._types.get(doc_type)
        return known.partition if known is not None else 0

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _set_open(self, row: IncidentRow) -> None:
        self._open[row.incident_id] = row
        self._open_by_type.setdefault(row.doc_type, set()).add(row.incident_id)

    def _set_closed(self, row: IncidentRow) -> None:
        self._open.pop(row.incident_id, None)
        ids = self._open_by_type.get(row.doc_type)
        if ids is not None:
            ids.discard(row.incident_id)
            if not ids:
                del self._open_by_type[row.doc_type]

    def _keep(self, row: IncidentRow) -> None:
        """Remember a row once written: an incident or a group (or the watchdog's notice,
        kept with the groups: not an open incident of a doc type), open or not."""
        if row.rule in FOLLOWED_ELSEWHERE:
            if row.state == "open":
                self._groups[row.incident_id] = row
            else:
                self._groups.pop(row.incident_id, None)
        elif row.state == "open":
            self._set_open(row)
        else:
            self._set_closed(row)

    def _history(self, doc_type: str, until_ms: int) -> list[WindowPoint]:
        known = self._types.get(doc_type)
        return [p for p in known.history if p.window_start_ms <= until_ms] if known else []

    def _latest(self, doc_type: str) -> WindowPoint | None:
        known = self._types.get(doc_type)
        return known.history[-1] if known and known.history else None

    def muting(self, now_ms: int) -> Muting:
        """The silences and maintenance windows in force at ``now_ms``."""
        windows = self._settings.alerting.maintenance_windows
        return Muting.at(self._silences.active(now_ms), windows, now_ms)

    def _publish_open(self) -> None:
        self._metrics.open_incidents(Counter(r.severity for r in self._open.values()))
        self._metrics.incidents_silenced.set(
            sum(1 for r in self._open.values() if r.held_by is not None)
        )

    def open_incidents(self) -> list[IncidentRow]:
        return sorted(self._open.values(), key=lambda r: (r.opened_at_ms, r.doc_type))

    def _commit(self, batch: Batch, point: str) -> None:
        """A between-batches transaction: its rows, its outbox entries, then memory."""
        batch.write.incidents = list(batch.rows.values())
        batch.write.partitions = {self._partition_of(r.doc_type) for r in batch.write.incidents}
        self._fence_groups(batch.write)
        self._crash(point, "")
        self._store.commit_batch(
            batch.write, keep_verdict_ids=self._settings.alerting.recent_verdict_ids
        )
        self._groups_committed(batch.write)
        for row in batch.rows.values():
            self._keep(row)
        self._publish_open()

    # ----------------------------------------------------------------- held posts

    def _post_held(
        self,
        batch: Batch,
        view: IncidentView,
        history: list[WindowPoint],
        kind: str,
        seq: int,
        held_by: str | None = None,
    ) -> int:
        """The post held back (while muted, inhibited or waiting for a group; ``held_by``),
        to the integrations that post for people, as the incident stands now; the next seq."""
        why = _RELEASED[hold_kind(held_by) if held_by else "silence"]
        note = Reason(code="held", message=why)
        view = replace(view, state=STATES[kind], reasons=[*view.reasons, note])
        payload = notification_payload(view, history, force_comment=kind == "reopened")
        log.info(
            "held incident posted",
            extra={"incident_id": view.incident_id, "doc_type": view.doc_type, "kind": kind},
        )
        return self._fanout.enqueue_change(
            batch.write, batch.consumed_ms, view.incident_id, seq, kind, payload
        )

    def _release(self, batch: Batch, row: IncidentRow) -> None:
        """An open held incident posted on its own now, unless a silence mutes it (then it
        is held by that instead)."""
        muted = batch.muting.reason(row.doc_type, row.severity, row.incident_id)
        if muted is not None:
            new_row = replace(row, held_by=muted, wait_until_ms=None)
        else:
            history = self._history(row.doc_type, batch.write.now_ms)
            view = row_view(row, history, self._settings.routing.dashboard_url(row.doc_type))
            seq = self._post_held(
                batch, view, history, row.held_kind or "opened", row.next_seq, row.held_by
            )
            new_row = replace(row, next_seq=seq, held_by=None, held_kind=None, wait_until_ms=None)
        batch.rows[row.incident_id] = replace(new_row, updated_ms=batch.write.now_ms)
        self._set_open(batch.rows[row.incident_id])

    def _release_inhibited(self, batch: Batch, inhibitor_id: str) -> None:
        """The open incidents ``inhibitor_id`` held back, now that it resolved."""
        held_by = INHIBITED_BY + inhibitor_id
        for row in [r for r in self.open_incidents() if r.held_by == held_by]:
            self._release(batch, row)

    def _inhibitor_for(self, doc_type: str, incident_id: str) -> str | None:
        """An open data-quality incident of this type (not this one) that is itself posted
        or on its way to be (not inhibited); the oldest."""
        for row in self.open_incidents():
            if (
                row.doc_type == doc_type
                and row.incident_id != incident_id
                and row.quality_code is not None
                and not (row.held_by or "").startswith(INHIBITED_BY)
            ):
                return row.incident_id
        return None

    # ----------------------------------------------------------------- groups

    def _group_of_code(self, code: str) -> IncidentRow | None:
        return next((g for g in self._groups.values() if g.quality_code == code), None)

    def _group_latest(self, group: IncidentRow) -> WindowPoint | None:
        """The latest window of any of its members (what its messages show)."""
        points = (self._latest(m["doc_type"]) for m in group.record["members"].values())
        return max((p for p in points if p), key=lambda p: p.window_start_ms, default=None)

    def _post_group(self, batch: Batch, group: IncidentRow, kind: str, note: str | None) -> None:
        """One change of a group to the integrations that post for people (a group has no
        drift event: its members have theirs)."""
        members = group.record["members"]
        view = group_view(group, kind, self._group_latest(group), note)
        payload = notification_payload(view, [], force_comment=kind != "opened")
        seq = self._fanout.enqueue_change(
            batch.write, batch.consumed_ms, group.incident_id, group.next_seq, kind, payload
        )
        group = replace(group, next_seq=seq, updated_ms=batch.write.now_ms)
        batch.rows[group.incident_id] = group
        self._keep(group)
        log.info(
            "group incident " + kind,
            extra={
                "incident_id": group.incident_id,
                "code": group.quality_code,
                "members": len(members),
            },
        )

    def _open_group(self, batch: Batch, code: str, members: Sequence[IncidentRow]) -> None:
        """A new group of ``members`` (waiting, ordered by opening window): one post."""
        now_ms = batch.write.now_ms
        group = new_group(code, members, now_ms)
        kind = "opened"
        earlier = batch.rows.get(group.incident_id) or self._store.incident(group.incident_id)
        if earlier is not None:
            # The same first window again (members re-opened): its thread and ticket go on.
            kind = "reopened"
            group = replace(group, next_seq=earlier.next_seq, acked_by=None)
        self._post_group(batch, group, kind, f"{len(members)} doc types: {code}")
        for row in members:
            self._make_member(batch, row, group.incident_id)

    def _join(self, batch: Batch, group: IncidentRow, rows: Sequence[IncidentRow]) -> None:
        """``rows`` join the open ``group``: one update of its thread naming them."""
        for row in rows:
            group = with_member(group, row, "open", batch.write.now_ms)
            self._make_member(batch, row, group.incident_id)
        names = ", ".join(r.doc_type[:40] for r in rows[:10])
        more = f" (+{len(rows) - 10} more)" if len(rows) > 10 else ""
        self._post_group(batch, group, "updated", f"joined: {names}{more}")

    def _make_member(self, batch: Batch, row: IncidentRow, gid: str) -> None:
        if self._partitions is not None and row.doc_type not in self._types:
            return  # another instance's (the work split): it makes it a member itself
        member = replace(
            row,
            group_id=gid,
            held_by=None,
            held_kind=None,
            wait_until_ms=None,
            updated_ms=batch.write.now_ms,
        )
        batch.rows[row.incident_id] = member
        self._keep(member)

    def _member_changed(
        self, batch: Batch, row: IncidentRow, kind: str, gid: str | None = None
    ) -> None:
        """A member's change, told through its group (``gid``, else the row's): recovered
        (the group resolves with its last member), re-opened, or escalated (when that raises
        the group's severity)."""
        group = self._groups.get(gid or row.group_id or "")
        if group is None:
            return
        state = "resolved" if kind == "resolved" else "open"
        changed = with_member(group, row, state, batch.write.now_ms)
        if changed.state == "resolved":
            self._post_group(batch, changed, "resolved", f"recovered: {row.doc_type[:40]}")
        elif kind == "resolved":
            self._post_group(batch, changed, "updated", f"recovered: {row.doc_type[:40]}")
        elif kind == "reopened" or changed.severity != group.severity:
            self._post_group(batch, changed, "updated", f"{kind}: {row.doc_type[:40]}")
        else:  # a member's own progress: kept in the group's record, not posted
            batch.rows[changed.incident_id] = changed
            self._keep(changed)
