"""Senders that drain the outbox: one thread per integration (Slack, Jira, drift events).

A sender takes, per incident, only the lowest unfinished entry (see ``Store.due``), so
updates never overtake the message they belong to, and an outage of one integration never
holds up another or the consumer. For each entry:

1. an entry left ``attempting`` (the process died, or the last try failed, after the request
   may have reached the remote side) is first *reconciled*: Slack is searched for the
   parent message by its metadata and for thread replies by their exact content; Jira for
   the comment by its exact body and for the ticket's status. Found: done, not re-sent.
2. otherwise it is marked ``attempting`` (committed) and sent; done and the references the
   send produced (Slack thread, Jira key) are committed together.

Calls that would show twice if repeated (``chat.postMessage``, a Jira comment or
transition) get ONE attempt from the retry policy: a failure, including an ambiguous one
such as a connection reset after the server acted, goes back to the outbox, which
reconciles before trying again. Idempotent calls (Jira's search-before-create, edits,
reads) keep the policy's in-call retries. After a retryable failure the whole integration
pauses for the policy's backoff (or the server's ``Retry-After``): during an outage it
probes, it does not hammer.

Drift events need no reconciliation: their ids are deterministic and consumers deduplicate,
so a resend after a crash is harmless (the producer is idempotent within a session).

Payloads hold everything needed to render (the incident view and its window history), fixed
when the change was decided, so a resend renders the same message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol, TypeVar, cast

import orjson
from confluent_kafka import KafkaError, Message, Producer
from slack_sdk.web import WebClient

from anchorwatch.alerting.jira import JiraNotifier, connect
from anchorwatch.alerting.jira import outcome_of as jira_outcome
from anchorwatch.alerting.notify import (
    NotifyError,
    Permanent,
    PermanentError,
    Retryable,
    RetryableError,
    RetryPolicy,
    attempt,
    error_for,
)
from anchorwatch.alerting.render import (
    IncidentView,
    SlackMessage,
    WindowPoint,
    incident_label,
    jira_description,
    jira_labels,
    jira_resolved_comment,
    jira_summary,
    jira_update_comment,
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import JiraSection, RoutingSection, SlackSection
from anchorwatch.alerting.slack import SlackNotifier, SlackRef, SlackWebhookNotifier, web_client
from anchorwatch.alerting.slack import outcome_of as slack_outcome
from anchorwatch.alerting.store import Integration, OutboxEntry, Store
from anchorwatch.contracts import Reason, WindowAggregate, validate
from anchorwatch.kafkaio import client_config
from anchorwatch.settings import KafkaSettings

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcome = Literal["sent", "reconciled", "suppressed", "superseded", "dry_run"]

#: Operations that would be seen twice if repeated after an ambiguous failure.
NOT_IDEMPOTENT = frozenset({"chat.postMessage", "comment", "transition"})


# --------------------------------------------------------------------------- payloads


def view_to_json(view: IncidentView) -> dict[str, Any]:
    data = asdict(view)
    data["window"] = view.window.model_dump(mode="json", exclude_none=True)
    data["reasons"] = [r.model_dump(mode="json") for r in view.reasons]
    return data


def view_from_json(data: dict[str, Any]) -> IncidentView:
    values = dict(data)
    values["window"] = validate(WindowAggregate, values["window"])
    values["reasons"] = [validate(Reason, r) for r in values.get("reasons") or []]
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


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Delivered:
    outcome: Outcome
    refs: dict[str, Any] = field(default_factory=dict)  # incident references to store


class Delivery(Protocol):
    """One integration. ``send`` raises NotifyError (RetryableError / PermanentError);
    ``reconcile`` says whether an entry that may have been sent already was (None: not
    found, send it)."""

    integration: Integration

    def bind(self, store: Store) -> None: ...

    def send(self, entry: OutboxEntry) -> Delivered: ...

    def reconcile(self, entry: OutboxEntry) -> Delivered | None: ...


class BatchDelivery(Protocol):
    integration: Integration

    def bind(self, store: Store) -> None: ...

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]: ...


@dataclass(frozen=True)
class OutboxRetryPolicy(RetryPolicy):
    """The one retry policy, with ONE attempt for calls that are not idempotent (see
    NOT_IDEMPOTENT): the outbox retries those itself, after reconciling."""

    single_attempt: frozenset[str] = NOT_IDEMPOTENT

    def call(self, op: Callable[[], T], *, service: str, operation: str) -> T:
        if operation in self.single_attempt and self.max_attempts > 1:
            once = replace(self, max_attempts=1, single_attempt=frozenset())
            return once.call(op, service=service, operation=operation)
        return super().call(op, service=service, operation=operation)


def outbox_policy(policy: RetryPolicy) -> OutboxRetryPolicy:
    return OutboxRetryPolicy(
        max_attempts=policy.max_attempts,
        max_elapsed_s=policy.max_elapsed_s,
        base_delay_s=policy.base_delay_s,
        max_delay_s=policy.max_delay_s,
        jitter=policy.jitter,
        sleep=policy.sleep,
        clock=policy.clock,
        rand=policy.rand,
        metrics=policy.metrics,
    )


def _missing(integration: str, action: str, what: str) -> PermanentError:
    return PermanentError(integration, action, Permanent(what))


# --------------------------------------------------------------------------- Slack


def _message_signature(text: Any, blocks: Any) -> tuple[str, tuple[str, ...]]:
    """What identifies a message we posted: its text and the text of its blocks (Slack
    returns both as sent; it may add block ids)."""
    texts: list[str] = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), dict):
            texts.append(str(block["text"].get("text", "")))
        texts += [str(f.get("text", "")) for f in block.get("fields") or [] if isinstance(f, dict)]
        texts += [
            str(e.get("text", "")) for e in block.get("elements") or [] if isinstance(e, dict)
        ]
    return str(text or ""), tuple(texts)


class SlackDelivery:
    """Bot mode: parent message, thread replies, parent edits (``SlackNotifier``).

    Reconciliation reads the channel (``conversations.history`` with metadata, for the
    parent) and the thread (``conversations.replies``, for replies); the bot needs the
    ``channels:history`` (and ``groups:history`` for private channels) scope. When Slack
    cannot answer (a missing method or scope, a channel name it cannot resolve) the entry
    is sent again, which may duplicate that one message: configure channel ids, or let the
    service learn them from its first post to each channel, to close that gap."""

    integration: Integration = "slack"
    #: How far before the first attempt the channel history is searched (clock skew).
    SKEW_S = 120

    def __init__(
        self,
        notifier: SlackNotifier,
        client: WebClient,
        routing: RoutingSection,
        retry: RetryPolicy,
        *,
        max_pages: int = 10,
    ) -> None:
        self._notifier = notifier
        self._client = client
        self._routing = routing
        self._retry = retry
        self._max_pages = max_pages
        self._store: Store | None = None

    @classmethod
    def from_settings(
        cls, slack: SlackSection, routing: RoutingSection, retry: RetryPolicy
    ) -> SlackDelivery:
        client = web_client(slack)
        notifier = SlackNotifier(
            client,
            routing,
            retry,
            charts=slack.charts,
            chart_windows=slack.chart_windows,
            broadcast_resolution=slack.broadcast_resolution,
        )
        return cls(notifier, client, routing, retry)

    def bind(self, store: Store) -> None:
        self._store = store

    def _channel_id(self, channel: str) -> str:
        if self._store is not None and (known := self._store.meta_get(f"slack_channel:{channel}")):
            return known
        return channel

    def _ref(self, entry: OutboxEntry) -> SlackRef:
        if entry.refs.slack_channel is None or entry.refs.slack_ts is None:
            raise _missing("slack", entry.action, "no thread: the parent message was not posted")
        return SlackRef(entry.refs.slack_channel, entry.refs.slack_ts)

    def send(self, entry: OutboxEntry) -> Delivered:
        note = Note.of(entry)
        if entry.action == "open":
            ref = self._notifier.open(note.view)
            channel = self._routing.channel_for(note.view.doc_type, note.view.severity)
            if self._store is not None and channel != ref.channel:
                self._store.meta_set(f"slack_channel:{channel}", ref.channel)
            return Delivered("sent", {"slack_channel": ref.channel, "slack_ts": ref.ts})
        ref = self._ref(entry)
        if entry.action == "update":
            result = self._notifier.update(ref, note.view, note.history)
        else:
            result = self._notifier.resolve(ref, note.view)
        if result.problems:
            log.warning(
                "slack best-effort steps failed",
                extra={"incident_id": entry.incident_id, "problems": list(result.problems)},
            )
        return Delivered("sent")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        note = Note.of(entry)
        try:
            if entry.action == "open":
                return self._reconcile_parent(entry, note)
            return self._reconcile_reply(entry, note)
        except PermanentError as error:
            log.warning(
                "slack: cannot tell whether a message was posted; sending it again (it may "
                "show twice)",
                extra={"incident_id": entry.incident_id, "seq": entry.seq, "error": str(error)},
            )
            return None

    def _call(self, operation: str, fn: Callable[[], Any]) -> Any:
        return self._retry.call(
            lambda: attempt("slack", operation, fn, slack_outcome),
            service="slack",
            operation=operation,
        )

    def _reconcile_parent(self, entry: OutboxEntry, note: Note) -> Delivered | None:
        label = incident_label(note.view.incident_id)
        channel = self._channel_id(
            self._routing.channel_for(note.view.doc_type, note.view.severity)
        )
        since = (entry.first_attempt_ms or entry.consumed_ms) / 1000 - self.SKEW_S
        cursor: str | None = None
        for _ in range(self._max_pages):
            page = self._call(
                "conversations.history",
                partial(
                    self._client.conversations_history,
                    channel=channel,
                    oldest=f"{since:.6f}",
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                ),
            )
            for m in page.get("messages") or []:
                payload = (m.get("metadata") or {}).get("event_payload") or {}
                is_parent = m.get("thread_ts") in (None, m.get("ts"))
                if payload.get("incident_label") == label and is_parent:
                    found = str(page.get("channel") or channel)
                    return Delivered("reconciled", {"slack_channel": found, "slack_ts": m["ts"]})
            cursor = ((page.get("response_metadata") or {}).get("next_cursor")) or None
            if not cursor:
                break
        return None

    def _reconcile_reply(self, entry: OutboxEntry, note: Note) -> Delivered | None:
        ref = self._ref(entry)
        expected: SlackMessage = (
            slack_update(note.view) if entry.action == "update" else slack_resolved(note.view)
        )
        wanted = _message_signature(expected.text, expected.blocks)
        cursor: str | None = None
        for _ in range(self._max_pages):
            page = self._call(
                "conversations.replies",
                partial(
                    self._client.conversations_replies,
                    channel=ref.channel,
                    ts=ref.ts,
                    limit=200,
                    cursor=cursor,
                ),
            )
            for m in page.get("messages") or []:
                if m.get("ts") == ref.ts:
                    continue
                if _message_signature(m.get("text"), m.get("blocks")) == wanted:
                    self._edit_parent(ref, note)
                    return Delivered("reconciled")
            cursor = ((page.get("response_metadata") or {}).get("next_cursor")) or None
            if not cursor:
                break
        return None

    def _edit_parent(self, ref: SlackRef, note: Note) -> None:
        """The parent edit that may have been cut off with the crash; an edit is idempotent."""
        message = slack_parent(note.view)
        try:
            self._call(
                "chat.update",
                lambda: self._client.chat_update(
                    channel=ref.channel, ts=ref.ts, text=message.text, blocks=message.blocks
                ),
            )
        except NotifyError as error:
            log.warning("slack parent not updated", extra={"error": str(error)})


class SlackWebhookDelivery:
    """Webhook mode: one message per change. A webhook cannot read the channel, so an entry
    cut off by a crash mid-send is sent again (at least once)."""

    integration: Integration = "slack"

    def __init__(self, notifier: SlackWebhookNotifier) -> None:
        self._notifier = notifier

    def bind(self, store: Store) -> None:
        pass

    def send(self, entry: OutboxEntry) -> Delivered:
        view = Note.of(entry).view
        {"open": self._notifier.open, "update": self._notifier.update}.get(
            entry.action, self._notifier.resolve
        )(view)
        return Delivered("sent")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        return None


# --------------------------------------------------------------------------- Jira


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


class JiraDelivery:
    """One ticket per incident (``JiraNotifier``). Opening searches by the incident's hash
    label before creating, so it needs no reconciliation; comments are found again by
    their exact body, a resolution by the ticket's status."""

    integration: Integration = "jira"

    def __init__(
        self,
        notifier: JiraNotifier,
        client_factory: Callable[[], Any],
        settings: JiraSection,
        retry: RetryPolicy,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._notifier = notifier
        self._factory = client_factory
        self._client: Any = None
        self._settings = settings
        self._retry = retry
        self._clock_ms = clock_ms

    @classmethod
    def from_settings(
        cls,
        settings: JiraSection,
        retry: RetryPolicy,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> JiraDelivery:
        notifier = JiraNotifier(lambda: connect(settings), settings, retry, clock_ms=clock_ms)
        return cls(notifier, lambda: connect(settings), settings, retry, clock_ms=clock_ms)

    def bind(self, store: Store) -> None:
        pass

    def _key(self, entry: OutboxEntry) -> str:
        if entry.refs.jira_key is None:
            raise _missing("jira", entry.action, "no ticket: opening it failed")
        return entry.refs.jira_key

    def send(self, entry: OutboxEntry) -> Delivered:
        note = Note.of(entry)
        now = self._clock_ms()
        if entry.action == "open":
            ticket = self._notifier.open_or_reopen(note.view, note.history)
            # Opening counts as the first comment for the comment interval.
            return Delivered("sent", {"jira_key": ticket.key, "jira_last_comment_ms": now})
        key = self._key(entry)
        if entry.action == "update":
            last = 0 if note.force_comment else entry.refs.jira_last_comment_ms
            if self._notifier.comment(key, note.view, last_comment_ms=last):
                return Delivered("sent", {"jira_last_comment_ms": self._clock_ms()})
            return Delivered("suppressed")
        result = self._notifier.resolve(key, note.view)
        if result.error:
            raise _missing("jira", "resolve", result.error)
        return Delivered("sent")

    def _call(self, operation: str, fn: Callable[[Any], T]) -> T:
        def once() -> T:
            if self._client is None:
                self._client = self._factory()
            return fn(self._client)

        return self._retry.call(
            lambda: attempt("jira", operation, once, jira_outcome),
            service="jira",
            operation=operation,
        )

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        if entry.action == "open":
            return None  # open_or_reopen finds the ticket by its label before creating one
        note = Note.of(entry)
        key = self._key(entry)
        bodies = [str(c.body) for c in self._call("reconcile.comments", lambda c: c.comments(key))]
        if entry.action == "update":
            wanted = jira_update_comment(note.view)
            if any(_same_text(b, wanted) for b in bodies):
                return Delivered("reconciled", {"jira_last_comment_ms": self._clock_ms()})
            return None
        issue = self._call("reconcile.get", lambda c: c.issue(key, fields="status"))
        status = ((issue.raw or {}).get("fields") or {}).get("status") or {}
        if (status.get("statusCategory") or {}).get("key") == "done":
            return Delivered("reconciled")
        if not any(_same_text(b, jira_resolved_comment(note.view)) for b in bodies):
            return None
        # Commented, not transitioned: finish the resolution without a second comment.
        name = self._settings.resolve_transition
        transitions = self._call("transitions", lambda c: c.transitions(key))
        tid = next(
            (str(t["id"]) for t in transitions if str(t["name"]).lower() == name.lower()), None
        )
        if tid is None:
            names = [str(t["name"]) for t in transitions]
            raise _missing(
                "jira", "resolve", f"transition {name!r} not available on {key}; available: {names}"
            )
        self._call("transition", lambda c: c.transition_issue(key, tid))
        return Delivered("reconciled")


# --------------------------------------------------------------------------- drift events


class EventsDelivery:
    """ANCHOR_DRIFT_ALERT / _RESOLVED records, keyed by doc type, idempotent producer."""

    integration: Integration = "events"

    def __init__(self, kafka: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> None:
        self._topic = topic
        self._timeout_s = timeout_s
        self._producer = Producer(
            client_config(
                kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": int(timeout_s * 1000),
                },
            )
        )

    def bind(self, store: Store) -> None:
        pass

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]:
        results: dict[int, Delivered | NotifyError] = {}

        def done(entry_id: int) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, _msg: Message) -> None:
                if err is None:
                    results[entry_id] = Delivered("sent")
                else:
                    outcome = Permanent(str(err)) if err.fatal() else Retryable(str(err))
                    results[entry_id] = error_for("events", "produce", outcome)

            return callback

        for entry in entries:
            value = orjson.dumps(entry.payload["event"])
            while True:
                try:
                    self._producer.produce(
                        self._topic, value, entry.doc_type.encode(), on_delivery=done(entry.id)
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
        self._producer.flush(self._timeout_s + 5)
        for entry in entries:
            results.setdefault(
                entry.id, RetryableError("events", "produce", Retryable("not acknowledged in time"))
            )
        return results

    def close(self) -> None:
        self._producer.flush(self._timeout_s)


# --------------------------------------------------------------------------- dry run


class DryRunDelivery:
    """Sends nothing: logs what would be sent (a JSON line per entry) and marks it done."""

    def __init__(
        self,
        integration: Integration,
        routing: RoutingSection,
        jira: JiraSection,
    ) -> None:
        self.integration = integration
        self._routing = routing
        self._jira = jira

    def bind(self, store: Store) -> None:
        pass

    def describe(self, entry: OutboxEntry) -> dict[str, Any]:
        if self.integration == "events":
            return {"topic_key": entry.doc_type, "event": entry.payload["event"]}
        note = Note.of(entry)
        view = note.view
        if self.integration == "slack":
            render = {"open": slack_parent, "update": slack_update, "resolve": slack_resolved}
            message = render[entry.action](view)
            out: dict[str, Any] = {"text": message.text, "blocks": message.blocks}
            if entry.action == "open":
                out["channel"] = self._routing.channel_for(view.doc_type, view.severity)
            return out
        if entry.action == "open":
            return {
                "summary": jira_summary(view, self._jira.summary_template),
                "description": jira_description(view, note.history),
                "labels": [*jira_labels(view), *self._jira.extra_labels],
                "priority": self._jira.priorities.get(view.severity),
            }
        if entry.action == "update":
            return {"comment": jira_update_comment(view), "forced": note.force_comment}
        return {
            "comment": jira_resolved_comment(view),
            "transition": self._jira.resolve_transition,
        }

    def send(self, entry: OutboxEntry) -> Delivered:
        log.info(
            "dry run: would send",
            extra={
                "integration": self.integration,
                "action": entry.action,
                "kind": entry.kind,
                "incident_id": entry.incident_id,
                "seq": entry.seq,
                "would_send": self.describe(entry),
            },
        )
        return Delivered("dry_run")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        return None


# --------------------------------------------------------------------------- the drainer


class TokenBucket:
    """At most ``rate`` starts per second on average, ``burst`` at once."""

    def __init__(self, rate: float | None, burst: int, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._at = clock()

    def wait_s(self) -> float:
        """0 and a token taken, or how long to wait before asking again."""
        if self._rate is None:
            return 0.0
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate


CrashHook = Callable[[str, str], None]


class Drainer:
    """Drains one integration's outbox entries, in order per incident."""

    def __init__(
        self,
        delivery: Delivery | BatchDelivery,
        store: Store,
        retry: RetryPolicy,
        metrics: ServiceMetrics,
        *,
        rate_per_s: float | None = None,
        burst: int = 1,
        batch_size: int = 200,
        clock: Callable[[], float] = time.time,
        crash: CrashHook = lambda point, integration: None,
    ) -> None:
        self.integration: Integration = delivery.integration
        self._batch: BatchDelivery | None = None
        self._single: Delivery | None = None
        if hasattr(delivery, "send_batch"):
            self._batch = cast(BatchDelivery, delivery)
        else:
            self._single = delivery
        delivery.bind(store)
        self._store = store
        self._retry = retry
        self._metrics = metrics
        self._bucket = TokenBucket(rate_per_s, burst, clock)
        self._batch_size = batch_size
        self._clock = clock
        self._crash = crash
        self._failures = 0  # consecutive retryable failures: the integration's backoff
        self.paused_until = 0.0
        self.wake = threading.Event()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def pending(self) -> int:
        n = self._store.pending_counts()[self.integration]
        self._metrics.outbox_pending.labels(self.integration).set(n)
        return n

    def drain_once(self, stop: threading.Event | None = None) -> float | None:
        """Handle every entry due now. Returns how long to wait before the next round
        (None: nothing left that will be due without new work)."""
        while stop is None or not stop.is_set():
            now = self._clock()
            if now < self.paused_until:
                return self.paused_until - now
            entries = self._store.due(self.integration, self._now_ms(), self._batch_size)
            if not entries:
                break
            if self._batch is not None:
                self._send_batch(self._batch, entries)
                continue
            assert self._single is not None
            for entry in entries:
                if stop is not None and stop.is_set():
                    return None
                if (wait := self._bucket.wait_s()) > 0:
                    return wait
                self._process(self._single, entry)
                if self._clock() < self.paused_until:
                    break
        due = self._store.next_due_ms(self.integration)
        if due is None:
            return None
        return max(due / 1000 - self._clock(), 0.0)

    def run(self, stop: threading.Event) -> None:
        """The sender thread: drain, then sleep until something is due or new work arrives."""
        counted = 0.0
        while not stop.is_set():
            try:
                wait = self.drain_once(stop)
                if time.monotonic() - counted > 0.5:
                    self.pending()
                    counted = time.monotonic()
            except Exception:  # a bug or a broken state file: say so, keep the thread alive
                log.exception("sender failed", extra={"integration": self.integration})
                wait = 5.0
            self.wake.wait(1.0 if wait is None else min(max(wait, 0.005), 1.0))
            self.wake.clear()

    # ----------------------------------------------------------------- one entry

    def _finish(self, entry: OutboxEntry, delivered: Delivered) -> None:
        now_ms = self._now_ms()
        self._store.mark_done(
            [entry.id],
            delivered.outcome,
            now_ms,
            incident_id=entry.incident_id,
            refs=delivered.refs,
        )
        self._metrics.notifications.labels(self.integration, delivered.outcome).inc()
        if delivered.outcome in ("sent", "dry_run"):
            latency = max(now_ms - entry.consumed_ms, 0) / 1000
            self._metrics.latency.labels(self.integration).observe(latency)
        log.info(
            "notification",
            extra={
                "integration": self.integration,
                "action": entry.action,
                "kind": entry.kind,
                "incident_id": entry.incident_id,
                "seq": entry.seq,
                "outcome": delivered.outcome,
            },
        )

    def _process(self, delivery: Delivery, entry: OutboxEntry) -> None:
        try:
            if entry.kind == "progress" and self._store.has_later_update(entry):
                self._finish(entry, Delivered("superseded"))
                return
            if entry.status == "attempting":
                found = delivery.reconcile(entry)
                if found is not None:
                    self._finish(entry, found)
                    self._failures = 0
                    return
            self._store.mark_attempting([entry.id], self._now_ms())
            self._crash("send_before", self.integration)
            delivered = delivery.send(entry)
            self._crash("send_after", self.integration)
            self._finish(entry, delivered)
            self._failures = 0
        except NotifyError as error:
            if error.retryable:
                self._later([entry], error.retry_after_s, str(error))
            else:
                self._fail(entry, str(error))
        except Exception as exc:  # not a remote failure: our bug or bad data; back off
            log.exception(
                "sending failed unexpectedly",
                extra={"integration": self.integration, "incident_id": entry.incident_id},
            )
            self._later([entry], None, f"{type(exc).__name__}: {exc}")

    def _send_batch(self, delivery: BatchDelivery, entries: Sequence[OutboxEntry]) -> None:
        self._store.mark_attempting([e.id for e in entries], self._now_ms())
        self._crash("send_before", self.integration)
        results = delivery.send_batch(entries)
        self._crash("send_after", self.integration)
        retry: list[OutboxEntry] = []
        last_error: NotifyError | None = None
        for entry in entries:
            result = results[entry.id]
            if isinstance(result, Delivered):
                self._finish(entry, result)
            elif result.retryable:
                retry.append(entry)
                last_error = result
            else:
                self._fail(entry, str(result))
        if retry and last_error is not None:
            self._later(retry, last_error.retry_after_s, str(last_error))
        elif not retry:
            self._failures = 0

    def _fail(self, entry: OutboxEntry, error: str) -> None:
        self._store.mark_failed(entry.id, error, self._now_ms())
        self._metrics.notifications.labels(self.integration, "failed").inc()
        log.error(
            "notification failed for good",
            extra={
                "integration": self.integration,
                "action": entry.action,
                "incident_id": entry.incident_id,
                "seq": entry.seq,
                "error": error,
            },
        )

    def _later(
        self, entries: Sequence[OutboxEntry], retry_after_s: float | None, error: str
    ) -> None:
        """Reschedule, and pause the whole integration for the backoff: during an outage
        every entry would fail the same way."""
        self._failures += 1
        delay = self._retry.delay(self._failures, retry_after_s)
        self.paused_until = self._clock() + delay
        self._store.reschedule([e.id for e in entries], int(self.paused_until * 1000), error)
        self._metrics.notifications.labels(self.integration, "retry").inc(len(entries))
        log.warning(
            "notification rescheduled",
            extra={
                "integration": self.integration,
                "entries": len(entries),
                "retry_in_s": round(delay, 3),
                "error": error,
            },
        )
