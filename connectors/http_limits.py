"""What a client's bytes can hold of an ingest worker, and how what they get wrong is logged.

- ``GuardedRunner``: aiohttp's AppRunner with a cap on open connections (connections past it
  get a raw 503 and are closed at once) and a deadline on each request head (a raw 408);
- ``connection_cap``: that cap, lowered when the open-file limit cannot be raised to fit it;
- ``ByteBudget``: the bytes of request bodies in memory at once;
- ``HttpLog``: aiohttp's server logger, HTTP a client got wrong as one line without a
  traceback;
- ``Throttle``: at most one log line per kind every ten seconds, with a count of the lines
  left out;
- ``TokenBucket``, ``GatewayBuckets``: each gateway's own rate limit (429 past it).

The service that uses them, its routes and its answers: ``anchorwatch.connectors.server``.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import sys
import time
from collections import Counter
from typing import Any, Final

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from prometheus_client import Counter as MetricCounter

# The service's log lines keep one logger name, whichever of its modules writes them.
log = logging.getLogger("anchorwatch.connectors.server")

# File descriptors a worker needs besides its clients' connections (Kafka, logs, metrics).
_SPARE_FDS: Final = 256
_LOG_EVERY_S: Final = 10.0


def _raw_response(status: str, error: str, headers: str = "") -> bytes:
    """A complete HTTP/1.1 response for a connection that is closed right after it, written
    where no aiohttp request exists (before or instead of one)."""
    body = orjson.dumps({"error": error})
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    )
    return head.encode() + body


class Throttle:
    """At most one log line per kind every ``interval_s``; the ones in between are counted."""

    def __init__(self, interval_s: float = _LOG_EVERY_S) -> None:
        self._interval = interval_s
        self._next: dict[str, float] = {}
        self._skipped: Counter[str] = Counter()

    def __call__(self, kind: str) -> int | None:
        """None: stay quiet. Otherwise log now, with this many lines left out before."""
        now = time.monotonic()
        if now < self._next.get(kind, 0.0):
            self._skipped[kind] += 1
            return None
        self._next[kind] = now + self._interval
        return self._skipped.pop(kind, 0)


class ByteBudget:
    """Bytes of request bodies in memory at once: a request takes its share before reading
    its body and gives it back once answered (synchronously: a cancelled request cannot
    keep its share)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._waiters: list[asyncio.Future[None]] = []

    async def acquire(self, size: int) -> None:
        while self.free < size:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.free -= size

    def release(self, size: int) -> None:
        self.free += size
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:  # each checks again whether its share fits
            if not waiter.done():
                waiter.set_result(None)


class HttpLog(logging.Logger):
    """aiohttp's server logger: HTTP a client got wrong (aiohttp answers it 400) is one
    warning line without a traceback; anything else keeps its traceback. Both throttled."""

    def __init__(self, throttle: Throttle, refused: MetricCounter) -> None:
        super().__init__(f"{log.name}.http")
        self.parent = log
        self._throttle = throttle
        self._refused = refused

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if not self._client_fault(exc) and (skipped := self._throttle("http_error")) is not None:
            self.error(msg, *args, exc_info=exc_info, extra={"skipped": skipped}, **kwargs)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        # aiohttp reports non-HTTP bytes (TLS to a plain port) on a first request here.
        if not self._client_fault(kwargs.get("exc_info")):
            super().debug(msg, *args, **kwargs)

    def _client_fault(self, exc: object) -> bool:
        if not isinstance(exc, HttpProcessingError):
            return False
        self._refused.labels("bad_http").inc()
        if (skipped := self._throttle("bad_http")) is not None:
            self.warning(
                "malformed HTTP request refused",
                extra={"status": exc.code, "error": str(exc.message)[:200], "skipped": skipped},
            )
        return True


class Guard:
    """One worker's limits on its clients' connections."""

    def __init__(
        self, header_timeout_s: float, max_connections: int, refused: MetricCounter
    ) -> None:
        self.header_timeout_s = header_timeout_s
        self.max_connections = max_connections
        self.refused = refused
        self.throttle = Throttle()

    def note(self, cause: str, message: str, **extra: Any) -> None:
        self.refused.labels(cause).inc()
        if (skipped := self.throttle(cause)) is not None:
            log.warning(message, extra={**extra, "skipped": skipped})


_FULL: Final = _raw_response(
    "503 Service Unavailable",
    "too many open connections (ingest.max_connections); retry shortly",
    "Retry-After: 1\r\n",
)
_HEAD_LATE: Final = _raw_response(
    "408 Request Timeout",
    "the request line and headers did not arrive in time (ingest.header_timeout_s)",
)


class _GuardedHandler(RequestHandler):
    """aiohttp's connection handler with a connection cap and a deadline on each request
    head. aiohttp waits for a head on ``_waiter`` (its own keep-alive check reads it too)."""

    def __init__(self, guard: Guard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        manager = self._manager
        if manager is not None and len(manager.connections) >= self._guard.max_connections:
            assert isinstance(transport, asyncio.Transport)
            transport.write(_FULL)
            transport.close()
            self._manager = None  # never registered: connection_lost has nothing to undo
            self._guard.note(
                "max_connections",
                "connection refused: too many open connections",
                limit=self._guard.max_connections,
            )
            return
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if data and self._head_timer is None and self._awaiting_head():
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)
        if self._head_timer is not None and not self._awaiting_head():
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        waiter = self._waiter
        return (waiter is None or not waiter.done()) and not self._messages

    def _arm(self) -> None:
        self._head_timer = self._loop.call_later(self._guard.header_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        waiter = self._waiter
        transport = self.transport
        if transport is None or waiter is None or waiter.done() or self._messages:
            return  # a request is being handled: the body timeout applies
        transport.write(_HEAD_LATE)
        self.force_close()
        self._guard.note(
            "header_timeout",
            "connection closed: request head not received in time",
            timeout_s=self._guard.header_timeout_s,
        )


class _GuardedServer(web.Server):
    def __init__(self, guard: Guard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self._guard, self, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """aiohttp's AppRunner serving through ``_GuardedServer``."""

    def __init__(self, app: web.Application, guard: Guard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._guard = guard

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # starts and freezes the app
        return _GuardedServer(
            self._guard,
            plain.request_handler,
            request_factory=plain.request_factory,
            loop=asyncio.get_running_loop(),
            **self._kwargs,
        )


def connection_cap(wanted: int) -> int:
    """``wanted``, or less when the open-file limit cannot be raised to fit it (and the
    spare descriptors the worker needs besides)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + _SPARE_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    cap = max(1, soft - _SPARE_FDS)
    log.warning(
        "ingest.max_connections lowered to fit the open-file limit",
        extra={"max_connections": wanted, "open_file_limit": soft, "effective": cap},
    )
    return cap


class TokenBucket:
    """One gateway's rate: ``per_s`` sustained, ``burst`` at once. A request is let in while
    a token is left; what it costs is taken after (an events limit learns its count once the
    body is read), so the bucket may go into debt, and the next request waits it out."""

    def __init__(self, per_s: float, burst: int) -> None:
        self.per_s = per_s
        self.burst = burst
        self.tokens = float(burst)
        self._stamp = time.monotonic()

    def retune(self, per_s: float, burst: int) -> None:
        self._refill()
        self.per_s, self.burst = per_s, burst
        self.tokens = min(self.tokens, float(burst))

    def wait_s(self) -> float:
        """0: let it in; else the seconds until a token is back."""
        self._refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.per_s

    def take(self, cost: float) -> None:
        self.tokens -= cost

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self._stamp) * self.per_s)
        self._stamp = now


class GatewayBuckets:
    """A token bucket per gateway with a rate limit, so one gateway's flood spends only its
    own tokens. Buckets follow the credentials file: retuned when a rate changes, dropped
    when a gateway or its limit goes (names come from the trusted file: bounded)."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def bucket(self, name: str, per_s: float, burst: int) -> TokenBucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = TokenBucket(per_s, burst)
        elif (bucket.per_s, bucket.burst) != (per_s, burst):
            bucket.retune(per_s, burst)
        return bucket

    def keep_only(self, names: set[str]) -> None:
        for gone in set(self._buckets) - names:
            del self._buckets[gone]
