"""The engine's work between batches (the service calls it every few seconds): incidents held
back that may now be posted (their silence ended, their group wait is over, what inhibited
them is gone) and acknowledgements from Slack. Each call commits what it decides in one
transaction with the outbox entries it causes (crash points ``release_before_commit``,
``group_before_commit``, ``ack_before_commit``).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from anchorwatch.alerting.engine_base import Batch
from anchorwatch.alerting.engine_shared import SharedGroups
from anchorwatch.alerting.grouping import (
    GROUP_RULE,
    GROUP_WAIT,
    clusters,
    group_view,
    inhibitor,
)
from anchorwatch.alerting.payload import notification_payload
from anchorwatch.alerting.silences import Muting
from anchorwatch.alerting.slack_actions import AckQueue
from anchorwatch.alerting.store import BatchWrite, IncidentRow
from anchorwatch.alerting.views import row_view

log = logging.getLogger(__name__)


class Releasing(SharedGroups):
    _acks: AckQueue

    def release_held(self, consumed_ms: int) -> int:
        """Posts the open incidents held back that nothing holds any more (a silence or
        maintenance window ended; a data-quality incident that inhibited them resolved) and
        decides the groups of those whose group wait is over (``grouping.py``), each kind in
        one transaction; how many incidents it decided. The service calls it between
        batches."""
        now_ms = self._now_ms()
        self._silences.expire_resolved(now_ms)  # "until resolved": their incidents resolved
        held = [row for row in self.open_incidents() if row.held_by is not None]
        if self._shared and (held or self._coordinator):
            return self._release_shared(consumed_ms, now_ms)
        if not held:  # the usual case: no need to read the silences every few seconds
            return 0
        muting = self.muting(now_ms)
        silenced = [r for r in held if r.held_by != GROUP_WAIT and inhibitor(r.held_by) is None]
        due = [r for r in silenced if muting.reason(r.doc_type, r.severity, r.incident_id) is None]
        if due:
            batch = Batch(BatchWrite(now_ms=now_ms), consumed_ms, muting)
            for row in due:
                self._release(batch, row)
            self._commit(batch, "release_before_commit")
        return len(due) + self._decide_groups(consumed_ms, now_ms, muting, held)

    def _release_shared(self, consumed_ms: int, now_ms: int) -> int:
        """``release_held`` of an instance sharing the grouping (``engine_shared.py``): the
        groups synced first, then everything decided in one transaction."""
        batch = Batch(BatchWrite(now_ms=now_ms), consumed_ms, self.muting(now_ms))
        self._sync_groups(batch)
        held = [r for r in self.open_incidents() if r.held_by is not None]
        silenced = [r for r in held if r.held_by != GROUP_WAIT and inhibitor(r.held_by) is None]
        muting = batch.muting
        due = [r for r in silenced if muting.reason(r.doc_type, r.severity, r.incident_id) is None]
        due += [r for r in held if (i := inhibitor(r.held_by)) and i not in self._open]
        for row in due:
            self._release(batch, row)
        decided = len(due) + self._decide_shared(batch)
        if batch.rows:
            self._commit(batch, "group_before_commit")
        return decided

    def _owns(self, incident_id: str, row: IncidentRow | None) -> bool:
        """Whether this instance decides for the incident (the work split): a group, the
        owner of partition 0; else the owner of its type."""
        if row is not None and row.rule != GROUP_RULE:
            return True  # held in memory: this instance's
        found = row or self._store.incident(incident_id)
        if found is not None and found.rule == GROUP_RULE:
            return self._coordinator
        return found is not None and found.doc_type in self._types

    def _decide_groups(
        self, consumed_ms: int, now_ms: int, muting: Muting, held: list[IncidentRow]
    ) -> int:
        """Inhibited incidents whose inhibitor is gone are posted; for each code with an
        incident whose group wait is over, every incident of that code still waiting is
        decided: those within ``within_s`` of each other, ``min_types`` or more (or any
        number, while the code's group is open) are its members; the rest post on their
        own once their own wait is over."""
        g = self._settings.grouping
        orphans = [r for r in held if (i := inhibitor(r.held_by)) and i not in self._open]
        waiting: dict[str, list[IncidentRow]] = {}
        for row in held:
            if row.held_by == GROUP_WAIT:
                waiting.setdefault(row.quality_code or "", []).append(row)
        ready = {
            code: rows
            for code, rows in waiting.items()
            if any((r.wait_until_ms or 0) <= now_ms for r in rows)
        }
        if not orphans and not ready:
            return 0
        batch = Batch(BatchWrite(now_ms=now_ms), consumed_ms, muting)
        decided = len(orphans)
        for row in orphans:
            self._release(batch, row)
        for code in sorted(ready):
            for cluster in clusters(ready[code], g.within_s * 1000):
                # Grouping turned off since they began to wait: each posts on its own.
                group = self._group_of_code(code) if g.enabled else None
                if group is not None:
                    self._join(batch, group, cluster)
                elif g.enabled and len(cluster) >= g.min_types:
                    self._open_group(batch, code, cluster)
                else:
                    cluster = [r for r in cluster if (r.wait_until_ms or 0) <= now_ms]
                    for row in cluster:
                        self._release(batch, row)
                decided += len(cluster)
        self._commit(batch, "group_before_commit")
        return decided

    def apply_acks(self, consumed_ms: int) -> int:
        """Applies the acknowledgements recorded from Slack (``slack_actions.py``), in one
        transaction with the notifications they cause; how many took effect. The service
        calls it between batches. One of an incident that has resolved meanwhile, or was
        acknowledged already, is marked so and does nothing."""
        pending = self._acks.pending()
        if not pending:
            return 0
        now_ms = self._now_ms()
        batch = Batch(BatchWrite(now_ms=now_ms), consumed_ms, self.muting(now_ms))
        for ack in pending:
            row = (
                batch.rows.get(ack.incident_id)
                or self._open.get(ack.incident_id)
                or self._groups.get(ack.incident_id)
            )
            if self._partitions is not None and not self._owns(ack.incident_id, row):
                continue  # another instance's incident (the work split): its owner applies it
            if row is not None and row.state != "open":
                row = None  # a group resolved within this transaction
            outcome = "resolved" if row is None else "already" if row.acked_by else "applied"
            batch.write.statements.append(ack.applied(outcome, now_ms))
            if row is None or row.acked_by:
                continue
            seq = row.next_seq
            if row.held_by is None and row.group_id is None:
                # People have heard of it: tell them who is on it.
                history = self._history(row.doc_type, now_ms)
                if row.rule == GROUP_RULE:
                    view, history = group_view(row, "opened", self._group_latest(row)), []
                else:
                    view = row_view(
                        row, history, self._settings.routing.dashboard_url(row.doc_type)
                    )
                view = replace(view, acked_by=ack.user_id, acked_name=ack.user_name)
                payload = notification_payload(view, history)
                seq = self._fanout.enqueue_change(
                    batch.write, consumed_ms, row.incident_id, seq, "acknowledged", payload
                )
            batch.rows[row.incident_id] = replace(
                row, next_seq=seq, acked_by=ack.user_id, acked_ms=ack.received_ms, updated_ms=now_ms
            )
            log.info(
                "incident acknowledged",
                extra={"incident_id": row.incident_id, "user_id": ack.user_id},
            )
        if not batch.rows and not batch.write.statements:
            return 0
        n = len(batch.rows)
        self._commit(batch, "ack_before_commit")
        return n
