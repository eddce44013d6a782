"""What the local Slack and Jira share: a threaded HTTP server for tests and the CLI
(port 0: a free port), the request and response they pass around, and failure injection.

Faults: ``POST /_local/faults`` with one fault or a list (``method``: the protocol's name
of a call, ``*`` for any; ``status``, ``retry_after``, ``times`` (-1 for ever), ``error``,
``body`` replacing the answer, ``disconnect`` to drop the connection unanswered, with
``after`` once the call was carried out: a response lost on the way back; ``skip`` to let
that many matching calls through first; ``delay_s`` to answer only after that long, a
service that hangs);
``GET /_local/faults`` lists them, ``DELETE /_local/faults`` clears them. A faulted call is
answered by ``LocalServer.faulted``: the parts every protocol shares (the disconnect, the
``Retry-After`` header, a ``body`` override) here, the protocol's own error body in its
``fault_answer``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    disconnect: bool = False  # close the connection without answering

    @classmethod
    def json(cls, data: Any, status: int = 200, **headers: str) -> Response:
        return cls(status, json.dumps(data).encode(), headers=dict(headers))

    @classmethod
    def text(cls, text: str, status: int = 200, content_type: str = "text/plain") -> Response:
        return cls(status, text.encode(), content_type=f"{content_type}; charset=utf-8")


@dataclass
class Fault:
    """One injected failure, served for the next ``times`` matching calls (-1: for ever)."""

    method: str = "*"
    status: int = 500
    retry_after: float | None = None
    times: int = 1
    error: str | None = None
    body: Any = None
    disconnect: bool = False
    after: bool = False  # with disconnect: carry the call out first, then drop the answer
    hide_transition: str | None = None  # local Jira only: a workflow without this transition
    skip: int = 0  # matching calls let through before this fault applies
    delay_s: float = 0.0  # wait this long before answering (a hanging service)

    @classmethod
    def parse(cls, spec: Any) -> Fault:
        if not isinstance(spec, dict):
            raise ValueError("a fault is a JSON object")
        unknown = set(spec) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fault field(s): {sorted(unknown)}")
        fault = cls(**spec)
        if not isinstance(fault.status, int) or not 100 <= fault.status <= 599:
            raise ValueError("status: an HTTP status code")
        if not isinstance(fault.times, int) or fault.times == 0 or fault.times < -1:
            raise ValueError("times: a positive count, or -1 for ever")
        if not isinstance(fault.skip, int) or fault.skip < 0:
            raise ValueError("skip: a count of calls, 0 or more")
        if not isinstance(fault.delay_s, int | float) or not 0 <= fault.delay_s <= 600:
            raise ValueError("delay_s: seconds, 0 to 600")
        return fault


class Faults:
    """Thread-safe list of pending faults; the first that matches a call is used."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._faults]

    def take(self, method: str, *, kind: Callable[[Fault], bool] = lambda f: True) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method in ("*", method) and kind(fault):
                    if fault.skip > 0:
                        fault.skip -= 1
                        continue
                    if fault.times > 0:
                        fault.times -= 1
                        if fault.times == 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def active(self, kind: Callable[[Fault], bool]) -> list[Fault]:
        with self._lock:
            return [f for f in self._faults if kind(f)]


class LocalServer(ABC):
    """An HTTP server on a thread, for tests (port 0: a free port) and for the CLI."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.faults = Faults()
        self.lock = threading.RLock()
        handle = self._dispatch

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # answers in one go, no 40 ms delayed-ACK stalls
            server_version = "anchorwatch-local"

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(
                    self.command,
                    parts.path,
                    parse_qs(parts.query, keep_blank_values=True),
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                try:
                    response = handle(request)
                except Exception as exc:  # a bug here must answer, not hang the client
                    log.exception("local server error")
                    response = Response.text(f"local server error: {exc}", 500)
                if response.disconnect:
                    self.close_connection = True
                    return
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(response.body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format % args)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self._httpd.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    def start(self) -> Self:
        # A short poll interval: stop() returns in milliseconds, not half a second.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _dispatch(self, request: Request) -> Response:
        if request.path.startswith("/_local/faults"):
            return self._faults_endpoint(request)
        return self.handle(request)

    def _faults_endpoint(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.faults.clear()
            return Response.json({"ok": True})
        if request.method == "POST":
            try:
                spec = request.json()
                for item in spec if isinstance(spec, list) else [spec]:
                    self.faults.add(Fault.parse(item))
            except (ValueError, TypeError) as exc:
                return Response.json({"ok": False, "error": str(exc)}, 400)
            return Response.json({"ok": True, "faults": self.faults.snapshot()})
        return Response.json({"faults": self.faults.snapshot()})

    def faulted(
        self,
        method: str,
        carry_out: Callable[[bool], Response],
        *,
        note: Callable[[Fault], None] = lambda fault: None,
        kind: Callable[[Fault], bool] = lambda fault: True,
    ) -> Response:
        """Answer a call to ``method``: with the first pending fault that matches (``note``
        records it), else by ``carry_out``. A ``disconnect`` fault with ``after`` carries the
        call out (``carry_out(True)``: its answer will be dropped), then drops the connection:
        the client cannot tell whether it worked."""
        fault = self.faults.take(method, kind=kind)
        if fault is None:
            return carry_out(False)
        if fault.delay_s:
            time.sleep(fault.delay_s)
        if fault.disconnect and fault.after:
            carry_out(True)
            return Response(disconnect=True)
        note(fault)
        if fault.disconnect:
            return Response(disconnect=True)
        headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
        if fault.body is not None:
            body = fault.body if isinstance(fault.body, str) else json.dumps(fault.body)
            return Response(fault.status, body.encode(), headers=headers)
        return self.fault_answer(method, fault, headers)

    @abstractmethod
    def fault_answer(self, method: str, fault: Fault, headers: dict[str, str]) -> Response:
        """The protocol's own error answer for ``fault`` (no ``body`` override given)."""

    @abstractmethod
    def handle(self, request: Request) -> Response:
        """Answer one request (each local server speaks its own protocol)."""


def form_or_json(request: Request) -> dict[str, Any]:
    """The parameters of a Web API call: JSON body, form body and query string merged."""
    params: dict[str, Any] = {k: v[-1] for k, v in request.query.items()}
    content_type = request.headers.get("content-type", "")
    if "json" in content_type:
        data = request.json()
        if not isinstance(data, dict):
            raise ValueError("JSON body must be an object")
        params.update(data)
    elif request.body:
        form = parse_qs(request.body.decode("utf-8"), keep_blank_values=True)
        params.update({k: v[-1] for k, v in form.items()})
    return params
