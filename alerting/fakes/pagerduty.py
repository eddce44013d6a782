"""A local PagerDuty that answers the Events API v2 as PagerDuty does, keeps the alerts it
was sent by dedup_key, and takes injected failures. For tests and the demo, without a
PagerDuty account (``anchorwatch alerting local-pagerduty``).

``POST /v2/enqueue`` (JSON): ``202 {"status": "success", "message": "Event processed",
"dedup_key": ...}``; an invalid event ``400 {"status": "invalid event", "message": "Event
object is invalid", "errors": [...]}``. As PagerDuty: a ``trigger`` opens an alert unless one
with its dedup_key is open (triggered or acknowledged), to which it is added instead; an
``acknowledge`` or a ``resolve`` changes the open alert of its key, and without one is
accepted and does nothing; a resolved key triggered again opens a new alert. A routing key
must be 32 characters (and, when the server was given one, that one).

What it received: ``GET /_local/events`` (every accepted event, the routing key masked),
``/_local/alerts`` (the alerts, oldest first, each with its status and the events it got),
``/_local/requests``; ``POST /_local/reset``; a page for people at ``GET /``. Faults (see
``server.py``) under the method name ``enqueue``: ``{"method": "enqueue", "status": 429,
"times": 2}`` answers 429 as PagerDuty throttles, a 5xx as an outage, a 400 as an invalid
event.
"""

from __future__ import annotations

import html
import itertools
import time
import uuid
from typing import Any, Final

from anchorwatch.alerting.fakes.server import Fault, LocalServer, Request, Response

ACTIONS: Final = ("trigger", "acknowledge", "resolve")
SEVERITIES: Final = ("critical", "error", "warning", "info")
#: A 32-character key the local PagerDuty takes unless told to want another.
LOCAL_ROUTING_KEY: Final = "local0pagerduty0routing0key00000"


def event_errors(event: Any) -> list[str]:
    """What PagerDuty would refuse in an event (empty: it is valid)."""
    if not isinstance(event, dict):
        return ["Event object must be a JSON object"]
    errors = []
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("'routing_key' must be a 32 character string")
    action = event.get("event_action")
    if action not in ACTIONS:
        errors.append(f"'event_action' must be one of {', '.join(ACTIONS)}")
    dedup = event.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errors.append("'dedup_key' must be a string of 1 to 255 characters")
    if action != "trigger":
        if action in ACTIONS and dedup is None:
            errors.append("'dedup_key' is required for acknowledge and resolve events")
        return errors
    payload = event.get("payload")
    if not isinstance(payload, dict):
        return [*errors, "'payload' is missing or not an object"]
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary or len(summary) > 1024:
        errors.append("'payload.summary' must be a string of 1 to 1024 characters")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("'payload.source' is missing or blank")
    if payload.get("severity") not in SEVERITIES:
        errors.append(f"'payload.severity' must be one of {', '.join(SEVERITIES)}")
    return errors


class LocalPagerDuty(LocalServer):
    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, routing_key: str | None = None
    ) -> None:
        super().__init__(host, port)
        self.routing_key = routing_key  # when set, every event must carry exactly this key
        self._numbers = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    @property
    def enqueue_url(self) -> str:
        return f"{self.url}/v2/enqueue"

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/_local/"):
            return self._local(request)
        if request.path == "/v2/enqueue" and request.method == "POST":
            return self.faulted("enqueue", lambda _: self._enqueue(request), note=self._noted)
        if request.path == "/" and request.method == "GET":
            return Response.text(self._page(), content_type="text/html")
        return Response.text("not found", 404)

    def _record(self, status: int, error: str | None) -> None:
        self.requests.append({"method": "enqueue", "status": status, "error": error})

    def _noted(self, fault: Fault) -> None:
        with self.lock:
            self._record(fault.status, fault.error or "fault")

    def fault_answer(self, method: str, fault: Fault, headers: dict[str, str]) -> Response:
        body: dict[str, Any]
        if fault.status == 429:
            body = {
                "status": "throttle event",
                "message": "Requests for this service are arriving too quickly. "
                "Please retry later.",
            }
        elif fault.status == 400:
            body = {
                "status": "invalid event",
                "message": "Event object is invalid",
                "errors": [fault.error or "injected"],
            }
        else:
            body = {"status": "unavailable", "message": fault.error or "Internal Server Error"}
        return Response.json(body, fault.status, **headers)

    # ----------------------------------------------------------------- Events API

    def _enqueue(self, request: Request) -> Response:
        try:
            event = request.json()
        except (ValueError, UnicodeDecodeError):
            event = None
        errors = event_errors(event) if event is not None else ["Event object is not JSON"]
        if not errors and self.routing_key is not None and event["routing_key"] != self.routing_key:
            errors = ["'routing_key' is not an integration key of this account"]
        with self.lock:
            if errors:
                self._record(400, "; ".join(errors))
                body = {"status": "invalid event", "message": "Event object is invalid"}
                return Response.json({**body, "errors": errors}, 400)
            key = event.get("dedup_key") or uuid.uuid4().hex
            self._apply(event, key)
            self._record(202, None)
        return Response.json(
            {"status": "success", "message": "Event processed", "dedup_key": key}, 202
        )

    def _open_alert(self, key: str) -> dict[str, Any] | None:
        found = [a for a in self.alerts if a["dedup_key"] == key and a["status"] != "resolved"]
        return found[-1] if found else None

    def _apply(self, event: dict[str, Any], key: str) -> None:
        action = event["event_action"]
        shown = {**event, "routing_key": event["routing_key"][:4] + "…", "dedup_key": key}
        self.events.append({**shown, "received_at": time.time()})
        alert = self._open_alert(key)
        if action == "trigger" and alert is None:
            payload = event["payload"]
            alert = {
                "number": next(self._numbers),
                "dedup_key": key,
                "status": "triggered",
                "summary": payload["summary"],
                "severity": payload["severity"],
                "source": payload["source"],
                "statuses": ["triggered"],
                "events": [],
            }
            self.alerts.append(alert)
        elif alert is None:
            return  # acknowledge or resolve without an open alert: accepted, nothing to do
        elif action in ("acknowledge", "resolve"):
            alert["status"] = "acknowledged" if action == "acknowledge" else "resolved"
            alert["statuses"].append(alert["status"])
        alert["events"].append(action)

    # ----------------------------------------------------------------- inspection

    def _local(self, request: Request) -> Response:
        with self.lock:
            if request.path == "/_local/events":
                return Response.json({"events": self.events})
            if request.path == "/_local/alerts":
                return Response.json({"alerts": self.alerts})
            if request.path == "/_local/requests":
                return Response.json({"requests": self.requests})
            if request.path == "/_local/reset" and request.method == "POST":
                self.events.clear()
                self.alerts.clear()
                self.requests.clear()
                self.faults.clear()
                return Response.json({"ok": True})
        return Response.text("not found", 404)

    def _page(self) -> str:
        with self.lock:
            alerts = [dict(a) for a in self.alerts]
        rows = "".join(
            f"<tr><td>#{a['number']}</td><td>{html.escape(a['status'])}</td>"
            f"<td>{html.escape(a['severity'])}</td><td>{html.escape(a['summary'])}</td>"
            f"<td><code>{html.escape(a['dedup_key'])}</code></td>"
            f"<td>{html.escape(' → '.join(a['events']))}</td></tr>"
            for a in reversed(alerts)
        )
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>local PagerDuty</title>"
            "<style>body{font-family:sans-serif}td,th{padding:4px 8px;text-align:left}</style>"
            "</head><body><h1>local PagerDuty</h1><table><tr><th>alert</th><th>status</th>"
            "<th>severity</th><th>summary</th><th>dedup_key</th><th>events</th></tr>"
            f"{rows}</table></body></html>"
        )
