"""Slack: the incident as a thread (bot token) or as plain messages (incoming webhook).

Bot mode: ``open`` posts the parent message (Block Kit plus a plain-text fallback) to the
routed channel; ``update`` replies in the thread, edits the parent to show the current state
(``chat.update``) and uploads a drift chart into the thread (``files_upload_v2``:
``files.getUploadURLExternal``, upload, ``files.completeUploadExternal`` with ``thread_ts``);
``resolve`` replies (also shown in the channel) and edits the parent once more. The
service uploads each chart as an outbox entry of its own (``upload_chart``, named by
``chart_filename`` so that ``replies`` finds it again: see ``sender.py``).

Every HTTP call goes through the ``Caller`` it is given (in the service one attempt each: the
outbox retries); slack_sdk's own retry handlers are switched off so nothing else retries.
A ``200 {"ok": false}`` is an error: permanent, except Slack's transient error codes.
Within ``update``/``resolve`` only the thread reply is essential: once it is posted, a
failing parent edit or chart upload is logged and reported in the result instead of raised,
so a caller that retries a failed ``update`` never posts the same reply twice. ``history``
and ``replies`` read the channel and a thread back, for the outbox to reconcile with.
"""

from __future__ import annotations

import http.client
import logging
import re
import urllib.error
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web import SlackResponse, WebClient
from slack_sdk.webhook import WebhookClient

from anchorwatch.alerting.integrations.slack.chart import chart_alt_text, chart_title, render_chart
from anchorwatch.alerting.integrations.slack.render import (
    DEFAULT_HEADLINE_TEMPLATE,
    DEFAULT_TEXT_TEMPLATE,
    SlackMessage,
    slack_acknowledged,
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.notify import (
    Caller,
    NotifyError,
    Ok,
    Permanent,
    Retryable,
    attempt,
    classify,
    error_for,
    failure,
)
from anchorwatch.alerting.render import IncidentView, WindowPoint, incident_label
from anchorwatch.alerting.routing import NO_ROUTE
from anchorwatch.alerting.settings import RoutingSection, SlackSection

log = logging.getLogger(__name__)

SERVICE = "slack"
#: ``ok: false`` errors that Slack documents as temporary.
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
ChartRenderer = Callable[[Sequence[WindowPoint], str], bytes]


@dataclass(frozen=True)
class ParentStyle:
    """How parent messages are drawn: the routes (owner, runbook) and the templates."""

    routing: RoutingSection | None = None
    text_template: str = DEFAULT_TEXT_TEMPLATE
    headline_template: str = DEFAULT_HEADLINE_TEMPLATE

    @classmethod
    def of(cls, slack: SlackSection, routing: RoutingSection | None) -> ParentStyle:
        return cls(routing, slack.text_template, slack.headline_template)

    def parent(self, incident: IncidentView, *, buttons: bool = False) -> SlackMessage:
        route = self.routing.route_for(incident.doc_type) if self.routing else NO_ROUTE
        return slack_parent(
            incident,
            buttons=buttons,
            route=route,
            text_template=self.text_template,
            headline_template=self.headline_template,
        )


@dataclass(frozen=True)
class SlackRef:
    """Where the incident's thread lives: the channel id and the parent message's ts."""

    channel: str
    ts: str


@dataclass(frozen=True)
class SlackResult:
    """What ``update``/``resolve`` did. ``problems`` names the best-effort steps that failed."""

    reply_ts: str
    parent_updated: bool
    chart_uploaded: bool = False
    problems: tuple[str, ...] = ()
    parent_error: NotifyError | None = None  # why the parent was not edited


def _header(headers: Any, name: str) -> str | None:
    for key, value in dict(headers or {}).items():
        if key.lower() == name.lower():
            return str(value[0] if isinstance(value, list) else value)
    return None


def slack_outcome(exc: Exception) -> Retryable | Permanent | None:
    """The outcome of a failed slack_sdk call; None for exceptions that are our bugs."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        data = response.data if isinstance(response.data, dict) else {}
        error = str(data.get("error") or "unknown_error")
        if response.status_code == 200:  # {"ok": false}
            detail = error
            if needed := data.get("needed"):
                detail += f" (needed scope: {needed})"
            if error in TRANSIENT_ERRORS:
                return Retryable(f"ok:false {detail}")
            return Permanent(f"ok:false {detail}")
        retry_after = _header(response.headers, "Retry-After")
        return failure(classify(response.status_code, error, retry_after), error)
    if isinstance(exc, urllib.error.HTTPError):  # the upload step's own request
        retry_after = _header(exc.headers, "Retry-After")
        return failure(classify(exc.code, str(exc.reason), retry_after), str(exc))
    if isinstance(exc, SlackRequestError):
        # files_upload_v2 reports a non-200 upload as "Failed to upload a file (status: N ..."
        if m := re.search(r"status: (\d{3})", str(exc)):
            return failure(classify(int(m.group(1)), "file upload failed"), str(exc))
        return Permanent(str(exc).splitlines()[0][:300])
    if isinstance(exc, urllib.error.URLError | OSError | http.client.HTTPException):
        return failure(classify(None, f"connection error: {exc}"), str(exc))
    return None


def _upload(client: WebClient, upload_url: str, png: bytes, issued: SlackResponse) -> SlackResponse:
    """The upload step, as files_upload_v2 makes it (the client's own transport); a non-200
    answer raises as files_upload_v2 does, so it is classified the same way."""
    result = client._upload_file(
        url=upload_url,
        data=png,
        logger=log,
        timeout=client.timeout,
        proxy=client.proxy,
        ssl=client.ssl,
    )
    if result.status != 200:
        raise SlackRequestError(
            f"Failed to upload a file (status: {result.status}, body: {result.body})"
        )
    return issued


class SlackNotifier:
    """Bot-token mode: one thread per incident."""

    def __init__(
        self,
        client: WebClient,
        routing: RoutingSection,
        retry: Caller,
        *,
        charts: bool = True,
        chart_windows: int = 30,
        broadcast_resolution: bool = True,
        chart_renderer: ChartRenderer | None = None,
        buttons: bool = False,
        style: ParentStyle | None = None,
    ) -> None:
        self._client = client
        self._style = style or ParentStyle(routing)
        self._buttons = buttons  # the parent's Acknowledge and Silence buttons
        self._routing = routing
        self._retry = retry
        self._charts = charts
        self._chart_windows = chart_windows
        self._broadcast = broadcast_resolution
        self._render_chart = chart_renderer or _default_chart

    @classmethod
    def from_settings(
        cls, slack: SlackSection, routing: RoutingSection, retry: Caller
    ) -> SlackNotifier:
        client = web_client(slack)
        return cls(
            client,
            routing,
            retry,
            charts=slack.charts,
            chart_windows=slack.chart_windows,
            broadcast_resolution=slack.broadcast_resolution,
            buttons=slack.buttons,
            style=ParentStyle.of(slack, routing),
        )

    def _call(self, operation: str, fn: Callable[[], SlackResponse]) -> SlackResponse:
        result: SlackResponse = self._retry.call(
            lambda: attempt(SERVICE, operation, fn, slack_outcome),
            service=SERVICE,
            operation=operation,
        )
        return result

    def _post(self, channel: str, message: SlackMessage, **extra: Any) -> SlackResponse:
        return self._call(
            "chat.postMessage",
            lambda: self._client.chat_postMessage(
                channel=channel,
                text=message.text,
                blocks=message.blocks,
                unfurl_links=False,
                unfurl_media=False,
                **extra,
            ),
        )

    def open(self, incident: IncidentView) -> SlackRef:
        """Post the parent message; returns where the thread lives."""
        channel = self._routing.channel_for(incident.doc_type, incident.severity)
        response = self._post(
            channel,
            self._style.parent(incident, buttons=self._buttons),
            metadata={
                "event_type": "anchorwatch_incident",
                "event_payload": {"incident_label": incident_label(incident.incident_id)},
            },
        )
        ref = SlackRef(str(response["channel"]), str(response["ts"]))
        log.info(
            "slack thread opened",
            extra={"incident_label": incident_label(incident.incident_id), "channel": ref.channel},
        )
        return ref

    def update(
        self,
        ref: SlackRef,
        incident: IncidentView,
        window_history: Sequence[WindowPoint] = (),
        *,
        chart: bool = True,
    ) -> SlackResult:
        """Reply in the thread (raises on failure: nothing was posted), then edit the parent
        and, with ``chart``, upload the chart (best effort: failures are logged and
        returned). The service uploads its charts as their own outbox entries
        (``upload_chart``), so it passes ``chart=False``."""
        reply = self._post(ref.channel, slack_update(incident), thread_ts=ref.ts)
        problems: list[str] = []
        error = self.edit_parent(ref, incident)
        if error is not None:
            problems.append(str(error))
        uploaded = False
        points = self.chart_points(window_history)
        if chart and self._charts and points:
            name = chart_filename(incident_label(incident.incident_id), points)
            uploaded = self._upload_chart(ref, incident, points, name, problems)
        return SlackResult(str(reply["ts"]), error is None, uploaded, tuple(problems), error)

    def chart_points(self, window_history: Sequence[WindowPoint]) -> list[WindowPoint]:
        """The windows a chart shows (none when charts are off)."""
        return list(window_history)[-self._chart_windows :] if self._charts else []

    def resolve(self, ref: SlackRef, incident: IncidentView) -> SlackResult:
        """The resolution reply (also shown in the channel), then the parent edited."""
        reply = self._post(
            ref.channel, slack_resolved(incident), thread_ts=ref.ts, reply_broadcast=self._broadcast
        )
        error = self.edit_parent(ref, incident)
        problems = (str(error),) if error is not None else ()
        return SlackResult(str(reply["ts"]), error is None, False, problems, error)

    def acknowledge(self, ref: SlackRef, incident: IncidentView) -> SlackResult:
        """Who acknowledged it, as a reply, then the parent edited (it names them)."""
        reply = self._post(ref.channel, slack_acknowledged(incident), thread_ts=ref.ts)
        error = self.edit_parent(ref, incident)
        problems = (str(error),) if error is not None else ()
        return SlackResult(str(reply["ts"]), error is None, False, problems, error)

    def edit_parent(self, ref: SlackRef, incident: IncidentView) -> NotifyError | None:
        """Show the incident's current state in its parent message (an edit is idempotent).
        A failure is logged and returned, not raised: the reply before it is what counts."""
        message = self._style.parent(incident, buttons=self._buttons)
        try:
            self._call(
                "chat.update",
                lambda: self._client.chat_update(
                    channel=ref.channel, ts=ref.ts, text=message.text, blocks=message.blocks
                ),
            )
        except NotifyError as error:
            log.error("slack parent not updated", extra={"error": str(error)})
            return error
        return None

    # ----------------------------------------------------------------- reading back

    def history(self, channel: str, oldest_s: float, cursor: str | None) -> SlackResponse:
        """One page of the channel's messages since ``oldest_s``, with their metadata
        (needs the ``channels:history`` scope, ``groups:history`` for private ones)."""
        return self._call(
            "conversations.history",
            partial(
                self._client.conversations_history,
                channel=channel,
                oldest=f"{oldest_s:.6f}",
                include_all_metadata=True,
                limit=200,
                cursor=cursor,
            ),
        )

    def replies(self, ref: SlackRef, cursor: str | None) -> SlackResponse:
        """One page of a thread: the parent, then its replies."""
        return self._call(
            "conversations.replies",
            partial(
                self._client.conversations_replies,
                channel=ref.channel,
                ts=ref.ts,
                limit=200,
                cursor=cursor,
            ),
        )

    def upload_chart(
        self,
        ref: SlackRef,
        incident: IncidentView,
        points: Sequence[WindowPoint],
        filename: str,
        *,
        before_share: Callable[[], None] = lambda: None,
    ) -> None:
        """Upload the chart into the thread as ``filename`` (raises NotifyError; a chart that
        cannot be rendered is a permanent failure). In files_upload_v2's three steps, each
        retried on its own, with ``before_share`` (the sender's fence) before the last:
        nothing is in the thread until ``files.completeUploadExternal``, so an instance that
        lost the incident while it uploaded (paused past its lease) shares nothing."""
        try:
            png = self._render_chart(points, chart_title(incident))
        except Exception as exc:  # our bug or odd data: retrying would fail the same way
            log.exception(
                "chart not rendered",
                extra={"incident_label": incident_label(incident.incident_id)},
            )
            raise error_for(SERVICE, "chart", Permanent(f"chart not rendered: {exc}")) from None
        client = self._client
        url = self._call(
            "files.getUploadURLExternal",
            lambda: client.files_getUploadURLExternal(
                filename=filename, length=len(png), alt_txt=chart_alt_text(incident, points)
            ),
        )
        self._call("upload", lambda: _upload(client, str(url["upload_url"]), png, url))
        before_share()
        self._call(
            "files.completeUploadExternal",
            lambda: client.files_completeUploadExternal(
                files=[{"id": url["file_id"], "title": chart_title(incident)}],
                channel_id=ref.channel,
                thread_ts=ref.ts,
            ),
        )

    def _upload_chart(
        self,
        ref: SlackRef,
        incident: IncidentView,
        points: Sequence[WindowPoint],
        filename: str,
        problems: list[str],
    ) -> bool:
        try:
            self.upload_chart(ref, incident, points, filename)
        except NotifyError as error:  # a chart is a nicety; never lose the update over it
            problems.append(str(error))
            log.error(
                "chart not uploaded",
                extra={
                    "incident_label": incident_label(incident.incident_id),
                    "error": str(error),
                },
            )
            return False
        return True


def chart_filename(label: str, points: Sequence[WindowPoint], seq: int | None = None) -> str:
    """The chart's file name: the incident's label, the last window shown and, for the
    service's charts, the outbox seq, so each upload is found again in the thread by it."""
    tail = "" if seq is None else f"-{seq}"
    return f"drift-{label}-{points[-1].window_start_ms}{tail}.png"


def thread_file_names(page: Any) -> list[str]:
    """The names of the files shared in one page of ``conversations.replies``."""
    names = []
    for m in page.get("messages") or []:
        for f in m.get("files") or []:
            if isinstance(f, dict) and f.get("name"):
                names.append(str(f["name"]))
    return names


def _default_chart(points: Sequence[WindowPoint], title: str) -> bytes:
    return render_chart(points, title=title)


class SlackWebhookNotifier:
    """Incoming-webhook mode: each change is one full-state message; no threads, no charts,
    no edits (a webhook cannot do them)."""

    def __init__(
        self, client: WebhookClient, retry: Caller, style: ParentStyle | None = None
    ) -> None:
        self._client = client
        self._retry = retry
        self._style = style or ParentStyle()

    @classmethod
    def from_settings(
        cls, slack: SlackSection, retry: Caller, routing: RoutingSection | None = None
    ) -> SlackWebhookNotifier:
        url = slack.webhook()
        if url is None:
            raise ValueError("slack.webhook_url: not set")
        client = WebhookClient(
            url.get_secret_value(), timeout=max(1, round(slack.timeout_s)), retry_handlers=[]
        )
        return cls(client, retry, ParentStyle.of(slack, routing))

    def _send(self, operation: str, message: SlackMessage) -> None:
        def once() -> None:
            response = attempt(
                SERVICE,
                operation,
                lambda: self._client.send(
                    text=message.text, blocks=message.blocks, unfurl_links=False
                ),
                slack_outcome,
            )
            retry_after = _header(response.headers, "Retry-After")
            result = classify(response.status_code, response.body, retry_after)
            if not isinstance(result, Ok):
                raise error_for(SERVICE, operation, result)

        self._retry.call(once, service=SERVICE, operation=operation)

    def open(self, incident: IncidentView) -> None:
        self._send("webhook.open", self._style.parent(incident))

    def update(self, incident: IncidentView) -> None:
        self._send("webhook.update", self._style.parent(incident))

    def resolve(self, incident: IncidentView) -> None:
        self._send("webhook.resolve", self._style.parent(incident))


def web_client(slack: SlackSection) -> WebClient:
    """The Web API client for these settings, without slack_sdk's own retries (the one retry
    policy is ours)."""
    token = slack.token()
    return WebClient(
        token=token.get_secret_value() if token else None,
        base_url=slack.api_url,
        timeout=max(1, round(slack.timeout_s)),
        retry_handlers=[],
    )
