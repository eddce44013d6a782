"""Probing a running service as an outsider would: the TCP ports a process (and its
children) listens on, as the OS reports them, the routes each service's HTTP server has
(read from the server's own code, not written out by hand), and every method on every
route sent without valid credentials, with what each answered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import requests
from aiohttp import web

from anchorwatch.alerting import http as alerting_http
from anchorwatch.alerting import silence_api, slack_actions

#: Every method a client may send; the state-changing ones are all but GET, HEAD, OPTIONS.
METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
READ_ONLY = frozenset({"GET", "HEAD", "OPTIONS"})
#: Paths no service has: each must answer 404 (or 405) whatever the method.
UNKNOWN_PATHS = (
    "/",
    "/admin",
    "/api",
    "/api/v1",
    "/api/v2/silences",
    "/v1",
    "/v1/unknown",
    "/debug/pprof",
    "/metrics/../v1/events",
    "/%2e%2e/api/v1/silences",
    "/slack",
    "/slack/commands",
)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports the process ``pid`` and its descendants listen on (any address)."""
    parent = psutil.Process(pid)
    ports: set[int] = set()
    for process in [parent, *parent.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        ports |= {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return ports


def aiohttp_routes(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route of an aiohttp application; ``*`` for any method."""
    found: set[tuple[str, str]] = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix")
        assert isinstance(path, str), f"a route of a kind the probe does not know: {info}"
        found.add((route.method, path))
    return found


def alerting_paths() -> set[str]:
    """The paths the alerting service's endpoint answers, read from its code: the GET routes
    of the request handler (its ``routes`` table), the prefixes it hands to the silences API
    and to Slack, and the silences API's own paths."""
    do_get = _handler_class().do_GET
    cells = dict(
        zip(do_get.__code__.co_freevars, (c.cell_contents for c in do_get.__closure__), strict=True)
    )
    registry_routes = set(cells["routes"])
    prefix = silence_api.PREFIX
    return registry_routes | {
        alerting_http.API_PREFIX.rstrip("/"),
        prefix,
        f"{prefix}/",
        f"{prefix}/some-silence-id",
        f"{prefix}/some-silence-id?author=probe",
        f"{prefix}?all=1",
        alerting_http.SLACK_PATH,
        slack_actions.PATH,
    }


def alerting_methods() -> set[str]:
    """The methods the alerting endpoint's handler implements (``do_<METHOD>``)."""
    handler = _handler_class()
    return {name[3:] for name in dir(handler) if name.startswith("do_")}


def _handler_class() -> Any:
    endpoint = alerting_http.Endpoint(
        "127.0.0.1", 0, _registry(), lambda: (True, {}), lambda: (True, {})
    )
    try:
        return endpoint._httpd.RequestHandlerClass
    finally:
        endpoint.stop()


def _registry() -> Any:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


@dataclass(frozen=True)
class Answer:
    port: int
    method: str
    path: str
    credential: str
    status: int
    body: str

    def __str__(self) -> str:
        return (
            f"{self.method} :{self.port}{self.path} ({self.credential}) -> {self.status} "
            f"{self.body[:120]!r}"
        )


#: (credential name, the headers it adds) for a request to ``path``.
Credentials = Callable[[str, str, bytes], Iterable[tuple[str, Mapping[str, str]]]]


def probe(
    port: int,
    paths: Iterable[str],
    body_for: Callable[[str], bytes],
    credentials: Credentials,
    methods: Iterable[str] = METHODS,
) -> list[Answer]:
    """Every method on every path of ``http://127.0.0.1:port``, once per credential."""
    answers: list[Answer] = []
    with requests.Session() as http:
        for path in sorted(set(paths)):
            for method in methods:
                body = b"" if method in ("GET", "HEAD", "OPTIONS") else body_for(path)
                for name, headers in credentials(method, path, body):
                    r = http.request(
                        method,
                        f"http://127.0.0.1:{port}{path}",
                        data=body or None,
                        headers=dict(headers),
                        timeout=10,
                        allow_redirects=False,
                    )
                    answers.append(Answer(port, method, path, name, r.status_code, r.text))
    return answers


class CliService:
    """``python -m anchorwatch <argv>`` with ``env``, its output in ``log``."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "anchorwatch", *argv],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        self._log.close()
