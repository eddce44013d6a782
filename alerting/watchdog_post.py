"""The watchdog's notice, posted like an incident: one Slack thread, one Jira ticket, a
PagerDuty alert where routed, and ANCHOR_DRIFT_ALERT / _RESOLVED events, through the same
exactly-once outbox (``fanout.py``), each change in its own store transaction together with
the notice's own state (a ``meta`` row): a restart neither re-posts it nor loses it.

The notice is a pseudo-incident (rule ``watchdog``, doc type ``anchorwatch:watchdog``, the
Kafka key of its events) of kind ``blind`` (``render.IncidentView.kind``): its view carries
the blind types with the signal blinding each and the signals seen, and the renderers frame
it as "anchorwatch cannot see N doc types: ..." with what to check, no drift figures. Its
incident row is stored ``open`` while it is open (``alerting incidents`` lists it so; a
Slack Acknowledge click on it is taken) and ``resolved`` when it resolves; the engine keeps
it at a restart instead of closing it as a changed policy's, and learns of it from the
poster (``follow``) only, so what it holds is never older than the row. An open row is never
pruned. The row's record holds the notice's latest view (``views.row_view`` shows it on an
acknowledgement); an acknowledgement (applied by the engine, ``engine_release.py``) advances
the row's seq and sets ``acked_by``, which every later write of the row keeps.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

import orjson

from anchorwatch.alerting.fanout import Fanout
from anchorwatch.alerting.grouping import WATCHDOG_RULE
from anchorwatch.alerting.integrations.registry import named
from anchorwatch.alerting.payload import notification_payload, view_to_json
from anchorwatch.alerting.render import IncidentView, clean_text, truncate
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import BatchWrite, IncidentRow, Store
from anchorwatch.alerting.views import NOTICE_VIEW, STATES
from anchorwatch.alerting.watchdog import CAUSES, Cause, Decision, Posted, Sight
from anchorwatch.contracts import DriftEvent, DriftEvidence, Reason, WindowAggregate

log = logging.getLogger(__name__)

WATCHDOG_DOC_TYPE: Final = "anchorwatch:watchdog"
META_KEY: Final = "watchdog_notice"
#: The headline's length at most (Slack shows 120 characters of it in the parent).
HEADLINE_MAX: Final = 200
NAME_MAX: Final = 60
REASON_MAX: Final = 1_000

_WORDS: Final[dict[Cause, str]] = {
    "no_verdicts": "snapshots keep arriving, no verdicts",
    "watermark_stalled": "the verdict watermark stopped",
    "consumer_stalled": "the drift job's consumer stopped",
}


@dataclass(frozen=True)
class Notice:
    """The open notice as stored."""

    incident_id: str
    opened_at_ms: int
    next_seq: int
    types: dict[str, Cause]
    causes: list[Cause]
    posted_at_ms: int

    def posted(self) -> Posted:
        return Posted(dict(self.types), frozenset(self.causes), self.posted_at_ms / 1000)


def listing(types: Sequence[str], shown: int) -> str:
    """``a, b, c (+N more)``: the first ``shown`` in order, made safe to show."""
    names = sorted(types)
    text = ", ".join(clean_text(n) for n in names[:shown])
    more = len(names) - shown
    return text + (f" (+{more} more)" if more > 0 else "")


def headline(types: Sequence[str], shown: int) -> str:
    """ "anchorwatch cannot see doc types a, b (+N more)": as many names as fit in
    HEADLINE_MAX with the count of the rest (each name cut to NAME_MAX)."""
    head = "anchorwatch cannot see doc types "
    if not types:
        return head + "(none sampled yet)"
    names = [truncate(clean_text(n), NAME_MAX) for n in sorted(types)]
    fit: list[str] = []
    for name in names[:shown]:
        rest = len(names) - len(fit) - 1
        more = f" (+{rest} more)" if rest > 0 else ""
        if len(head) + len(", ".join([*fit, name])) + len(more) > HEADLINE_MAX:
            break
        fit.append(name)
    rest = len(names) - len(fit)
    return head + ", ".join(fit) + (f" (+{rest} more)" if rest > 0 else "")


def reasons(sight: Sight, shown: int, blind_after_s: float) -> list[Reason]:
    """One reason per cause: the types it blinds, and what was seen."""
    out = []
    for cause in CAUSES:
        names = [d for d, c in sight.types.items() if c == cause]
        if not names and cause not in sight.causes:
            continue
        parts = []
        if names:
            parts.append(f"{len(names)} doc type(s) {listing(names, shown)}")
        if cause == "no_verdicts":
            parts.append(f"{_WORDS[cause]} for {blind_after_s:.0f} s or more")
        else:
            parts.append(sight.detail.get(cause, _WORDS[cause]))
        out.append(Reason(code=cause, message=truncate(": ".join(parts), REASON_MAX)))
    return out


class NoticePoster:
    """Posts the watchdog's decisions; runs on the consumer thread, on the engine's store.

    ``follow`` (the engine's ``_keep``) is given the open notice's row at the start and each
    row written, so the engine holds the notice as it stands and applies an acknowledgement
    of it (``engine_release.apply_acks``). Without it the engine never holds the notice: an
    acknowledgement of it is dropped as if it had resolved."""

    def __init__(
        self,
        settings: AlertingSettings,
        store: Store,
        integrations: Sequence[str],
        *,
        clock_ms: Callable[[], int],
        follow: Callable[[IncidentRow], None] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._fanout = Fanout(settings, named(tuple(integrations)))
        self._clock_ms = clock_ms
        self._follow = follow
        self.notice = self._load()
        if follow is not None and self.notice is not None:
            row = store.incident(self.notice.incident_id)
            if row is not None and row.state == "open":
                follow(row)  # after a restart: the engine learns of it from here

    def _load(self) -> Notice | None:
        raw = self._store.meta_get(META_KEY)
        if not raw:
            return None
        data = orjson.loads(raw)
        return Notice(**data) if data else None

    def posted(self) -> Posted | None:
        return self.notice.posted() if self.notice is not None else None

    def post(self, decision: Decision, consumed_ms: int) -> None:
        """Writes the change's outbox entries, the notice's row and its state in one
        transaction."""
        w = self._settings.watchdog
        now_ms = self._clock_ms()
        sight = decision.sight
        notice = self.notice
        if decision.kind == "opened" or notice is None:
            since_ms = int(sight.since_s * 1000) if sight.since_s is not None else now_ms
            digest = hashlib.sha256(f"watchdog\x1f{now_ms}".encode()).hexdigest()[:32]
            notice = Notice(f"w1-{digest}", min(since_ms, now_ms), 1, {}, [], now_ms)
        stored_row = self._store.incident(notice.incident_id)
        if stored_row is not None and stored_row.next_seq > notice.next_seq:
            # An acknowledgement posted in between: its entries took those seqs.
            notice = replace(notice, next_seq=stored_row.next_seq)
        acked = (stored_row.acked_by, stored_row.acked_ms) if stored_row else (None, None)
        resolved = decision.kind == "resolved"
        # A resolution shows what was blind; an opening or update what is blind now.
        types = dict(notice.types) if resolved else dict(sight.types)
        causes = list(notice.causes) if resolved else sorted(sight.causes)
        view = self._view(notice, decision, types, causes, now_ms, acked[0])
        # Partition 0's: with the work split, its owner alone posts the notice.
        batch = BatchWrite(now_ms=now_ms, partitions={0})
        payload = notification_payload(view, [], force_comment=decision.kind == "updated")
        event = self._event(notice, decision.kind, view, types, now_ms)
        seq = self._fanout.enqueue_change(
            batch, consumed_ms, notice.incident_id, notice.next_seq, decision.kind, payload, event
        )
        row = self._row(notice, view, seq, now_ms, acked)
        batch.incidents = [row]
        stored = Notice(notice.incident_id, notice.opened_at_ms, seq, types, causes, now_ms)
        batch.meta[META_KEY] = "" if resolved else orjson.dumps(asdict(stored)).decode()
        if resolved:
            # An acknowledgement clicked just before: nothing to acknowledge any more (the
            # engine must not apply it to the open row it may still hold from its start).
            batch.statements.append(
                (
                    "UPDATE slack_actions SET applied_ms = ?, outcome = 'resolved' "
                    "WHERE incident_id = ? AND applied_ms IS NULL",
                    (now_ms, notice.incident_id),
                )
            )
        self._store.commit_batch(batch, keep_verdict_ids=self._settings.alerting.recent_verdict_ids)
        self.notice = None if resolved else stored
        if self._follow is not None:
            self._follow(row)
        log.warning(
            "watchdog notice " + decision.kind,
            extra={
                "incident_id": notice.incident_id,
                "doc_types": sorted(types)[: w.types_shown],
                "doc_types_blind": len(types),
                "causes": causes,
            },
        )

    def _view(
        self,
        notice: Notice,
        decision: Decision,
        types: Mapping[str, Cause],
        causes: Sequence[Cause],
        now_ms: int,
        acked_by: str | None,
    ) -> IncidentView:
        w = self._settings.watchdog
        resolved = decision.kind == "resolved"
        if resolved:
            found = [
                Reason(
                    code="sight_returned",
                    message="verdicts arrive again for the doc types listed, or those types "
                    "stopped arriving",
                )
            ]
        else:
            found = reasons(decision.sight, w.types_shown, w.blind_after_s)
        window = WindowAggregate(
            doc_type=WATCHDOG_DOC_TYPE,
            window_start_ms=notice.opened_at_ms,
            window_end_ms=max(now_ms, notice.opened_at_ms + 1),
            request_count=0,
            mean_drift=0.0,
        )
        return IncidentView(
            incident_id=notice.incident_id,
            doc_type=WATCHDOG_DOC_TYPE,
            severity=w.severity,
            state=STATES[decision.kind],
            opened_at_ms=notice.opened_at_ms,
            resolved_at_ms=now_ms if resolved else None,
            window=window,
            threshold=0.0,
            baseline_version=None,
            reasons=found,
            acked_by=acked_by,
            kind="blind",
            members=tuple((d, str(types[d])) for d in sorted(types)),
            signals=tuple(c for c in CAUSES if c in causes),
        )

    def _event(
        self,
        notice: Notice,
        kind: str,
        view: IncidentView,
        types: Mapping[str, Cause],
        now_ms: int,
    ) -> dict[str, Any]:
        resolved = kind == "resolved"
        digest = hashlib.sha256(
            f"{notice.incident_id}\x1f{kind}\x1f{notice.next_seq}".encode()
        ).hexdigest()[:32]
        event = DriftEvent(
            event_id=f"e1-{digest}",
            event_type="ANCHOR_DRIFT_RESOLVED" if resolved else "ANCHOR_DRIFT_ALERT",
            incident_id=notice.incident_id,
            doc_type=WATCHDOG_DOC_TYPE,
            severity=view.severity,
            opened_at_ms=notice.opened_at_ms,
            emitted_at_ms=now_ms,
            resolved_at_ms=now_ms if resolved else None,
            evidence=DriftEvidence(
                window_start_ms=notice.opened_at_ms,
                mean_drift=0.0,
                threshold=0.0,
                request_count=0,
                reasons=[
                    Reason(
                        code="blind",
                        message=headline(list(types), self._settings.watchdog.types_shown),
                    ),
                    *view.reasons,
                ],
            ),
        )
        return event.model_dump(mode="json", exclude_none=True)

    def _row(
        self,
        notice: Notice,
        view: IncidentView,
        seq: int,
        now_ms: int,
        acked: tuple[str | None, int | None],
    ) -> IncidentRow:
        resolved = view.state == "resolved"
        return IncidentRow(
            incident_id=notice.incident_id,
            doc_type=WATCHDOG_DOC_TYPE,
            rule=WATCHDOG_RULE,
            state="resolved" if resolved else "open",
            severity=self._settings.watchdog.severity,
            opened_at_ms=notice.opened_at_ms,
            resolved_at_ms=now_ms if resolved else None,
            # What the listings and the refit history read of every incident's record.
            record={
                "watchdog": True,
                "doc_types": [d for d, _ in view.members[:200]],
                "causes": list(view.signals),
                "threshold": 0.0,
                "peak_mean_drift": 0.0,
                "first_breach_ms": notice.opened_at_ms,
                "resolution": None,
                NOTICE_VIEW: view_to_json(replace(view, state="open")),
            },
            next_seq=seq,
            last_update_window_ms=0,
            updated_ms=now_ms,
            acked_by=acked[0],
            acked_ms=acked[1],
        )
