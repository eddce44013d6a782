"""Slack in the outbox: sending an entry (the parent message, a thread reply, the
resolution) and reconciling one that may have been sent already.

Reconciliation reads the channel (``conversations.history`` with metadata, for the parent)
and the thread (``conversations.replies``, for replies, found by their exact content); the
bot needs the ``channels:history`` (and ``groups:history`` for private channels) scope. When
Slack cannot answer (a missing method or scope, a channel name it cannot resolve) the entry
is sent again, which may duplicate that one message: configure channel ids, or let the
service learn them from its first post to each channel, to close that gap.

A reply is posted once; the parent edit after it is retried by the outbox: a retryable
failure leaves the entry to be reconciled, which finds the reply and edits the parent again.
An update's drift chart is an entry of its own (action ``chart``, the seq after its reply's):
a crash or a lost response between the reply and the chart leaves the chart entry to be
sent, and one cut off mid-upload is found again in the thread by its file name (unique per
entry) before it is uploaded, so each update gets its chart once. Webhook mode cannot read
the channel, so an entry cut off by a crash mid-send is sent again (at least once).
"""

from __future__ import annotations

import logging
from typing import Any

from anchorwatch.alerting.integrations.base import Delivered, Integration, Sender, missing
from anchorwatch.alerting.integrations.slack.notifier import (
    ParentStyle,
    SlackNotifier,
    SlackRef,
    SlackResult,
    SlackWebhookNotifier,
    chart_filename,
    thread_file_names,
)
from anchorwatch.alerting.integrations.slack.render import (
    SlackMessage,
    slack_acknowledged,
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.notify import Caller, NotifyError, PermanentError
from anchorwatch.alerting.payload import Note
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.settings import AlertingSettings, RoutingSection, SlackSection
from anchorwatch.alerting.store import OutboxEntry, Store

log = logging.getLogger(__name__)

RENDER = {
    "open": slack_parent,
    "update": slack_update,
    "resolve": slack_resolved,
    "acknowledge": slack_acknowledged,
}


def message_signature(text: Any, blocks: Any) -> tuple[str, tuple[str, ...]]:
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


def _next_cursor(page: Any) -> str | None:
    return ((page.get("response_metadata") or {}).get("next_cursor")) or None


class SlackSender(Sender):
    """Bot mode: parent message, thread replies, parent edits (``SlackNotifier``)."""

    integration = "slack"
    #: How far before the first attempt the channel history is searched (clock skew).
    SKEW_S = 120

    def __init__(
        self, notifier: SlackNotifier, routing: RoutingSection, *, max_pages: int = 10
    ) -> None:
        self._notifier = notifier
        self._routing = routing
        self._max_pages = max_pages
        self._store: Store | None = None

    @classmethod
    def from_settings(
        cls, slack: SlackSection, routing: RoutingSection, caller: Caller
    ) -> SlackSender:
        return cls(SlackNotifier.from_settings(slack, routing, caller), routing)

    def bind(self, store: Store) -> None:
        self._store = store

    def _routed(self, note: Note) -> str:
        """The channel the incident's parent message goes to."""
        return self._routing.channel_for(note.view.doc_type, note.view.severity)

    def rate_key(self, entry: OutboxEntry) -> str:
        """Slack limits posting per channel: the thread's, or, before the parent is posted,
        the routed one (as the id learned from an earlier post, so both name one bucket)."""
        if entry.refs.slack_channel is not None:
            return entry.refs.slack_channel
        return self._channel_id(self._routed(Note.of(entry)))

    def _channel_id(self, channel: str) -> str:
        if self._store is not None and (known := self._store.meta_get(f"slack_channel:{channel}")):
            return known
        return channel

    def _ref(self, entry: OutboxEntry) -> SlackRef:
        if entry.refs.slack_channel is None or entry.refs.slack_ts is None:
            raise missing("slack", entry.action, "no thread: the parent message was not posted")
        return SlackRef(entry.refs.slack_channel, entry.refs.slack_ts)

    def _chart(self, entry: OutboxEntry, note: Note) -> tuple[SlackRef, str] | None:
        """Where the entry's chart goes and its file name (None: no windows to draw, or not
        a drift incident: a group or the watchdog's notice has no drift chart)."""
        points = self._notifier.chart_points(note.history)
        if not points or note.view.kind != "drift":
            return None
        label = incident_label(note.view.incident_id)
        return self._ref(entry), chart_filename(label, points, entry.seq)

    def send(self, entry: OutboxEntry) -> Delivered:
        note = Note.of(entry)
        if entry.action == "chart":
            if (chart := self._chart(entry, note)) is None:
                return Delivered("suppressed")
            ref, name = chart
            points = self._notifier.chart_points(note.history)
            store = self._store
            self._notifier.upload_chart(
                ref,
                note.view,
                points,
                name,
                # Still this instance's to send: else it shares nothing (a fenced write).
                before_share=(lambda: store.check_fence([entry.id])) if store else lambda: None,
            )
            return Delivered("sent")
        if entry.action == "open":
            ref = self._notifier.open(note.view)
            channel = self._routed(note)
            if self._store is not None and channel != ref.channel:
                self._store.meta_set(f"slack_channel:{channel}", ref.channel)
            return Delivered("sent", {"slack_channel": ref.channel, "slack_ts": ref.ts})
        ref = self._ref(entry)
        result: SlackResult
        if entry.action == "update":
            # The chart follows as its own entry.
            result = self._notifier.update(ref, note.view, chart=False)
        elif entry.action == "acknowledge":
            result = self._notifier.acknowledge(ref, note.view)
        else:
            result = self._notifier.resolve(ref, note.view)
        if result.problems:
            log.warning(
                "slack best-effort steps failed",
                extra={"incident_id": entry.incident_id, "problems": list(result.problems)},
            )
        _retry_parent(result.parent_error)
        return Delivered("sent")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        note = Note.of(entry)
        try:
            if entry.action == "open":
                return self._reconcile_parent(entry, note)
            if entry.action == "chart":
                return self._reconcile_chart(entry, note)
            return self._reconcile_reply(entry, note)
        except PermanentError as error:
            log.warning(
                "slack: cannot tell whether a message was posted; sending it again (it may "
                "show twice)",
                extra={"incident_id": entry.incident_id, "seq": entry.seq, "error": str(error)},
            )
            return None

    def _reconcile_parent(self, entry: OutboxEntry, note: Note) -> Delivered | None:
        label = incident_label(note.view.incident_id)
        channel = self._channel_id(self._routed(note))
        since = (entry.first_attempt_ms or entry.consumed_ms) / 1000 - self.SKEW_S
        cursor: str | None = None
        for _ in range(self._max_pages):
            page = self._notifier.history(channel, since, cursor)
            for m in page.get("messages") or []:
                payload = (m.get("metadata") or {}).get("event_payload") or {}
                is_parent = m.get("thread_ts") in (None, m.get("ts"))
                if payload.get("incident_label") == label and is_parent:
                    found = str(page.get("channel") or channel)
                    return Delivered("reconciled", {"slack_channel": found, "slack_ts": m["ts"]})
            if not (cursor := _next_cursor(page)):
                break
        return None

    def _reconcile_reply(self, entry: OutboxEntry, note: Note) -> Delivered | None:
        ref = self._ref(entry)
        expected: SlackMessage = RENDER[entry.action](note.view)
        wanted = message_signature(expected.text, expected.blocks)
        cursor: str | None = None
        for _ in range(self._max_pages):
            page = self._notifier.replies(ref, cursor)
            for m in page.get("messages") or []:
                if m.get("ts") == ref.ts:
                    continue
                if message_signature(m.get("text"), m.get("blocks")) == wanted:
                    # The parent edit may have been cut off with the crash.
                    _retry_parent(self._notifier.edit_parent(ref, note.view))
                    return Delivered("reconciled")
            if not (cursor := _next_cursor(page)):
                break
        return None

    def _reconcile_chart(self, entry: OutboxEntry, note: Note) -> Delivered | None:
        """Found when a file of the entry's name is shared in the thread (an upload cut off
        before ``files.completeUploadExternal`` shared nothing: it is uploaded again)."""
        if (chart := self._chart(entry, note)) is None:
            return None
        ref, name = chart
        cursor: str | None = None
        for _ in range(self._max_pages):
            page = self._notifier.replies(ref, cursor)
            if name in thread_file_names(page):
                return Delivered("reconciled")
            if not (cursor := _next_cursor(page)):
                break
        return None


def _retry_parent(error: NotifyError | None) -> None:
    """A parent edit that may work later is the outbox's to retry (the entry is then
    reconciled: its reply is found, not posted again); a permanent failure is left logged."""
    if error is not None and error.retryable:
        raise error


class SlackWebhookSender(Sender):
    """Webhook mode: one full-state message per change."""

    integration = "slack"

    def __init__(self, notifier: SlackWebhookNotifier) -> None:
        self._notifier = notifier

    def send(self, entry: OutboxEntry) -> Delivered:
        if entry.action == "chart":  # left from bot mode: a webhook cannot upload files
            return Delivered("suppressed")
        view = Note.of(entry).view
        send = {"open": self._notifier.open, "update": self._notifier.update}
        send["acknowledge"] = self._notifier.update  # one full-state message, naming who
        send.get(entry.action, self._notifier.resolve)(view)
        return Delivered("sent")


def describe(settings: AlertingSettings, entry: OutboxEntry) -> dict[str, Any]:
    note = Note.of(entry)
    view = note.view
    if entry.action == "chart":
        points = note.history[-settings.slack.chart_windows :]
        if not points:
            return {"chart": None}
        name = chart_filename(incident_label(view.incident_id), points, entry.seq)
        return {"chart": name, "windows": len(points)}
    message = RENDER[entry.action](view)
    if entry.action == "open":
        style = ParentStyle.of(settings.slack, settings.routing)
        message = style.parent(view, buttons=settings.slack.buttons)
    out: dict[str, Any] = {"text": message.text, "blocks": message.blocks}
    if entry.action == "open":
        out["channel"] = settings.routing.channel_for(view.doc_type, view.severity)
    return out


def _sender(settings: AlertingSettings, caller: Caller) -> SlackSender | SlackWebhookSender:
    if settings.slack.mode == "webhook":
        notifier = SlackWebhookNotifier.from_settings(settings.slack, caller, settings.routing)
        return SlackWebhookSender(notifier)
    return SlackSender.from_settings(settings.slack, settings.routing, caller)


def _charts(settings: AlertingSettings, payload: dict[str, Any]) -> bool:
    s = settings.slack
    return s.mode == "bot" and s.charts and bool(payload.get("history"))


SLACK = Integration(
    name="slack",
    # A reopened incident continues its thread; each update's chart follows its reply.
    actions={
        "opened": "open",
        "reopened": "update",
        "updated": "update",
        "progress": "update",
        "resolved": "resolve",
        "chart": "chart",
        "acknowledged": "acknowledge",  # a reply naming who, and the parent edited
    },
    then={"reopened": "chart", "updated": "chart", "progress": "chart"},
    then_if=_charts,
    enabled=lambda settings: settings.slack.mode != "off",
    sender=_sender,
    describe=describe,
    rate_per_s=lambda settings: settings.alerting.slack_rate_per_s,  # per channel
    total_rate_per_s=lambda settings: settings.alerting.slack_workspace_rate_per_s,
)
