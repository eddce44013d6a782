"""Grouping when instances share the work (``alerting.work_split`` with ``grouping.enabled``):
the data-quality incidents of types several instances own, gathered into one group.

- Each instance decides its own types' incidents and writes only their rows. One opened
  with a data-quality code waits for its group (it never joins an open group at once: the
  group is not its to write). Once its wait is over, it is posted on its own if its cluster,
  gathered from every instance's waiting incidents in the state, is too small and no group
  of its code is open.
- The owner of verdict partition 0 (the coordinator) alone writes the group incidents, and
  their outbox entries are partition 0's, so it alone posts for them. It opens a group of a
  cluster large enough, adds waiting incidents of a code whose group is open, and follows the
  members' rows as their owners write them (recovered, re-opened, escalated), posting each
  change in the group's thread.
- An owner finds its waiting incidents that a group lists and makes them members, silently:
  the group's post named them.

Decisions read rows other instances write, so a write that changes a group, or what a
decision reads of a data-quality incident (its state, severity, hold or group), is checked
against the group epoch its decisions read (``group_epoch.py``). A write of a data-quality
incident's progress alone (its peak, its record) is not: nothing decides on it, and an
incident in breach writes it with every batch.
"""

from __future__ import annotations

import functools
from typing import Any

from anchorwatch.alerting.engine_base import Batch, EngineBase
from anchorwatch.alerting.group_epoch import GROUP_EPOCH, check_epoch, read_epoch
from anchorwatch.alerting.grouping import GROUP_RULE, GROUP_WAIT, clusters, member_entry
from anchorwatch.alerting.store import BatchWrite, IncidentRow

#: What decisions about groups read of a data-quality incident's row.
Decided = tuple[str, str, str | None, str | None]


def decided(row: IncidentRow) -> Decided:
    return (row.state, row.severity, row.held_by, row.group_id)


class SharedGroups(EngineBase):
    _group_epoch: int = 0
    #: This instance's open data-quality incidents as last written or restored (``decided``).
    _written: dict[str, Decided]

    @property
    def _shared(self) -> bool:
        """Grouping across instances that share the work."""
        return self._partitions is not None and self._settings.grouping.enabled

    @property
    def _coordinator(self) -> bool:
        """This instance decides and posts the groups: it owns verdict partition 0."""
        return self._partitions is not None and 0 in self._partitions

    def _mine(self, row: IncidentRow) -> bool:
        return row.doc_type in self._types

    # ----------------------------------------------------------------- the state's groups

    def _start_shared(self) -> None:
        """At the engine's start: the groups, and its restored incidents as written."""
        self._written = {r.incident_id: decided(r) for r in self._open.values() if r.quality_code}
        self._load_groups()

    def _load_groups(self) -> None:
        """The open groups as the state has them, and the epoch they were read at (read
        first: a write in between leaves the epoch behind, so a decision on them is
        refused rather than let through)."""
        self._group_epoch = read_epoch(self._store.meta_get(GROUP_EPOCH))
        rows = self._store.incidents_where("state = 'open' AND rule = ?", (GROUP_RULE,))
        kept = {i: r for i, r in self._groups.items() if r.rule != GROUP_RULE}
        self._groups = kept | {r.incident_id: r for r in rows}

    def _sync_groups(self, batch: Batch) -> None:
        """Before deciding: the groups again if another instance changed them since, and
        this instance's waiting incidents that a group lists made its members."""
        if read_epoch(self._store.meta_get(GROUP_EPOCH)) != self._group_epoch:
            self._load_groups()
        listed = {
            member: gid
            for gid, group in self._groups.items()
            if group.rule == GROUP_RULE
            for member in group.record["members"]
        }
        for row in list(self._open.values()):
            gid = listed.get(row.incident_id)
            if gid is not None and row.held_by == GROUP_WAIT:
                self._make_member(batch, row, gid)

    def _fence_groups(self, write: BatchWrite) -> None:
        """A write of a group, or of a data-quality incident's ``decided`` fields: refused
        unless the epoch is still the one its decisions read; it moves the epoch on."""
        if not self._shared or not any(
            r.rule == GROUP_RULE
            or (r.quality_code is not None and self._written.get(r.incident_id) != decided(r))
            for r in write.incidents
        ):
            return
        write.checks.append(functools.partial(check_epoch, expected=self._group_epoch))
        write.meta[GROUP_EPOCH] = str(self._group_epoch + 1)

    def _groups_committed(self, write: BatchWrite) -> None:
        if not self._shared:
            return
        for row in write.incidents:
            if row.quality_code is None or row.rule == GROUP_RULE:
                continue
            if row.state == "open":
                self._written[row.incident_id] = decided(row)
            else:
                self._written.pop(row.incident_id, None)
        if GROUP_EPOCH in write.meta:
            self._group_epoch = int(write.meta[GROUP_EPOCH])

    # ----------------------------------------------------------------- decisions

    def _decide_shared(self, batch: Batch) -> int:
        """The waiting incidents of every instance, by code and cluster: a cluster of a
        code whose group is open, or one large enough, is the coordinator's to decide (the
        others leave it); a smaller one's own incidents whose wait is over post on their
        own. Then the coordinator follows the members. How many it decided."""
        g = self._settings.grouping
        now_ms = batch.write.now_ms
        mine = [r for r in self._open.values() if r.held_by == GROUP_WAIT]
        if not mine and not self._coordinator:
            return 0
        # Theirs that a group lists already are its members (their owners have yet to see it).
        listed = {
            m for r in self._groups.values() if r.rule == GROUP_RULE for m in r.record["members"]
        }
        theirs = [
            r
            for r in self._store.incidents_where("state = 'open' AND held_by = ?", (GROUP_WAIT,))
            if not self._mine(r) and r.incident_id not in listed
        ]
        waiting: dict[str, list[IncidentRow]] = {}
        for row in mine + theirs:
            waiting.setdefault(row.quality_code or "", []).append(row)
        decided = 0
        for code in sorted(waiting):
            rows = waiting[code]
            if not any((r.wait_until_ms or 0) <= now_ms for r in rows):
                continue
            for cluster in clusters(rows, g.within_s * 1000):
                group = self._group_of_code(code)
                if group is not None or len(cluster) >= g.min_types:
                    if self._coordinator:
                        if group is not None:
                            self._join(batch, group, cluster)
                        else:
                            self._open_group(batch, code, cluster)
                        decided += len(cluster)
                    continue
                for row in cluster:
                    if self._mine(row) and (row.wait_until_ms or 0) <= now_ms:
                        self._release(batch, row)
                        decided += 1
        if self._coordinator:
            decided += self._follow_members(batch)
        return decided

    def _follow_members(self, batch: Batch) -> int:
        """Each open group against its members' rows as the state has them: a member that
        recovered, re-opened or changed severity is a change of the group (posted as
        ``_member_changed`` does); a peak that moved is kept in its record."""
        changes = 0
        for gid in [i for i, r in self._groups.items() if r.rule == GROUP_RULE]:
            members: dict[str, dict[str, Any]] = self._groups[gid].record["members"]
            marks = ",".join("?" * len(members))
            found = self._store.incidents_where(f"incident_id IN ({marks})", list(members))
            rows = {r.incident_id: batch.rows.get(r.incident_id, r) for r in found}
            for member_id, entry in sorted(members.items()):
                row = rows.get(member_id)
                if row is None:
                    continue  # forgotten (pruned): as it stood
                state = "resolved" if row.state == "resolved" else "open"
                if member_entry(row, state) == entry:
                    continue
                if state != entry["state"]:
                    kind = "resolved" if state == "resolved" else "reopened"
                else:
                    kind = "updated" if row.severity != entry["severity"] else "progress"
                self._member_changed(batch, row, kind, gid)
                changes += kind != "progress"
        return changes
