"""A local webhook receiver: records every JSON body POSTed to it (any path but
``/_local/``), answers ``200 ok``, and takes injected failures. For tests and the demo of
the webhook integration (``integrations/webhook.py``), whose bodies are Alertmanager's.

When given a token, a request without ``Authorization: Bearer <token>`` is answered 401.
A body that is not JSON is answered 400. What it received: ``GET /_local/bodies`` (each
body with its path, oldest first), ``/_local/alerts`` (Alertmanager's alerts by
fingerprint: the latest status and the statuses in order, as a receiver deduplicating on
fingerprint and status would keep them), ``/_local/requests``; ``POST /_local/reset``.
Faults (see ``server.py``) under the method name ``webhook``.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from anchorwatch.alerting.fakes.server import Fault, LocalServer, Request, Response


class LocalWebhook(LocalServer):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        super().__init__(host, port)
        self.token = token
        self.bodies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    @property
    def hook_url(self) -> str:
        return f"{self.url}/hooks/anchorwatch"

    def handle(self, request: Request) -> Response:
        if request.path.startswith("/_local/"):
            return self._local(request)
        if request.method != "POST":
            return Response.text("method not allowed", 405)
        return self.faulted("webhook", lambda _: self._receive(request), note=self._noted)

    def _record(self, path: str, status: int, error: str | None) -> None:
        self.requests.append({"path": path, "status": status, "error": error})

    def _noted(self, fault: Fault) -> None:
        with self.lock:
            self._record("", fault.status, fault.error or "fault")

    def fault_answer(self, method: str, fault: Fault, headers: dict[str, str]) -> Response:
        return Response(fault.status, (fault.error or "fault").encode(), "text/plain", headers)

    def _receive(self, request: Request) -> Response:
        with self.lock:
            if self.token is not None:
                given = request.headers.get("authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                    self._record(request.path, 401, "unauthorized")
                    return Response.text("unauthorized", 401)
            try:
                body = request.json()
            except (ValueError, UnicodeDecodeError):
                self._record(request.path, 400, "not JSON")
                return Response.text("body is not JSON", 400)
            self.bodies.append({"path": request.path, "body": body, "received_at": time.time()})
            self._record(request.path, 200, None)
        return Response.text("ok")

    def alerts(self) -> dict[str, dict[str, Any]]:
        """Alertmanager's alerts received, by fingerprint: the latest, and its statuses."""
        found: dict[str, dict[str, Any]] = {}
        with self.lock:
            bodies = [b["body"] for b in self.bodies]
        for body in bodies:
            alerts = body.get("alerts") if isinstance(body, dict) else None
            for alert in alerts if isinstance(alerts, list) else []:
                if not isinstance(alert, dict) or not isinstance(alert.get("fingerprint"), str):
                    continue
                seen = found.setdefault(alert["fingerprint"], {"statuses": []})
                seen["statuses"].append(alert.get("status"))
                seen["latest"] = alert
        return found

    def _local(self, request: Request) -> Response:
        if request.path == "/_local/alerts":
            return Response.json({"alerts": self.alerts()})
        with self.lock:
            if request.path == "/_local/bodies":
                return Response.json({"bodies": self.bodies})
            if request.path == "/_local/requests":
                return Response.json({"requests": self.requests})
            if request.path == "/_local/reset" and request.method == "POST":
                self.bodies.clear()
                self.requests.clear()
                self.faults.clear()
                return Response.json({"ok": True})
        return Response.text("not found", 404)
