"""`anchorwatch ingest serve`: the HTTP front door (aiohttp).

Routes:

- ``POST /v1/kong``: Kong http-log bodies (an entry, or an array of entries when batching);
- ``POST /v1/events``: NDJSON snapshot events in the project's schema;
- ``GET /healthz`` (the process answers), ``GET /readyz`` (Kafka reachable, not shutting
  down), ``GET /metrics`` (Prometheus).

Answers: 200 once Kafka has acknowledged every record of the request (the events in the
snapshots topic, the rejects in the dead-letter topic), with counts and the first few
reasons; 400 for a body that is not JSON at all, or HTTP that aiohttp's parser refuses
(a line or header over 8190 bytes, more than 128 headers); 401 without a valid bearer
token; 429 with ``Retry-After`` past the gateway's own rate limit; 408 when the head or
the body is not in within its timeout; 413 for a body over
``ingest.max_body_bytes``; 503 with ``Retry-After`` when Kafka is unreachable, the producer
queue is full, a record was not acknowledged, the service is shutting down, the bodies in
memory leave no room (``ingest.max_bodies_bytes``) within ``ack_timeout_s``, or the worker
already has ``ingest.max_connections`` connections open.

With ``ingest.tls_cert_file`` and ``tls_key_file`` the service serves HTTPS only; with
``tls_client_ca_file`` too, a client without a certificate chaining to that CA is refused at
the TLS handshake, and a gateway may be identified by its certificate's subject CN
(``client_cert_cn`` in the credentials file) instead of a bearer token.

Writers need a bearer token: a gateway's secret from ``ingest.credentials_file`` (reread
when it changes; the gateway's name becomes the events' source, its doc types and rate
limit apply: ``credentials.py``) or the legacy shared token (``ingest.auth_token`` /
``auth_token_file``, gateway ``default``, source ``ingest.source``). The service does not
start with none of them unless told ``ingest.insecure_no_auth`` (``--insecure-no-auth``), and
then says so at every start (a warning, and the gauge ``anchorwatch_ingest_insecure_no_auth``
at 1).

A client's bytes cannot hold the worker's resources: a connection must deliver each request
head within ``header_timeout_s`` and its body within ``body_timeout_s``, connections past the
cap are closed at once, and what clients get wrong (and the accept loop's errors when out of
file descriptors) is logged as one line without a traceback, at most once per ten seconds
per kind with a count of the lines left out. Those limits: ``connectors/http_limits.py``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import ssl
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import Counter as MetricCounter
from prometheus_client import multiprocess as prometheus_multiprocess

from anchorwatch import logs
from anchorwatch.connectors import credentials as creds
from anchorwatch.connectors.gate import Gate
from anchorwatch.connectors.http_limits import (
    ByteBudget,
    Guard,
    GuardedRunner,
    HttpLog,
    Throttle,
    connection_cap,
)
from anchorwatch.connectors.kong import KongFormat
from anchorwatch.connectors.metrics import IngestMetrics
from anchorwatch.connectors.producer import AckingProducer, Unavailable
from anchorwatch.connectors.records import (
    Batch,
    BodyError,
    Format,
    kong_body,
    ndjson_body,
    reason_label,
    reason_summary,
)
from anchorwatch.connectors.settings import IngestOptions, IngestSettings
from anchorwatch.connectors.validation import TimeWindow
from anchorwatch.errors import AnchorwatchError
from anchorwatch.settings import SettingsError

log = logging.getLogger(__name__)

_MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
_RETRY_NOTE: Final = (
    "retry the whole request; records already written may then appear twice in the topic, "
    "and event_id is the key to deduplicate them"
)


def kong_format(settings: IngestSettings) -> KongFormat:
    o = settings.ingest
    return KongFormat(
        doc_type=o.doc_type_header,
        snapshot_status=o.snapshot_status_header,
        anchor_count=o.anchor_count_header,
        snapshot_log=o.snapshot_log_header,
        request_id=o.request_id_header,
        doc_type_locations=tuple(o.doc_type_header_locations),
        measurement_locations=tuple(o.measurement_header_locations),
        redact=frozenset(o.redact_headers),
        model_from=o.model_from,
    )


def time_window(settings: IngestSettings, now_ms: int) -> TimeWindow:
    """The event times accepted at ``now_ms``."""
    o = settings.ingest
    return TimeWindow(now_ms, round(o.max_future_skew_s * 1000), round(o.max_event_age_s * 1000))


def tls_context(options: IngestOptions) -> ssl.SSLContext | None:
    """HTTPS with ``ingest.tls_cert_file`` and ``tls_key_file``; with ``tls_client_ca_file``
    too, client certificates chaining to it are required at the handshake (mutual TLS).
    None: plain HTTP. A file that does not load: SettingsError naming the setting."""
    if options.tls_cert_file is None or options.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(options.tls_cert_file, options.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(
            f"ingest.tls_cert_file / tls_key_file: cannot load {options.tls_cert_file} with "
            f"{options.tls_key_file}: {exc}"
        ) from None
    if options.tls_client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=options.tls_client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(
                f"ingest.tls_client_ca_file: cannot load {options.tls_client_ca_file}: {exc}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


class IngestService:
    """The aiohttp application and the producer behind it; ``start``/``stop`` for tests and
    for ``serve``. Refuses to be built (SettingsError) without a bearer token unless the
    settings say ``ingest.insecure_no_auth``, and (CredentialsError) with a credentials file
    that does not load."""

    def __init__(
        self,
        settings: IngestSettings,
        *,
        registry: CollectorRegistry | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.settings = settings
        options = settings.ingest
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = IngestMetrics(self.registry)
        # No token, no credentials, no insecure_no_auth: SettingsError, naming the settings;
        # credentials that do not load: CredentialsError, naming the file and the field.
        self.gate = Gate(options, self.metrics)
        self._format = kong_format(settings)
        # Summaries made only for a service that writes them (a microsecond an event).
        self._summaries = bool(settings.topics.summaries)
        self._max_body = options.max_body_bytes
        self._retry_after = str(options.retry_after_s)
        self._reuse_port = reuse_port
        self.metrics.insecure_no_auth.set(1 if self.gate.insecure else 0)
        self.refused = MetricCounter(
            "anchorwatch_ingest_connections_refused_total",
            "Connections closed or requests refused for what the client's bytes did: cause "
            "max_connections, header_timeout, body_timeout, bad_http.",
            ["cause"],
            registry=self.registry,
        )
        self._body_timeout = options.body_timeout_s
        self._bodies = ByteBudget(options.max_bodies_bytes)
        self._room_timeout = options.ack_timeout_s
        self._http_throttle = Throttle()
        self.producer = AckingProducer(
            settings.kafka, settings.topics, options, self.metrics, source=options.source
        )
        self._stopping = False
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def app(self) -> web.Application:
        # client_max_size: aiohttp refuses to read more than this (chunked bodies included).
        app = web.Application(client_max_size=self._max_body)
        app.router.add_post("/v1/kong", self._handler("kong"))
        app.router.add_post("/v1/events", self._handler("ndjson"))
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/readyz", self._ready)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> int:
        """Connect the producer, bind, listen. Returns the bound port."""
        await self.producer.start()
        return await self.listen()

    async def listen(self) -> int:
        """Bind and listen (the producer started or not). Returns the bound port."""
        o = self.settings.ingest
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        guard = Guard(o.header_timeout_s, connection_cap(o.max_connections), self.refused)
        self._runner = GuardedRunner(
            self.app(),
            guard,
            access_log=None,
            shutdown_timeout=o.shutdown_timeout_s,
            keepalive_timeout=o.keepalive_timeout_s,
            logger=HttpLog(self._http_throttle, self.refused),
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            o.host,
            o.port,
            reuse_port=self._reuse_port or None,
            ssl_context=tls_context(o),
        )
        await site.start()
        address = self._runner.addresses[0]
        self.port = int(address[1])
        self.gate.start()
        if self.gate.insecure:
            log.warning(
                "INSECURE: accepting unauthenticated writers (--insecure-no-auth): anyone "
                "who reaches this port can write events; for local demos and tests only "
                "(set ANCHORWATCH_INGEST__AUTH_TOKEN or _AUTH_TOKEN_FILE instead)",
                extra={"host": o.host, "port": self.port},
            )
        log.info(
            "ingest service listening",
            extra={
                "host": o.host,
                "port": self.port,
                "auth": not self.gate.insecure,
                "tls": "mutual" if o.tls_client_ca_file else bool(o.tls_cert_file),
                "gateways": self.gate.gateways,
                "snapshots_topic": self.settings.topics.snapshots,
                "summaries_topic": self.settings.topics.summaries or None,
            },
        )
        return self.port

    async def stop(self) -> None:
        """Graceful: unready, stop listening, let in-flight requests finish (they wait for
        Kafka's acknowledgements), then flush the producer."""
        self._stopping = True
        self.gate.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        left = self.producer.close(self.settings.ingest.shutdown_timeout_s)
        log.info("ingest service stopped", extra={"records_left": left})

    # ------------------------------------------------------------------ handlers

    def _handler(self, fmt: Format) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            response = await self._ingest(request, fmt)
            elapsed = time.perf_counter() - started
            self.metrics.requests.labels(fmt, str(response.status)).observe(elapsed)
            return response

        return handle

    async def _ingest(self, request: web.Request, fmt: Format) -> web.Response:
        gateway = self.gate.identify(request)
        if gateway is None:
            return _json(
                401,
                {"error": "missing, wrong or expired bearer token (Authorization: Bearer <token>)"},
                {"WWW-Authenticate": 'Bearer realm="anchorwatch-ingest"'},
            )
        # Before the body is read or takes room: a gateway past its rate costs next to nothing.
        if (refused := self.gate.rate_limited(gateway)) is not None:
            return refused
        if request.content_length is not None and request.content_length > self._max_body:
            return self._too_large(request.content_length)
        # Bodies in memory at once are bounded (a rejected batch costs about three times its
        # size until Kafka acknowledges its dead letters); past it a request waits its turn.
        share = self._max_body if request.content_length is None else request.content_length
        try:
            async with asyncio.timeout(self._room_timeout):
                await self._bodies.acquire(share)
        except TimeoutError:
            return self._unavailable(
                "memory",
                {"error": "too many request bodies in memory (ingest.max_bodies_bytes)",
                 "written": 0},
            )  # fmt: skip
        try:
            return await self._read_and_produce(request, fmt, gateway)
        finally:
            self._bodies.release(share)

    async def _read_and_produce(
        self, request: web.Request, fmt: Format, gateway: creds.Gateway
    ) -> web.Response:
        try:
            async with asyncio.timeout(self._body_timeout):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(None)
        except TimeoutError:
            return self._body_late()
        except ConnectionError:  # the client left mid-body: nobody to answer, nothing to log
            return _json(400, {"error": "the connection closed before the body was complete"})
        self.metrics.bytes_in.labels(fmt).inc(len(body))
        window = time_window(self.settings, time.time_ns() // 1_000_000)
        try:
            summaries = self._summaries
            if fmt == "kong":
                batch = kong_body(
                    body, self._format, source=gateway.source, window=window, summaries=summaries
                )
            else:
                batch = ndjson_body(body, source=gateway.source, window=window, summaries=summaries)
        except BodyError as exc:
            return _json(400, {"error": str(exc)})
        self.gate.admit(batch, gateway, ndjson=fmt == "ndjson")
        for header, count in batch.notes.ignored.items():
            self.metrics.headers_ignored.labels(header).inc(count)
        for cause, count in batch.notes.request_id_fallbacks.items():
            self.metrics.request_id_fallbacks.labels(cause).inc(count)
        return await self._produce(fmt, batch, gateway.source)

    async def _produce(self, fmt: Format, batch: Batch, source: str) -> web.Response:
        records = self.metrics.records
        try:
            delivery = await self.producer.send(batch.accepted, batch.rejected, source=source)
        except Unavailable as exc:
            records.labels(fmt, "failed").inc(len(batch))
            return self._unavailable(exc.cause, {"error": str(exc), "written": 0})
        if not delivery.ok:
            records.labels(fmt, "failed").inc(len(batch))
            return self._unavailable(
                "delivery_failed",
                {
                    "error": f"Kafka did not acknowledge {delivery.failed} of "
                    f"{delivery.records} records",
                    "errors": delivery.errors,
                    "written": delivery.records - delivery.failed,
                    "note": _RETRY_NOTE,
                },
            )
        records.labels(fmt, "accepted").inc(len(batch.accepted))
        if batch.rejected:
            records.labels(fmt, "rejected").inc(len(batch.rejected))
            for reason, count in Counter(reason_label(r.error) for r in batch.rejected).items():
                self.metrics.rejected.labels(fmt, reason).inc(count)
            log.info(
                "records dead-lettered",
                extra={
                    "format": fmt,
                    "accepted": len(batch.accepted),
                    "rejected": len(batch.rejected),
                    "first_reason": str(batch.rejected[0].error)[:300],
                },
            )
        return _json(
            200,
            {
                "accepted": len(batch.accepted),
                "rejected": len(batch.rejected),
                "already_written": delivery.already_written,
                "reasons": reason_summary(batch.rejected),
            },
        )

    def _too_large(self, length: int | None) -> web.Response:
        size = f"{length} bytes" if length is not None else "the body"
        return _json(
            413,
            {
                "error": f"{size} exceeds the limit of {self._max_body} bytes "
                "(ingest.max_body_bytes); send smaller batches"
            },
        )

    def _body_late(self) -> web.Response:
        self.refused.labels("body_timeout").inc()
        if (skipped := self._http_throttle("body_timeout")) is not None:
            log.warning(
                "request refused: body not received in time",
                extra={"timeout_s": self._body_timeout, "skipped": skipped},
            )
        response = _json(
            408,
            {"error": f"the body did not arrive within {self._body_timeout:g} s "
             "(ingest.body_timeout_s)"},
        )  # fmt: skip
        response.force_close()
        return response

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # Out of descriptors, asyncio's accept loop reports every failed accept with a
        # traceback, many times a second: one line per interval is enough.
        exc = context.get("exception")
        message = str(context.get("message", ""))
        if isinstance(exc, OSError) and "accept" in message:
            if (skipped := self._http_throttle("accept")) is not None:
                log.error(
                    "cannot accept connections",
                    extra={"error": str(exc), "errno": exc.errno, "skipped": skipped},
                )
        elif self._http_throttle(f"loop:{message[:80]}") is not None:
            loop.default_exception_handler(context)

    def _unavailable(self, cause: str, body: dict[str, Any]) -> web.Response:
        self.metrics.unavailable.labels(cause).inc()
        body["retry_after_s"] = int(self._retry_after)
        return _json(503, body, {"Retry-After": self._retry_after})

    async def _health(self, _request: web.Request) -> web.Response:
        return _json(200, {"status": "ok"})

    async def _ready(self, _request: web.Request) -> web.Response:
        if self._stopping:
            return _json(503, {"ready": False, "reason": "shutting down"})
        if not self.producer.ready:
            return _json(503, {"ready": False, "reason": "Kafka is unreachable"})
        return _json(200, {"ready": True})

    async def _metrics(self, _request: web.Request) -> web.Response:
        registry = self.registry
        if os.environ.get(_MULTIPROC_ENV):
            registry = CollectorRegistry()
            prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


# ---------------------------------------------------------------------- entry points


async def _run_until_signalled(settings: IngestSettings, *, reuse_port: bool) -> None:
    service = IngestService(settings, reuse_port=reuse_port)
    # Each request allocates tens of thousands of short-lived objects (parsed JSON, none in
    # cycles): collect the young generation less often, and keep the startup heap out of
    # full collections (the CPU it saves: docs/benchmarks.md).
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    await stop.wait()
    log.info("stopping: finishing in-flight requests, then flushing")
    await service.stop()


def _worker(settings: IngestSettings, log_level: str) -> None:
    logs.configure(log_level)
    # The parent forwards SIGTERM; a terminal's Ctrl-C reaches every process of the group.
    asyncio.run(_run_until_signalled(settings, reuse_port=True))


def serve(settings: IngestSettings, *, log_level: str = "INFO") -> None:
    """Run the service until SIGTERM/SIGINT; with ``ingest.workers`` > 1, as that many
    processes sharing the port. Refuses to start (SettingsError) without a bearer token
    unless ``ingest.insecure_no_auth``."""
    # No token and no insecure_no_auth: refuse here, once, before any worker starts; the
    # same for a credentials file that does not load.
    settings.ingest.writer_token()
    if settings.ingest.credentials_file is not None:
        creds.load(settings.ingest.credentials_file)
    tls_context(settings.ingest)  # certificates that do not load: refused here, once
    workers = settings.ingest.workers
    if workers == 1:
        asyncio.run(_run_until_signalled(settings, reuse_port=False))
        return
    if settings.ingest.port == 0:
        raise AnchorwatchError("ingest.port: several workers need a fixed port, not 0")
    own_dir = None
    if not os.environ.get(_MULTIPROC_ENV):
        # Workers write their metrics here; any of them serves the sum on /metrics.
        own_dir = tempfile.mkdtemp(prefix="anchorwatch-ingest-metrics-")
        os.environ[_MULTIPROC_ENV] = own_dir
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_worker, args=(settings, log_level), name=f"ingest-{i}")
        for i in range(workers)
    ]
    try:
        for p in processes:
            p.start()
        _wait_for_workers(processes)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
            del os.environ[_MULTIPROC_ENV]


def _wait_for_workers(processes: list[Any]) -> None:
    stopping = False
    crashed: list[str] = []

    def forward(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for p in processes:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(p.is_alive() for p in processes):
            for p in processes:
                p.join(0.2)
                if not stopping and not p.is_alive() and p.exitcode:
                    # One worker died: stop the rest rather than serve at reduced capacity.
                    log.error("ingest worker exited", extra={"worker": p.name, "code": p.exitcode})
                    crashed.append(p.name)
                    forward(signal.SIGTERM, None)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for p in processes:
            if p.pid is not None:
                prometheus_multiprocess.mark_process_dead(p.pid)  # type: ignore[no-untyped-call]
    if crashed:
        raise AnchorwatchError(f"ingest worker {crashed[0]} failed; see its log lines above")
