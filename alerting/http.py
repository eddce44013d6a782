"""The service's HTTP endpoint: ``/metrics`` (Prometheus text format), ``/healthz`` (the
process works: its threads are alive and the consumer loop turns) and ``/readyz`` (it can
do its job: state restored, baselines loaded, verdict partitions assigned, Kafka reachable).
Probes answer 200 or 503 with a small JSON body saying why. Under ``/api/``, the silences
API (``silence_api.py``), when the service has one; ``POST /slack/interactions``, the Slack
app's button clicks (``slack_actions.py``), the same way.

A stdlib threaded server on a daemon thread: the service is thread-based, and three GET
routes and one small JSON API need no framework. Not prometheus_client's server (it answers
every path with metrics, has no probes, and gzips or switches to OpenMetrics by the
request's headers) nor aiohttp's (an event loop in a thread beside blocking probes, for the
same few routes).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from anchorwatch.errors import AnchorwatchError

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, dict[str, Any]]]
#: (method, path and query, headers, body) -> (status, content type, body): the silences API,
#: and Slack's interactions.
Api = Callable[[str, str, Mapping[str, str], bytes], tuple[int, str, bytes]]
API_PREFIX = "/api/"
SLACK_PATH = "/slack/interactions"
#: The largest request body read; a larger one is refused unread.
MAX_BODY = 64 * 1024


class Endpoint:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        health: Probe,
        ready: Probe,
        api: Api | None = None,
        slack: Api | None = None,
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
            "/healthz": lambda: _probe(health),
            "/readyz": lambda: _probe(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "anchorwatch-alerting"

            def do_GET(self) -> None:
                if self.path.startswith(API_PREFIX):
                    self._api()
                    return
                route = routes.get(self.path.split("?", 1)[0])
                try:
                    status, content_type, body = (
                        route() if route else (404, "text/plain", b"not found\n")
                    )
                except Exception as exc:  # a probe that fails says so instead of hanging
                    log.exception("endpoint error")
                    status, content_type, body = 500, "text/plain", f"{exc}\n".encode()
                self._answer(status, content_type, body)

            def do_POST(self) -> None:
                self._api()

            def do_DELETE(self) -> None:
                self._api()

            def _api(self) -> None:
                handler = api if self.path.startswith(API_PREFIX) else None
                if self.path.split("?", 1)[0] == SLACK_PATH:
                    handler = slack
                if handler is None:
                    self._answer(404, "text/plain", b"not found\n")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY:
                    self.close_connection = True  # the body is left unread
                    self._answer(413, "text/plain", b"Content-Length: 0 to 65536 bytes\n")
                    return
                body = self.rfile.read(length)
                try:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    answer = handler(self.command, self.path, headers, body)
                except Exception as exc:  # one bad call never takes the endpoint down
                    log.exception("api error")
                    answer = 500, "text/plain", f"{exc}\n".encode()
                self._answer(*answer)

            def _answer(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format % args)

        try:
            self._httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise AnchorwatchError(
                f"cannot listen on {host}:{port} for /metrics: {exc.strerror or exc} "
                "(set ANCHORWATCH_ALERTING__METRICS_PORT)"
            ) from None
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host if isinstance(host, str) else host.decode()}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="alerting-endpoint",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _probe(probe: Probe) -> tuple[int, str, bytes]:
    ok, detail = probe()
    body = json.dumps({"ok": ok, **detail}, default=str).encode() + b"\n"
    return (200 if ok else 503), "application/json", body
