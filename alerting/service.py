"""The alerting service: verdicts in, incidents decided, notifications delivered exactly once.

One thread consumes the verdicts topic in batches. For each batch the ``Engine`` feeds the
verdicts to the detection policy (``IncidentTracker``), turns the incident changes into
outbox entries (Slack, Jira, drift events) and commits, in ONE SQLite transaction, the
tracker's state, the next offset of each partition, each type's high-water mark and the
outbox (see ``store.py``). Only then are the offsets committed to Kafka (for lag
monitoring; the service resumes from its own state). A sender thread per integration
drains the outbox (see ``outbox.py``).

So a restart, even after ``kill -9`` at any point, resumes exactly where the state says:
a batch whose transaction did not commit is consumed and decided again (the same way, the
policy is deterministic); one that did is never decided twice; a notification cut off
mid-send is reconciled with Slack or Jira before it is sent again.

Partitions are assigned explicitly (all partitions of the topic, from the stored offsets)
rather than through group rebalancing: the state is local to this process, so a second
member of a group would take partitions without their state, and a restart after
``kill -9`` would wait for the dead member's session to time out. One service runs per
state directory (a lock file enforces it).

Replays are recognised per doc type: a verdict whose window is not newer than the last one
processed for its type is skipped (counted as ``replay`` when its id was seen, ``stale``
otherwise). Baselines are read from the compacted baselines topic from the beginning at
every start (one record per type) and kept current; they feed the policy's pooled
evidence for sparse types.

Baselines stay current by themselves (``alerting.refit``): the windows judged are kept per
doc type (``anchorwatch.policy.refit``: windows inside incidents left out, the shift kept
when an incident resolved "adapted"), and every ``refit_interval_s`` the consumer thread
refits the types that gathered ``refit_min_windows`` new windows and publishes the
baselines to the compacted topic, from which this service (and the drift job) read them
back. At start that history is read back from the verdicts topic.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Final

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as MetricCounter

from anchorwatch.alerting.http import Endpoint
from anchorwatch.alerting.outbox import (
    BatchDelivery,
    Delivery,
    Drainer,
    DryRunDelivery,
    EventsDelivery,
    JiraDelivery,
    SlackDelivery,
    SlackWebhookDelivery,
    history_from_json,
    history_to_json,
    notification_payload,
    outbox_policy,
)
from anchorwatch.alerting.render import IncidentState, IncidentView, WindowPoint
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.slack import SlackWebhookNotifier
from anchorwatch.alerting.store import (
    Action,
    BatchWrite,
    DocTypeRow,
    IncidentListing,
    IncidentRow,
    Integration,
    NewEntry,
    Store,
)
from anchorwatch.baseline_publish import BaselinePublishError, publish_baselines
from anchorwatch.contracts import (
    Baseline,
    ContractError,
    Reason,
    Verdict,
    WindowAggregate,
    decode_baseline,
    decode_verdict,
)
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import client_config
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.incidents import Incident, IncidentChange, IncidentTracker, drift_event
from anchorwatch.policy.refit import RefitHistory, RefitSchedule
from anchorwatch.policy.window import judge_window

log = logging.getLogger(__name__)

#: Test hook, never a setting: ``point[:integration][@n],...`` kills this process with
#: SIGKILL the n-th time (default 1st) it passes ``point``. Points: batch_before_commit,
#: batch_after_commit (before the Kafka commit), send_before (entry marked attempting,
#: request not sent), send_after (the remote side accepted, not yet marked done).
CRASH_ENV: Final = "ANCHORWATCH_ALERTING_TEST_CRASH_AT"
CRASH_POINTS: Final = ("batch_before_commit", "batch_after_commit", "send_before", "send_after")
#: Windows of history kept per doc type: the chart's and the Jira description's.
MIN_HISTORY = 10


class AlertingServiceError(AnchorwatchError):
    """The service cannot start or run (state in use, unreadable, Kafka unusable)."""


@dataclass(frozen=True)
class RawMessage:
    topic: str
    partition: int
    offset: int
    value: bytes | None


# --------------------------------------------------------------------------- crash hook


class CrashPoints:
    """See CRASH_ENV. ``action`` is what a hit does (default: SIGKILL this process)."""

    def __init__(self, spec: str | None, action: Callable[[], None] | None = None) -> None:
        self._targets: dict[tuple[str, str], int] = {}
        self._hits: Counter[tuple[str, str]] = Counter()
        self._action = action or (lambda: os.kill(os.getpid(), signal.SIGKILL))
        for item in (spec or "").split(","):
            if not item.strip():
                continue
            target, _, nth = item.strip().partition("@")
            point, _, integration = target.partition(":")
            if point not in CRASH_POINTS:
                raise ValueError(f"{CRASH_ENV}: unknown point {point!r}; known: {CRASH_POINTS}")
            self._targets[(point, integration)] = int(nth or 1)

    @classmethod
    def from_env(cls) -> CrashPoints:
        return cls(os.environ.get(CRASH_ENV))

    def __call__(self, point: str, integration: str = "") -> None:
        for key in ((point, integration), (point, "")):
            if key in self._targets:
                self._hits[key] += 1
                if self._hits[key] == self._targets[key]:
                    log.warning("test hook: crashing", extra={"point": point, "at": integration})
                    self._action()


# --------------------------------------------------------------------------- the engine


@dataclass
class _TypeState:
    last_window_start_ms: int
    history: deque[WindowPoint]
    partition: int  # of the verdicts topic: a doc type is the key, so it stays on one


@dataclass
class _Batch:
    write: BatchWrite
    consumed_ms: int
    touched: set[str] = field(default_factory=set)
    rows: dict[str, IncidentRow] = field(default_factory=dict)  # incident rows to write


def _group_states(state: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The tracker's exported state split per doc type, so a batch stores only the types it
    touched (relies on ``export_state`` listing one entry per (doc type, rule))."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for entry in state.get("states", []):
        by_type.setdefault(entry["doc_type"], []).append(entry)
    return by_type


_ACTIONS: Final[dict[str, dict[Integration, Action]]] = {
    "opened": {"slack": "open", "jira": "open", "events": "open"},
    # The same thread and ticket: a reply, and the ticket reopened (then commented).
    "reopened": {"slack": "update", "jira": "open", "events": "open"},
    "updated": {"slack": "update", "jira": "update", "events": "open"},
    "resolved": {"slack": "resolve", "jira": "resolve", "events": "resolve"},
    "progress": {"slack": "update", "jira": "update"},
}


class Engine:
    """Decides: verdicts -> incident changes -> outbox entries, committed per batch.

    Verdicts are handled one at a time, in order, and every decision depends only on the
    verdicts before it (not on where a batch ends), so a batch consumed again after a crash
    is decided the same way. Runs on one thread; what it holds in memory is also stored."""

    def __init__(
        self,
        settings: AlertingSettings,
        store: Store,
        metrics: ServiceMetrics,
        integrations: Sequence[Integration],
        *,
        clock: Callable[[], float] = time.time,
        crash: Callable[[str, str], None] = lambda point, integration: None,
        refit: RefitHistory | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self.refit = refit  # the windows judged, for refits (None: no refits)
        self._metrics = metrics
        self._integrations = tuple(integrations)
        self._clock = clock
        self._crash = crash
        self._history_len = max(settings.slack.chart_windows, MIN_HISTORY)
        self._static = {r.name: r.static.rule() for r in settings.policy.rules}
        self._compare = {r.name: r.compare for r in settings.policy.rules}
        restored = store.restore()
        states = [e for rows in restored.tracker_states.values() for e in rows]
        self.tracker = IncidentTracker(
            settings.policy,
            state={"policy_version": restored.policy_version, "states": states},
        )
        self.offsets: dict[tuple[str, int], int] = dict(restored.offsets)
        self._types: dict[str, _TypeState] = {}
        for known in restored.doc_types.values():
            points = history_from_json(known.history)
            self._types[known.doc_type] = _TypeState(
                known.last_window_start_ms,
                deque(points, maxlen=self._history_len),
                known.partition,
            )
            if points:
                metrics.window(known.doc_type, points[-1].mean_drift, points[-1].threshold)
        # Event time per verdicts partition: the latest window end seen on it.
        self._watermarks: dict[int, int] = {
            int(p): int(ms) for p, ms in orjson.loads(restored.meta.get("watermarks", "{}")).items()
        }
        # When each partition last delivered a verdict (processing time; not stored: after
        # a restart every partition gets silence_lag_s to show it is alive).
        self._seen_at: dict[int, float] = {}
        self._started = clock()
        self._open: dict[str, IncidentRow] = {}
        self._open_by_type: dict[str, set[str]] = {}
        self._carry: list[IncidentRow] = []  # rows to write with the next batch
        tracked = {i.incident_id for i in self.tracker.open_incidents()}
        for row in restored.open_incidents:
            if row.incident_id in tracked:
                self._set_open(row)
            else:
                # A new policy version starts afresh (its incident ids differ): its detector
                # no longer follows these, so they are closed here without notifications.
                log.warning(
                    "incident abandoned: the policy version changed",
                    extra={"incident_id": row.incident_id, "doc_type": row.doc_type},
                )
                self._carry.append(replace(row, state="resolved", updated_ms=self._now_ms()))
        self._publish_open()

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
        batch = _Batch(BatchWrite(now_ms=self._now_ms()), consumed_ms)
        verdicts = self._decode(messages, batch.write)
        seen = self._store.seen_verdicts(v.verdict_id for _, v in verdicts)
        for partition, verdict in verdicts:
            self._handle(partition, verdict, seen, batch)
        state = self.tracker.export_state()
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
        w.meta["watermarks"] = orjson.dumps(
            {str(p): ms for p, ms in self._watermarks.items()}
        ).decode()
        w.incidents = self._carry + list(batch.rows.values())
        self._crash("batch_before_commit", "")
        self._store.commit_batch(w, keep_verdict_ids=self._settings.alerting.recent_verdict_ids)
        self._carry = []
        self.offsets.update(w.offsets)
        self._publish_open()
        self._metrics.batch.observe(time.perf_counter() - started)
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
                self._metrics.verdicts.labels("invalid").inc()
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

    def _handle(self, partition: int, verdict: Verdict, seen: set[str], batch: _Batch) -> None:
        w = verdict.window
        known = self._types.get(w.doc_type)
        if verdict.verdict_id in seen or (
            known is not None and w.window_start_ms <= known.last_window_start_ms
        ):
            replay = verdict.verdict_id in seen or verdict.verdict_id in batch.write.verdict_ids
            self._metrics.verdicts.labels("replay" if replay else "stale").inc()
            return
        try:
            changes = self.tracker.observe_verdict(verdict)
        except Exception:  # a verdict the policy cannot take must not stop the service
            log.exception("verdict not processed", extra={"verdict_id": verdict.verdict_id})
            self._metrics.verdicts.labels("invalid").inc()
            return
        if known is None:
            known = _TypeState(0, deque(maxlen=self._history_len), partition)
            self._types[w.doc_type] = known
        known.last_window_start_ms = w.window_start_ms
        known.partition = partition
        known.history.append(WindowPoint.from_verdict(verdict))
        if self.refit is not None:
            self.refit.add(w)
        batch.touched.add(w.doc_type)
        batch.write.verdict_ids.append(verdict.verdict_id)
        self._metrics.verdicts.labels("processed").inc()
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

    def _advance(self, batch: _Batch, partition: int | None) -> None:
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

    def _history(self, doc_type: str, until_ms: int) -> list[WindowPoint]:
        known = self._types.get(doc_type)
        return [p for p in known.history if p.window_start_ms <= until_ms] if known else []

    def _window_size(self, doc_type: str) -> int:
        known = self._types.get(doc_type)
        if known and known.history:
            last = known.history[-1]
            return last.window_end_ms - last.window_start_ms
        return 60_000

    def _view(self, change: IncidentChange) -> IncidentView:
        inc, j = change.incident, change.judgement
        window = change.window
        reasons: list[Reason] = list(j.reasons) if j is not None else []
        if window is None:
            # Resolved for silence: the slot had no window at all.
            window = WindowAggregate(
                doc_type=inc.doc_type,
                window_start_ms=change.window_start_ms,
                window_end_ms=change.window_start_ms + self._window_size(inc.doc_type),
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
            state=_STATES[change.kind],
            opened_at_ms=inc.opened_at_ms,
            resolved_at_ms=inc.resolved_at_ms,
            window=window,
            threshold=j.threshold if j is not None else inc.threshold,
            baseline_version=j.baseline_version if j is not None else inc.baseline_version,
            reasons=reasons,
            peak_mean_drift=inc.peak_mean_drift,
            dashboard_url=self._settings.routing.dashboard_url(inc.doc_type),
            adapted_from=inc.adapted_from if inc.resolution == "adapted" else None,
            adapted_to=inc.adapted_to if inc.resolution == "adapted" else None,
        )

    def _enqueue(
        self,
        batch: _Batch,
        incident_id: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        event: dict[str, Any] | None = None,
        only: Integration | None = None,
    ) -> int:
        """Outbox entries of one change, one per configured integration; the next seq."""
        actions = _ACTIONS[kind]
        for integration in self._integrations:
            action = actions.get(integration)
            if action is None or (only is not None and integration != only):
                continue
            if integration == "events" and event is None:
                continue
            body = {"event": event} if integration == "events" else payload
            batch.write.outbox.append(
                NewEntry(incident_id, seq, integration, action, kind, body, batch.consumed_ms)
            )
        return seq + 1

    def _apply(self, change: IncidentChange, batch: _Batch) -> None:
        inc = change.incident
        if self.refit is not None:
            refit_incident(self.refit, inc)
        row = self._open.get(inc.incident_id)
        if row is None and change.kind == "reopened":
            row = batch.rows.get(inc.incident_id) or self._store.incident(inc.incident_id)
        seq = row.next_seq if row is not None else 1
        view = self._view(change)
        history = self._history(inc.doc_type, change.window_start_ms)
        event = drift_event(change, batch.write.now_ms).model_dump(mode="json", exclude_none=True)
        forced = change.kind in ("updated", "reopened")
        payload = notification_payload(view, history, force_comment=forced)
        seq = self._enqueue(batch, inc.incident_id, seq, change.kind, payload, event)
        if change.kind == "reopened" and "jira" in self._integrations:
            # After the ticket is reopened, say why in a comment.
            seq = self._enqueue(batch, inc.incident_id, seq, "updated", payload, only="jira")
        resolved = change.kind == "resolved"
        new_row = IncidentRow(
            incident_id=inc.incident_id,
            doc_type=inc.doc_type,
            rule=inc.rule,
            state="resolved" if resolved else "open",
            severity=inc.severity,
            opened_at_ms=inc.opened_at_ms,
            resolved_at_ms=inc.resolved_at_ms,
            record=inc.to_record(),
            next_seq=seq,
            last_update_window_ms=(
                row.last_update_window_ms if resolved and row else change.window_start_ms
            ),
            updated_ms=batch.write.now_ms,
        )
        batch.rows[inc.incident_id] = new_row
        if resolved:
            self._set_closed(new_row)
        else:
            self._set_open(new_row)
        log.info(
            "incident " + change.kind,
            extra={
                "incident_id": inc.incident_id,
                "doc_type": inc.doc_type,
                "severity": inc.severity,
                "window_start_ms": change.window_start_ms,
            },
        )

    def _progress(self, verdict: Verdict, changed: set[str], batch: _Batch) -> None:
        """Open incidents of this verdict's type that it keeps in breach: follow their peak,
        and post a progress update once ``update_interval_s`` (event time) has passed since
        the last message."""
        interval_ms = self._settings.alerting.update_interval_s * 1000
        w = verdict.window
        for incident_id in sorted(self._open_by_type.get(w.doc_type, ())):
            row = self._open[incident_id]
            if self._compare.get(row.rule) == "static":
                level = judge_window(w, None, self._static[row.rule]).breach_level
            else:
                level = verdict.breach_level
            if level == "none" or incident_id in changed:
                continue
            record = dict(row.record)
            record["peak_mean_drift"] = max(float(record["peak_mean_drift"]), w.mean_drift)
            new_row = replace(row, record=record, updated_ms=batch.write.now_ms)
            if interval_ms > 0 and w.window_start_ms - row.last_update_window_ms >= interval_ms:
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
                seq = self._enqueue(batch, incident_id, row.next_seq, "progress", payload)
                new_row = replace(new_row, next_seq=seq, last_update_window_ms=w.window_start_ms)
            batch.rows[incident_id] = new_row
            self._set_open(new_row)

    def _refresh(self, batch: _Batch, by_type: dict[str, list[dict[str, Any]]]) -> None:
        """Open incidents' records as the detector holds them at the end of the batch."""
        for doc_type in batch.touched:
            for entry in by_type.get(doc_type, []):
                record = entry.get("open")
                row = self._open.get(record["incident_id"]) if record else None
                if row is None or record is None or record == row.record:
                    continue
                new_row = replace(row, record=record, severity=record["severity"])
                batch.rows[row.incident_id] = new_row
                self._set_open(new_row)

    def _publish_open(self) -> None:
        self._metrics.open_incidents(Counter(r.severity for r in self._open.values()))

    def open_incidents(self) -> list[IncidentRow]:
        return sorted(self._open.values(), key=lambda r: (r.opened_at_ms, r.doc_type))

    def prune(self, before_ms: int) -> int:
        return self._store.prune(before_ms)

    @property
    def store(self) -> Store:
        return self._store

    def close(self) -> None:
        self._store.close()


_STATES: Final[dict[str, IncidentState]] = {
    "opened": "open",
    "reopened": "open",
    "updated": "updated",
    "resolved": "resolved",
}


def refit_incident(history: RefitHistory, incident: Incident) -> None:
    """An incident's span (or, resolved "adapted", its shift) for the refit history."""
    history.incident(
        incident.doc_type,
        incident.incident_id,
        first_breach_ms=incident.first_breach_ms,
        resolved_at_ms=incident.resolved_at_ms,
        resolution=incident.resolution,
    )


# --------------------------------------------------------------------------- refits


class RefitMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.refits = MetricCounter(
            "anchorwatch_alerting_baseline_refits_total",
            "Baseline refits, by outcome: published; skipped (too little history to replace "
            "a fitted baseline); failed (Kafka did not take it; retried); dry_run.",
            ["outcome"],
            registry=registry,
        )
        self.last = Gauge(
            "anchorwatch_alerting_baseline_refit_last_timestamp_seconds",
            "When refitted baselines were last published (Unix time).",
            registry=registry,
        )
        for outcome in ("published", "skipped", "failed", "dry_run"):
            self.refits.labels(outcome)


class Refitter:
    """Refits due baselines and publishes them (runs on the consumer thread, which owns the
    engine). Publishing twice is harmless: the topic is compacted by doc type and a fit's
    version is derived from its inputs and its fit time."""

    #: After a failed publish, wait this long before trying again.
    RETRY_S: Final = 60.0
    PUBLISH_TIMEOUT_S: Final = 30.0
    #: Gathering and fitting a type-week of windows takes ~0.3 s (bench/refit.py): the
    #: consumer thread pauses for a few seconds per run at most; other due types follow.
    TYPES_PER_RUN: Final = 10

    def __init__(
        self,
        settings: AlertingSettings,
        engine: Engine,
        metrics: RefitMetrics,
        *,
        clock: Callable[[], float] = time.time,
        publish: Callable[[list[Baseline]], object] | None = None,
    ) -> None:
        assert engine.refit is not None
        self._settings = settings
        self._engine = engine
        self._history = engine.refit
        self._metrics = metrics
        self._clock = clock
        self._publish = publish or (
            lambda baselines: publish_baselines(
                settings.kafka,
                settings.topics.baselines,
                baselines,
                timeout_s=self.PUBLISH_TIMEOUT_S,
            )
        )
        self._not_before = 0.0

    def run(self) -> list[Baseline]:
        """Fit and publish every type due now; the baselines published."""
        now = self._clock()
        if now < self._not_before:
            return []
        now_ms = int(now * 1000)
        policy, dry_run = self._settings.policy, self._settings.alerting.dry_run
        fits: list[tuple[Baseline, Baseline | None, int]] = []
        due = self._history.due(now_ms, self._engine.tracker.baseline, self.TYPES_PER_RUN)
        for item in due:
            new = fit_baseline(
                item.doc_type,
                item.windows,
                policy,
                fitted_at_ms=now_ms,
                history_start_ms=item.history_start_ms,
                history_end_ms=item.history_end_ms,
            ).baseline
            old = self._engine.tracker.baseline(item.doc_type)
            if new.status != "fitted" and old is not None and old.status == "fitted":
                # Fewer usable windows than a fit needs (e.g. just after an adaptation):
                # keep judging by the fitted one.
                self._history.fitted(
                    item.doc_type, fitted_at_ms=now_ms, history_end_ms=old.history_end_ms
                )
                self._log(new, old, "skipped")
                continue
            fits.append((new, old, len(item.windows)))
        if not fits:
            return []
        if not dry_run:
            try:
                self._publish([new for new, _, _ in fits])
            except (BaselinePublishError, KafkaException) as exc:
                self._metrics.refits.labels("failed").inc(len(fits))
                self._not_before = now + self.RETRY_S
                log.error(
                    "refitted baselines not published; retrying later",
                    extra={"doc_types": len(fits), "error": str(exc)[:1000]},
                )
                return []
            self._metrics.last.set(now)
        for new, old, _ in fits:
            self._history.fitted(
                new.doc_type, fitted_at_ms=now_ms, history_end_ms=new.history_end_ms
            )
            self._log(new, old, "dry_run" if dry_run else "published")
        return [new for new, _, _ in fits]

    def _log(self, new: Baseline, old: Baseline | None, outcome: str) -> None:
        self._metrics.refits.labels(outcome).inc()
        log.info(
            "baseline refitted",
            extra={
                "doc_type": new.doc_type,
                "outcome": outcome,
                "status": new.status,
                "windows": new.window_count,
                "center": round(new.center, 4),
                "threshold": round(new.threshold, 4),
                "version": new.version,
                "old_center": round(old.center, 4) if old is not None else None,
                "old_threshold": round(old.threshold, 4) if old is not None else None,
                "old_version": old.version if old is not None else None,
            },
        )


def rebuild_refit_history(
    settings: AlertingSettings, history: RefitHistory, store: Store, now_ms: int
) -> int:
    """Read back the last ``refit_history_s`` of verdicts (bounded: from the offsets of
    records produced since then, to the end offsets at start) and the incidents the service
    recorded, so a restart does not forget. Returns the windows read."""
    since_ms = now_ms - settings.alerting.refit_history_s * 1000
    consumer = Consumer(
        client_config(
            settings.kafka,
            **{
                "group.id": f"{settings.alerting.group_id}-refit",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    topic = settings.topics.verdicts
    read = 0
    try:
        partitions = _partitions(consumer, topic, 10.0)
        if partitions is None:
            return 0
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, p, since_ms) for p in partitions], timeout=10.0
        )
        ends: dict[int, int] = {}
        assignment = []
        for tp in starts:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), 10.0)
            # offset -1: nothing produced since since_ms on that partition.
            if 0 <= tp.offset < high:
                ends[tp.partition] = high
                assignment.append(TopicPartition(topic, tp.partition, tp.offset))
        consumer.assign(assignment)
        deadline = time.monotonic() + 300
        while ends and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                if m.error() is not None or m.partition() not in ends:
                    continue
                try:
                    history.add(decode_verdict(m.value() or b"").window)
                    read += 1
                except ContractError:
                    continue  # counted when the engine meets it
            # The position also moves past transaction markers (the drift job writes
            # transactionally), which no record's offset would reach.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        if ends:
            log.warning(
                "refit history read back in part: reading took too long",
                extra={"partitions": sorted(ends)},
            )
    except KafkaException as exc:
        log.warning("refit history not read back", extra={"error": str(exc)})
    finally:
        consumer.close()
    for listing in store.list_incidents(open_only=False, limit=100_000):
        record = listing.row.record
        history.incident(
            listing.row.doc_type,
            listing.row.incident_id,
            first_breach_ms=int(record["first_breach_ms"]),
            resolved_at_ms=listing.row.resolved_at_ms,
            resolution=record.get("resolution"),
        )
    return read


# --------------------------------------------------------------------------- Kafka


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int] | None:
    """The topic's partitions; None when it does not exist (yet)."""
    info = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if info is None or info.error is not None:
        return None
    return sorted(info.partitions)


class VerdictConsumer:
    """Explicitly assigned verdict partitions, positioned from the stored offsets."""

    def __init__(self, settings: AlertingSettings, stored: dict[tuple[str, int], int]) -> None:
        self.topic = settings.topics.verdicts
        a = settings.alerting
        self._start = OFFSET_BEGINNING if a.start_offset == "earliest" else OFFSET_END
        self._stored = {p: o for (t, p), o in stored.items() if t == self.topic}
        self.assigned: set[int] = set()
        self.kafka_ok = False
        self.last_error: str | None = None
        self._consumer = Consumer(
            client_config(
                settings.kafka,
                **{
                    "group.id": a.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": a.start_offset,
                    "isolation.level": "read_committed",
                    "error_cb": self._on_error,
                },
            )
        )

    def _on_error(self, error: KafkaError) -> None:
        self.last_error = str(error)
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.kafka_ok = False
        log.warning("kafka consumer error", extra={"error": str(error)})

    def refresh(self) -> None:
        """Assign partitions not assigned yet (at start, and when the topic grows)."""
        try:
            partitions = _partitions(self._consumer, self.topic, 5.0)
        except KafkaException as exc:
            self.kafka_ok, self.last_error = False, str(exc)
            return
        self.kafka_ok = True
        if partitions is None:
            self.last_error = f"topic {self.topic} does not exist"
            log.warning("verdicts topic not found", extra={"topic": self.topic})
            return
        new = [p for p in partitions if p not in self.assigned]
        if not new:
            return
        unknown = [TopicPartition(self.topic, p) for p in new if p not in self._stored]
        committed: dict[int, int] = {}
        if unknown:
            try:
                for tp in self._consumer.committed(unknown, timeout=10):
                    if tp.offset >= 0:
                        committed[tp.partition] = tp.offset
            except KafkaException as exc:
                self.kafka_ok, self.last_error = False, str(exc)
                return
        assignment = [
            TopicPartition(self.topic, p, self._stored.get(p, committed.get(p, self._start)))
            for p in new
        ]
        self._consumer.incremental_assign(assignment)
        self.assigned.update(new)
        log.info(
            "verdict partitions assigned",
            extra={
                "topic": self.topic,
                "offsets": {str(tp.partition): tp.offset for tp in assignment},
            },
        )

    def poll(self, max_messages: int, timeout_s: float) -> list[RawMessage]:
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        batch = [first]
        if max_messages > 1:
            batch += self._consumer.consume(max_messages - 1, timeout=0)
        out = []
        for m in batch:
            if (error := m.error()) is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.last_error = str(error)
                    log.warning("kafka consume error", extra={"error": str(error)})
                continue
            partition, offset = m.partition(), m.offset()
            assert partition is not None
            assert offset is not None
            out.append(RawMessage(self.topic, partition, offset, m.value()))
        if out:
            self.kafka_ok = True
        return out

    def commit(self, offsets: dict[tuple[str, int], int], *, wait: bool = False) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items() if t == self.topic]
        if not tps:
            return
        try:
            if wait:
                self._consumer.commit(offsets=tps, asynchronous=False)
            else:
                self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:  # only lag monitoring depends on it
            log.warning("offset commit to kafka failed", extra={"error": str(exc)})

    def close(self) -> None:
        self._consumer.close()


class BaselineConsumer:
    """The compacted baselines topic, read from the beginning at every start."""

    def __init__(self, settings: AlertingSettings, on_invalid: Callable[[], None]) -> None:
        self.topic = settings.topics.baselines
        self._on_invalid = on_invalid
        self._consumer = Consumer(
            client_config(
                settings.kafka,
                **{
                    "group.id": f"{settings.alerting.group_id}-baselines",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self._ends: dict[int, int] | None = None  # high watermarks seen at start
        self._next: dict[int, int] = {}

    @property
    def caught_up(self) -> bool:
        return self._ends is not None and all(
            self._next.get(p, 0) >= end for p, end in self._ends.items()
        )

    def start(self) -> bool:
        """Assign every partition from the beginning; False if Kafka did not answer."""
        if self._ends is not None:
            return True
        try:
            partitions = _partitions(self._consumer, self.topic, 5.0)
            if partitions is None:
                log.warning(
                    "baselines topic not found: windows are judged without pooled evidence",
                    extra={"topic": self.topic},
                )
                self._ends = {}
                return True
            ends = {}
            for p in partitions:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=5.0
                )
                ends[p] = high
                self._next[p] = low
        except KafkaException as exc:
            log.warning("baselines not readable yet", extra={"error": str(exc)})
            return False
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
        self._ends = ends
        return True

    def poll(self, timeout_s: float = 0.0, max_messages: int = 1000) -> list[Baseline]:
        if self._ends is None and not self.start():
            return []
        out = []
        for m in self._consumer.consume(max_messages, timeout=timeout_s):
            if m.error() is not None:
                continue
            partition, offset = m.partition(), m.offset()
            assert partition is not None
            assert offset is not None
            self._next[partition] = offset + 1
            try:
                out.append(decode_baseline(m.value() or b""))
            except ContractError as exc:
                log.error("invalid baseline skipped", extra={"error": str(exc)[:1000]})
                self._on_invalid()
        if not self.caught_up and self._ends:
            # The position also moves past records a consumer never sees (transaction
            # markers), which the last offset consumed would wait for in vain.
            tps = [TopicPartition(self.topic, p) for p in self._ends]
            for tp in self._consumer.position(tps):
                if tp.offset >= 0:
                    self._next[tp.partition] = max(self._next.get(tp.partition, 0), tp.offset)
        return out

    def close(self) -> None:
        self._consumer.close()


# --------------------------------------------------------------------------- the service


class StateLock:
    """One service per state directory: an exclusive lock the OS releases on any exit."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self._path = state_dir / "lock"
        self._file: IO[str] = self._path.open("a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "?"
            self._file.close()
            raise AlertingServiceError(
                f"another alerting service (pid {holder}) uses {state_dir}"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    def release(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


class AlertingService:
    """Wires the consumer loop, the senders and the endpoint; ``start`` returns at once."""

    PRUNE_EVERY_S = 3600.0
    REFRESH_EVERY_S = 30.0
    REFIT_CHECK_S = 30.0  # how often due refits are looked for

    def __init__(
        self,
        settings: AlertingSettings,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        crash: CrashPoints | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = ServiceMetrics(
            self.registry, doc_types_max=settings.alerting.metrics_doc_types_max
        )
        self._clock = clock
        self._crash = crash or CrashPoints.from_env()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._drainers: list[Drainer] = []
        self._lock: StateLock | None = None
        self._endpoint: Endpoint | None = None
        self._heartbeat = time.monotonic()
        self.engine: Engine | None = None
        self._verdicts: VerdictConsumer | None = None
        self._baselines: BaselineConsumer | None = None
        self._failure: BaseException | None = None
        self.refit_metrics = RefitMetrics(self.registry)
        self.refitter: Refitter | None = None

    # ----------------------------------------------------------------- wiring

    def integrations(self) -> list[Integration]:
        s = self.settings
        out: list[Integration] = []
        if s.slack.mode != "off":
            out.append("slack")
        if s.jira.enabled:
            out.append("jira")
        if s.alerting.drift_events:
            out.append("events")
        return out

    def _delivery(self, integration: Integration) -> Delivery | BatchDelivery:
        s = self.settings
        if s.alerting.dry_run:
            return DryRunDelivery(integration, s.routing, s.jira)
        retry = s.retry.policy(metrics=self.metrics.notify)
        if integration == "slack":
            if s.slack.mode == "webhook":
                return SlackWebhookDelivery(SlackWebhookNotifier.from_settings(s.slack, retry))
            return SlackDelivery.from_settings(s.slack, s.routing, outbox_policy(retry))
        if integration == "jira":
            return JiraDelivery.from_settings(s.jira, outbox_policy(retry))
        return EventsDelivery(s.kafka, s.topics.drift_events)

    def _rate(self, integration: Integration) -> float | None:
        a = self.settings.alerting
        if a.dry_run or integration == "events":
            return None
        return a.slack_rate_per_s if integration == "slack" else a.jira_rate_per_s

    def start(self) -> AlertingService:
        s = self.settings
        a = s.alerting
        self._lock = StateLock(a.state_dir)
        try:
            store = Store(a.state_dir, synchronous=a.sqlite_synchronous)
            refit = (
                RefitHistory(
                    RefitSchedule(
                        a.refit_interval_s * 1000, a.refit_history_s * 1000, a.refit_min_windows
                    )
                )
                if a.refit
                else None
            )
            self.engine = Engine(
                s,
                store,
                self.metrics,
                self.integrations(),
                clock=self._clock,
                crash=self._crash,
                refit=refit,
            )
            if refit is not None:
                self.refitter = Refitter(s, self.engine, self.refit_metrics, clock=self._clock)
            self._endpoint = Endpoint(
                a.metrics_host, a.metrics_port, self.registry, self.health, self.readiness
            ).start()
            self._verdicts = VerdictConsumer(s, self.engine.offsets)
            self._baselines = BaselineConsumer(s, self.metrics.baselines.labels("invalid").inc)
        except BaseException:
            self._lock.release()
            raise
        for integration in self.integrations():
            self._spawn(f"sender-{integration}", self._sender, integration)
        self._spawn("consumer", self._consume)
        log.info(
            "alerting service started",
            extra={
                "state_dir": str(a.state_dir),
                "integrations": self.integrations(),
                "dry_run": a.dry_run,
                "endpoint": self._endpoint.url,
                "open_incidents": len(self.engine.open_incidents()),
            },
        )
        return self

    @property
    def endpoint_url(self) -> str:
        assert self._endpoint is not None
        return self._endpoint.url

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # the service stops rather than run half-dead
                self._failure = exc
                log.exception("alerting thread failed", extra={"alerting_thread": name})
                self._stop.set()

        thread = threading.Thread(target=guarded, name=f"alerting-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _sender(self, integration: Integration) -> None:
        a = self.settings.alerting
        store = Store(a.state_dir, synchronous=a.sqlite_synchronous)
        delivery = self._delivery(integration)
        drainer = Drainer(
            delivery,
            store,
            self.settings.retry.policy(),
            self.metrics,
            rate_per_s=self._rate(integration),
            burst=a.rate_burst,
            clock=self._clock,
            crash=self._crash,
        )
        self._drainers.append(drainer)
        try:
            drainer.run(self._stop)
        finally:
            if isinstance(delivery, EventsDelivery):
                delivery.close()
            store.close()

    def _wake_senders(self) -> None:
        for drainer in list(self._drainers):
            drainer.wake.set()

    def _consume(self) -> None:
        assert self.engine is not None
        assert self._verdicts is not None
        assert self._baselines is not None
        engine, verdicts, baselines = self.engine, self._verdicts, self._baselines
        a = self.settings.alerting
        refreshed = pruned = 0.0
        if engine.refit is not None:
            n = rebuild_refit_history(
                self.settings, engine.refit, engine.store, int(self._clock() * 1000)
            )
            log.info("refit history read back", extra={"windows": n})
        refit_every = min(self.REFIT_CHECK_S, float(a.refit_interval_s))
        refit_checked = time.monotonic()
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            if not baselines.caught_up:
                # Verdicts wait until every current baseline is known.
                for b in baselines.poll(timeout_s=a.poll_timeout_s):
                    engine.set_baseline(b)
                continue
            for b in baselines.poll():
                engine.set_baseline(b)
            now = time.monotonic()
            if now - refreshed > self.REFRESH_EVERY_S or not verdicts.assigned:
                verdicts.refresh()
                refreshed = now
                if not verdicts.assigned:
                    self._stop.wait(1.0)
                    continue
            if self.refitter is not None and now - refit_checked >= refit_every:
                self.refitter.run()
                refit_checked = now
            if now - pruned > self.PRUNE_EVERY_S:
                cutoff = int((self._clock() - a.retention_days * 86_400) * 1000)
                if n := engine.prune(cutoff):
                    log.info("pruned old incidents", extra={"incidents": n})
                pruned = now
            messages = verdicts.poll(a.batch_max, a.poll_timeout_s)
            if not messages:
                continue
            offsets = engine.process(messages, int(self._clock() * 1000))
            self._crash("batch_after_commit", "")
            verdicts.commit(offsets)
            self._wake_senders()

    # ----------------------------------------------------------------- probes

    def health(self) -> tuple[bool, dict[str, Any]]:
        alive = {t.name: t.is_alive() for t in self._threads}
        stale = time.monotonic() - self._heartbeat > 60
        ok = all(alive.values()) and not stale and self._failure is None
        return ok, {"threads": alive, "consumer_stalled": stale}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        healthy, _ = self.health()
        v, b = self._verdicts, self._baselines
        detail = {
            "healthy": healthy,
            "baselines_loaded": bool(b and b.caught_up),
            "partitions": sorted(v.assigned) if v else [],
            "kafka": bool(v and v.kafka_ok),
            "kafka_error": v.last_error if v else None,
        }
        ok = (
            healthy
            and detail["baselines_loaded"]
            and bool(detail["partitions"])
            and detail["kafka"]
        )
        return bool(ok), detail

    # ----------------------------------------------------------------- stop

    def request_stop(self) -> None:
        self._stop.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stopped (a signal, ``stop``, or a failed thread); True if stopped."""
        return self._stop.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._wake_senders()
        for thread in self._threads:
            thread.join(timeout=30)
        if self._verdicts:
            if self.engine is not None and self._failure is None:
                self._verdicts.commit(self.engine.offsets, wait=True)
            self._verdicts.close()
        if self._baselines:
            self._baselines.close()
        if self._endpoint:
            self._endpoint.stop()
        if self.engine:
            self.engine.close()
        if self._lock:
            self._lock.release()
            self._lock = None
        log.info("alerting service stopped")
        if self._failure is not None:
            raise AlertingServiceError(f"the service stopped on an error: {self._failure}")


def serve(settings: AlertingSettings) -> None:
    """Run until SIGTERM or SIGINT (entry point of `anchorwatch alerting serve`)."""
    service = AlertingService(settings)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        service.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service.start()
    while not service.wait(1.0):
        pass
    service.stop()


def list_incidents(state_dir: Path, *, open_only: bool, limit: int) -> list[IncidentListing]:
    """The incidents the service holds (for `anchorwatch alerting incidents`)."""
    store = Store(state_dir, create=False)
    try:
        return store.list_incidents(open_only=open_only, limit=limit)
    finally:
        store.close()
