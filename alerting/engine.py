"""The decisions: verdicts in, incident changes out, turned into outbox entries and
committed per batch. No Kafka, no HTTP: the consumers feed it, the drainers deliver what
it wrote.

For each batch the ``Engine`` feeds the verdicts to the detection policy
(``IncidentTracker``), turns the incident changes into outbox entries (one per integration
that acts on the change, see ``integrations/``) and commits, in ONE SQLite transaction, the
tracker's state, the next offset of each partition, each type's high-water mark and the
outbox (see ``store.py``). So a batch whose transaction did not commit is consumed and
decided again (the same way: the policy is deterministic); one that did is never decided
twice.

Replays are recognised per doc type: a verdict whose window is not newer than the last one
processed for its type is skipped (counted as ``replay`` when its id was seen, ``stale``
otherwise). While an incident stays in breach the engine posts progress updates at most
every ``update_interval_s`` of event time; a silent type's incidents resolve as its verdicts
partition moves on (see ``_advance``). The windows judged feed the refit history.

Data-quality incidents are grouped across doc types and hold back their types' drift pages
(``grouping.py``): decided per change here, and between batches in ``engine_release.py``
(held posts, group decisions, acknowledgements); what both share is in ``engine_base.py``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from anchorwatch.alerting.crash import CrashHook, no_crash
from anchorwatch.alerting.engine_base import Batch, RawMessage, TypeState
from anchorwatch.alerting.engine_release import Releasing
from anchorwatch.alerting.fanout import Fanout
from anchorwatch.alerting.grouping import (
    GROUP_RULE,
    GROUP_WAIT,
    INHIBITED_BY,
    WATCHDOG_RULE,
    hold_kind,
    inhibitor,
    quality_code,
)
from anchorwatch.alerting.integrations.registry import named
from anchorwatch.alerting.payload import history_from_json, history_to_json, notification_payload
from anchorwatch.alerting.refit_rows import refit_incident
from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import Hold
from anchorwatch.alerting.slack_actions import AckQueue
from anchorwatch.alerting.store import BatchWrite, DocTypeRow, IncidentRow, Store
from anchorwatch.alerting.views import (
    HELD_BREAKDOWN,
    HELD_REASONS,
    change_view,
    held_breakdown,
    held_reasons,
)
from anchorwatch.contracts import (
    Baseline,
    ContractError,
    Verdict,
    decode_verdict,
)
from anchorwatch.policy.incident_types import IncidentChange, drift_event
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.refit import RefitHistory
from anchorwatch.policy.static_rule import BreachLevels

log = logging.getLogger(__name__)

#: Windows of history kept per doc type: the chart's and the Jira description's.
MIN_HISTORY = 10

# The records of a batch live in engine_base.py; importers name RawMessage from here.
__all__ = ["MIN_HISTORY", "Engine", "RawMessage"]


#: Meta key prefix of a verdicts partition's event time (the latest window end seen on it).
WATERMARK = "watermark:"


def stored_watermarks(meta: dict[str, str], partitions: frozenset[int] | None) -> dict[int, int]:
    """Each partition's event time as stored: one key per partition, over the one JSON
    value of them all that earlier versions wrote."""
    marks = {int(p): int(ms) for p, ms in orjson.loads(meta.get("watermarks", "{}")).items()}
    for key, value in meta.items():
        if key.startswith(WATERMARK):
            marks[int(key[len(WATERMARK) :])] = int(value)
    return {p: ms for p, ms in marks.items() if partitions is None or p in partitions}


def _group_states(state: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The tracker's exported state split per doc type, so a batch stores only the types it
    touched (relies on ``export_state`` listing one entry per (doc type, rule))."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for entry in state.get("states", []):
        by_type.setdefault(entry["doc_type"], []).append(entry)
    return by_type


class Engine(Releasing):
    """Decides: verdicts -> incident changes -> outbox entries, committed per batch.

    Verdicts are handled one at a time, in order, and every decision depends only on the
    verdicts before it (not on where a batch ends), so a batch consumed again after a crash
    is decided the same way. Runs on one thread; what it holds in memory is also stored."""

    def __init__(
        self,
        settings: AlertingSettings,
        store: Store,
        metrics: ServiceMetrics,
        integrations: Sequence[str],
        *,
        clock: Callable[[], float] = time.time,
        crash: CrashHook = no_crash,
        refit: RefitHistory | None = None,
        partitions: frozenset[int] | None = None,
    ) -> None:
        """``partitions``: with the work split among instances, the verdict partitions this
        one owns: it restores and decides only their types (None: every type)."""
        self._settings = settings
        self._partitions = partitions
        self._store = store
        self.refit = refit  # the windows judged, for refits (None: no refits)
        self._metrics = metrics
        self._fanout = Fanout(settings, named(tuple(integrations)))
        self._silences = SilenceBook(store.location)
        self._acks = AckQueue(store.location)
        self._clock = clock
        self._crash = crash
        self._history_len = max(settings.slack.chart_windows, MIN_HISTORY)
        self._levels = BreachLevels(settings.policy)
        restored = store.restore(partitions)
        states = [e for rows in restored.tracker_states.values() for e in rows]
        self.tracker = IncidentTracker(
            settings.policy,
            state={"policy_version": restored.policy_version, "states": states},
        )
        self.offsets: dict[tuple[str, int], int] = dict(restored.offsets)
        self._types: dict[str, TypeState] = {}
        for known in restored.doc_types.values():
            points = history_from_json(known.history)
            self._types[known.doc_type] = TypeState(
                known.last_window_start_ms,
                deque(points, maxlen=self._history_len),
                known.partition,
            )
            if points:
                metrics.window(known.doc_type, points[-1].mean_drift, points[-1].threshold)
        # Event time per verdicts partition: the latest window end seen on it.
        self._watermarks = stored_watermarks(restored.meta, partitions)
        # When each partition last delivered a verdict (processing time; not stored: after
        # a restart every partition gets silence_lag_s to show it is alive).
        self._seen_at: dict[int, float] = {}
        self._started = clock()
        self._open: dict[str, IncidentRow] = {}
        self._open_by_type: dict[str, set[str]] = {}
        self._groups: dict[str, IncidentRow] = {}
        self._carry: list[IncidentRow] = []  # rows to write with the next batch
        tracked = {i.incident_id for i in self.tracker.open_incidents()}
        for row in restored.open_incidents:
            if row.rule == GROUP_RULE:
                self._groups[row.incident_id] = row
            elif row.rule == WATCHDOG_RULE:
                # The watchdog's notice: no detector's incident, and no abandoned one; its
                # poster follows it (and hands its rows to ``_keep``).
                continue
            elif row.incident_id in tracked:
                self._set_open(row)
            else:
                # A new policy version starts afresh (its incident ids differ): its detector
                # no longer follows these, so they are closed here without notifications.
                log.warning(
                    "incident abandoned: the policy version changed",
                    extra={"incident_id": row.incident_id, "doc_type": row.doc_type},
                )
                self._carry.append(replace(row, state="resolved", updated_ms=self._now_ms()))
        for group in list(self._groups.values()):
            if not any(m in self._open for m in group.record["members"]):
                # Its members were abandoned with them: so is it.
                self._carry.append(replace(group, state="resolved", updated_ms=self._now_ms()))
                del self._groups[group.incident_id]
        if self._shared:
            self._start_shared()  # every instance's groups (``engine_shared.py``)
        self._publish_open()

    # ----------------------------------------------------------------- inputs

    def set_baseline(self, baseline: Baseline) -> bool:
        held = self.tracker.baseline(baseline.doc_type)
        if held is not None and held.fitted_at_ms > baseline.fitted_at_ms:
            self._metrics.baselines.labels("stale").inc()
            return False
        self.tracker.set_baseline(baseline)
        self._metrics.baselines.labels("applied").inc()
        return True

    def process(
        self, messages: Sequence[RawMessage], consumed_ms: int
    ) -> dict[tuple[str, int], int]:
        """Decide one batch and commit it. Returns the next offsets it committed."""
        started = time.perf_counter()
        now_ms = self._now_ms()
        batch = Batch(BatchWrite(now_ms=now_ms), consumed_ms, self.muting(now_ms))
        if self._shared:
            self._sync_groups(batch)
        verdicts = self._decode(messages, batch.write)
        seen = self._store.seen_verdicts(v.verdict_id for _, v in verdicts)
        for partition, verdict in verdicts:
            self._handle(partition, verdict, seen, batch)
        state = self.tracker.export_state(batch.touched)
        by_type = _group_states(state)
        self._refresh(batch, by_type)
        w = batch.write
        w.policy_version = str(state.get("policy_version"))
        w.tracker_states = {d: by_type.get(d, []) for d in batch.touched}
        w.doc_types = [
            DocTypeRow(
                d,
                self._types[d].last_window_start_ms,
                history_to_json(self._types[d].history),
                self._types[d].partition,
            )
            for d in batch.touched
            if d in self._types
        ]
        w.incidents = self._carry + list(batch.rows.values())
        w.partitions = {p for _, p in w.offsets} | {
            self._partition_of(r.doc_type) for r in w.incidents
        }
        for p in w.partitions:
            # One key per partition: instances that split the work write their own.
            if p in self._watermarks:
                w.meta[f"{WATERMARK}{p}"] = str(self._watermarks[p])
        if self.refit is not None:
            # Before the batch's offsets: a window the store has moved past is on disk too.
            self.refit.flush()
        self._fence_groups(w)
        self._crash("batch_before_commit", "")
        self._store.commit_batch(
            w,
            keep_verdict_ids=self._settings.alerting.recent_verdict_ids,
            before_commit=lambda: self._crash("batch_in_commit", ""),
        )
        self._groups_committed(w)
        self._carry = []
        self.offsets.update(w.offsets)
        self._publish_open()
        self._metrics.batch.observe(time.perf_counter() - started)
        # Wall time, as the records' timestamps are (the engine's clock may be a test's).
        decided_ms = time.time() * 1000
        for m in messages:
            if m.timestamp_ms is not None:
                self._metrics.decision.observe(max(0.0, decided_ms - m.timestamp_ms) / 1000)
        return w.offsets

    def _decode(
        self, messages: Sequence[RawMessage], write: BatchWrite
    ) -> list[tuple[int, Verdict]]:
        out = []
        for m in messages:
            write.offsets[(m.topic, m.partition)] = m.offset + 1
            try:
                out.append((m.partition, decode_verdict(m.value or b"")))
            except ContractError as exc:
                self._metrics.verdict_outcome["invalid"].inc()
                log.error(
                    "invalid verdict skipped",
                    extra={
                        "topic": m.topic,
                        "partition": m.partition,
                        "offset": m.offset,
                        "error": str(exc)[:1000],
                    },
                )
        return out

    @property
    def watermark_ms(self) -> int:
        """The latest window end seen on any partition."""
        return max(self._watermarks.values(), default=0)

    def last_window_start_ms(self, doc_type: str) -> int | None:
        """The start of the last window processed for ``doc_type`` (None: none yet); read by
        the watchdog (``watchdog.py``)."""
        known = self._types.get(doc_type)
        return known.last_window_start_ms if known is not None else None

    def _handle(self, partition: int, verdict: Verdict, seen: set[str], batch: Batch) -> None:
        w = verdict.window
        known = self._types.get(w.doc_type)
        if verdict.verdict_id in seen or (
            known is not None and w.window_start_ms <= known.last_window_start_ms
        ):
            replay = verdict.verdict_id in seen or verdict.verdict_id in batch.write.verdict_ids
            self._metrics.verdict_outcome["replay" if replay else "stale"].inc()
            return
        try:
            changes = self.tracker.observe_verdict(verdict)
        except Exception:  # a verdict the policy cannot take must not stop the service
            log.exception("verdict not processed", extra={"verdict_id": verdict.verdict_id})
            self._metrics.verdict_outcome["invalid"].inc()
            return
        if known is None:
            known = TypeState(0, deque(maxlen=self._history_len), partition)
            self._types[w.doc_type] = known
        known.last_window_start_ms = w.window_start_ms
        known.partition = partition
        known.history.append(WindowPoint.from_verdict(verdict))
        if self.refit is not None:
            self.refit.add(w)
        batch.touched.add(w.doc_type)
        batch.write.verdict_ids.append(verdict.verdict_id)
        self._metrics.verdict_outcome["processed"].inc()
        self._metrics.window(w.doc_type, w.mean_drift, verdict.threshold, figures=w)
        changed = set()
        for change in changes:
            self._apply(change, batch)
            changed.add(change.incident.incident_id)
        self._progress(verdict, changed, batch)
        topic_before = self.watermark_ms
        self._seen_at[partition] = self._clock()
        if w.window_end_ms > self._watermarks.get(partition, 0):
            # Event time moved on: types that stayed silent may resolve.
            self._watermarks[partition] = w.window_end_ms
            self._advance(batch, None if w.window_end_ms > topic_before else partition)

    def _advance(self, batch: Batch, partition: int | None) -> None:
        """Silent slots of the open incidents' types (of ``partition``, or of all).

        A type is silent for a window once its own partition is ``silence_lag_s`` past it:
        a type is the key, so its verdicts share a partition with others in event-time
        order (up to the drift job's subtasks racing, which the lag absorbs); this depends
        only on that partition's order, so it is decided the same way after a replay. A
        partition that has delivered nothing for ``silence_lag_s`` of processing time is
        idle: its types follow the whole topic's event time instead (less the lag). Other
        partitions running ahead while this one still delivers (a backlog being read)
        prove nothing."""
        lag_s = self._settings.alerting.silence_lag_s
        lag = lag_s * 1000
        now = self._clock()
        for doc_type in sorted(self._open_by_type):
            known = self._types.get(doc_type)
            if known is None or (partition is not None and known.partition != partition):
                continue
            until = self._watermarks.get(known.partition, 0) - lag
            if now - self._seen_at.get(known.partition, self._started) > lag_s:
                until = max(until, self.watermark_ms - lag)
            for change in self.tracker.advance(doc_type, until):
                batch.touched.add(doc_type)
                self._apply(change, batch)

    # ----------------------------------------------------------------- decisions

    def _window_size(self, doc_type: str) -> int:
        known = self._types.get(doc_type)
        if known and known.history:
            last = known.history[-1]
            return last.window_end_ms - last.window_start_ms
        return 60_000

    def _view(self, change: IncidentChange) -> IncidentView:
        doc_type = change.incident.doc_type
        return change_view(
            change, self._window_size(doc_type), self._settings.routing.dashboard_url(doc_type)
        )

    def _apply(self, change: IncidentChange, batch: Batch) -> None:
        inc = change.incident
        if self.refit is not None:
            refit_incident(self.refit, inc)
        row = self._open.get(inc.incident_id)
        if row is None and change.kind == "reopened":
            row = batch.rows.get(inc.incident_id) or self._store.incident(inc.incident_id)
        seq = row.next_seq if row is not None else 1
        # Acknowledged: its messages say by whom; a re-opening asks for a new one.
        acked = row if row is not None and change.kind != "reopened" else None
        view = replace(self._view(change), acked_by=acked.acked_by if acked else None)
        history = self._history(inc.doc_type, change.window_start_ms)
        event = drift_event(change, batch.write.now_ms).model_dump(mode="json", exclude_none=True)
        forced = change.kind in ("updated", "reopened")
        payload = notification_payload(view, history, force_comment=forced)
        g = self._settings.grouping
        code, gid = (row.quality_code, row.group_id) if row else (None, None)
        if change.kind in ("opened", "reopened"):
            reasons = change.judgement.reasons if change.judgement else []
            code = quality_code(reasons, g.codes) if g.enabled else None
            gid = gid if gid in self._groups else None  # its group resolved: decided afresh
        muted = batch.muting.reason(inc.doc_type, inc.severity, inc.incident_id)
        join = None
        if muted is None and gid is None and g.enabled:
            muted, join = self._holds(change.kind, row, inc.doc_type, inc.incident_id, code)
        if gid is not None or join is not None:
            # A member: people hear of it through its group; its drift event goes out.
            held = Hold("events")
        else:
            held = Hold.after(
                change.kind, row.held_by if row else None, row.held_kind if row else None, muted
            )
        if held.release is not None:
            # Nothing holds it any more: people get what was held back, as it stands now.
            held_by = row.held_by if row else None
            seq = self._post_held(batch, view, history, held.release, seq, held_by)
        seq = self._fanout.enqueue_change(
            batch.write,
            batch.consumed_ms,
            inc.incident_id,
            seq,
            change.kind,
            payload,
            event,
            audience=held.audience,
        )
        record = inc.to_record()
        if held.by is not None:
            # Posted later from the row (release_held): it must still say why it opened.
            record[HELD_REASONS] = held_reasons(row, view.reasons)
            if found := held_breakdown(view.window):
                record[HELD_BREAKDOWN] = found
        waited = row.wait_until_ms if row and row.held_by == GROUP_WAIT else None
        resolved = change.kind == "resolved"
        new_row = IncidentRow(
            incident_id=inc.incident_id,
            doc_type=inc.doc_type,
            rule=inc.rule,
            state="resolved" if resolved else "open",
            severity=inc.severity,
            opened_at_ms=inc.opened_at_ms,
            resolved_at_ms=inc.resolved_at_ms,
            record=record,
            next_seq=seq,
            last_update_window_ms=(
                row.last_update_window_ms if resolved and row else change.window_start_ms
            ),
            updated_ms=batch.write.now_ms,
            held_by=held.by,
            held_kind=held.kind,
            acked_by=acked.acked_by if acked else None,
            acked_ms=acked.acked_ms if acked else None,
            quality_code=code,
            group_id=gid,
            wait_until_ms=(
                (waited or batch.write.now_ms + g.wait_s * 1000) if held.by == GROUP_WAIT else None
            ),
        )
        batch.rows[inc.incident_id] = new_row
        self._keep(new_row)
        if join is not None:
            self._join(batch, join, [new_row])
        elif gid is not None and not self._shared:  # shared: the coordinator follows it
            self._member_changed(batch, new_row, change.kind)
        if resolved and code is not None:
            self._release_inhibited(batch, inc.incident_id)
        log.info(
            "incident " + change.kind,
            extra={
                "incident_id": inc.incident_id,
                "doc_type": inc.doc_type,
                "severity": inc.severity,
                "window_start_ms": change.window_start_ms,
            },
        )

    def _holds(
        self, kind: str, row: IncidentRow | None, doc_type: str, incident_id: str, code: str | None
    ) -> tuple[str | None, IncidentRow | None]:
        """What holds a change back from people now, when no silence does (``grouping.py``),
        and the open group it joins instead, if any."""
        held_by = row.held_by if row else None
        if held_by is not None and hold_kind(held_by) == "group-wait":
            # Resolved before its group was decided: posted on its own, opened and resolved.
            return (None if kind == "resolved" else GROUP_WAIT), None
        if held_by is not None and hold_kind(held_by) == "inhibited":
            return (held_by if inhibitor(held_by) in self._open else None), None
        if held_by is not None or kind not in ("opened", "reopened"):
            return None, None  # a silence ended, or posted already: as before
        if (blocker := self._inhibitor_for(doc_type, incident_id)) is not None:
            return INHIBITED_BY + blocker, None
        if code is None:
            return None, None
        # Shared by instances, the group is the coordinator's to join (``engine_shared.py``).
        group = None if self._shared else self._group_of_code(code)
        return (None, group) if group is not None else (GROUP_WAIT, None)

    def _progress(self, verdict: Verdict, changed: set[str], batch: Batch) -> None:
        """Open incidents of this verdict's type that it keeps in breach (by each incident's
        rule: ``BreachLevels``): follow their peak, and post a progress update once
        ``update_interval_s`` (event time) has passed since the last message."""
        interval_ms = self._settings.alerting.update_interval_s * 1000
        w = verdict.window
        for incident_id in sorted(self._open_by_type.get(w.doc_type, ())):
            row = self._open[incident_id]
            if self._levels.of(row.rule, verdict) == "none" or incident_id in changed:
                continue
            # Muted or acknowledged: no progress posts (muted: they resume once nothing does).
            muted = (
                row.held_by
                or row.group_id  # posted through its group
                or row.acked_by
                or batch.muting.reason(row.doc_type, row.severity, incident_id)
            )
            record = dict(row.record)
            record["peak_mean_drift"] = max(float(record["peak_mean_drift"]), w.mean_drift)
            new_row = replace(row, record=record, updated_ms=batch.write.now_ms)
            due = w.window_start_ms - row.last_update_window_ms >= interval_ms
            if interval_ms > 0 and due and not muted:
                view = IncidentView(
                    incident_id=incident_id,
                    doc_type=row.doc_type,
                    severity=row.severity,  # type: ignore[arg-type]
                    state="updated",
                    opened_at_ms=row.opened_at_ms,
                    resolved_at_ms=None,
                    window=w,
                    threshold=verdict.threshold,
                    baseline_version=verdict.baseline_version,
                    reasons=list(verdict.reasons),
                    peak_mean_drift=record["peak_mean_drift"],
                    dashboard_url=self._settings.routing.dashboard_url(row.doc_type),
                )
                payload = notification_payload(view, self._history(row.doc_type, w.window_start_ms))
                seq = self._fanout.enqueue_change(
                    batch.write, batch.consumed_ms, incident_id, row.next_seq, "progress", payload
                )
                new_row = replace(new_row, next_seq=seq, last_update_window_ms=w.window_start_ms)
            batch.rows[incident_id] = new_row
            self._set_open(new_row)

    def _refresh(self, batch: Batch, by_type: dict[str, list[dict[str, Any]]]) -> None:
        """Open incidents' records as the detector holds them at the end of the batch."""
        for doc_type in batch.touched:
            for entry in by_type.get(doc_type, []):
                record = entry.get("open")
                row = self._open.get(record["incident_id"]) if record else None
                if row is None or record is None:
                    continue
                for key in (HELD_REASONS, HELD_BREAKDOWN):  # the detector does not keep them
                    if key in row.record:
                        record = {**record, key: row.record[key]}
                if record == row.record:
                    continue
                new_row = replace(row, record=record, severity=record["severity"])
                batch.rows[row.incident_id] = new_row
                self._set_open(new_row)

    def prune(self, before_ms: int) -> int:
        return self._store.prune(before_ms)

    @property
    def store(self) -> Store:
        return self._store

    def close(self) -> None:
        if self.refit is not None and self._partitions is None:
            # Split (``partitions``), the history outlives each engine: the service's.
            self.refit.close()
        self._silences.close()
        self._acks.close()
        self._store.close()
