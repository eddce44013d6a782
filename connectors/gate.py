"""Who is writing, and what they may: the ingest service's gate in front of each request.

``Gate`` answers, per request, which gateway its bearer token belongs to (a secret from
``ingest.credentials_file``, the legacy ``ingest.auth_token`` as gateway ``default``, or
anyone with ``insecure_no_auth``) or, without a token, its client certificate names (the
subject CN a gateway's ``client_cert_cn`` gives, with mutual TLS), whether that gateway
is past its own rate limit (429 with ``Retry-After``, before the body is read), and which of
its events are outside its doc types (dead letters naming the gateway and the doc type). It
keeps the credentials file fresh: a task checks it every ``ingest.credentials_poll_s``.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import math
import time
from typing import Any

import orjson
from aiohttp import web

from anchorwatch.connectors import credentials as creds
from anchorwatch.connectors.http_limits import GatewayBuckets
from anchorwatch.connectors.metrics import IngestMetrics
from anchorwatch.connectors.records import Batch, Rejected
from anchorwatch.connectors.settings import IngestOptions
from anchorwatch.contracts import ContractError, FieldProblem, SnapshotEvent

log = logging.getLogger("anchorwatch.connectors.server")


def out_of_scope(gateway: creds.Gateway, doc_type: str) -> ContractError:
    """The dead letter's reason for an event of a doc type its gateway may not write."""
    return ContractError(
        SnapshotEvent.__name__,
        [
            FieldProblem(
                "doc_type",
                f"gateway {gateway.name!r} may not write doc type {doc_type[:200]!r}: not in "
                "its doc_types (ingest.credentials_file)",
            )
        ],
    )


@functools.lru_cache(maxsize=256)
def _own_source(source: str) -> bytes:
    """``"source":"<name>"`` as the event's encoding writes it: made once per gateway, not
    per event."""
    return b'"source":' + orjson.dumps(source)


def other_source(gateway: creds.Gateway, value: bytes) -> ContractError | None:
    """An NDJSON event that names a source other than its gateway: a gateway writes as
    itself. Events are encoded compactly with their fields in a fixed order and anchors of
    fixed fields, so ``,"source":`` outside a string is the event's own and the last one;
    inside a string its quotes would be escaped."""
    at = value.rfind(b',"source":')
    if at >= 0 and value.startswith(_own_source(gateway.source), at + 1):
        return None
    return ContractError(
        SnapshotEvent.__name__,
        [
            FieldProblem(
                "source",
                f"gateway {gateway.name!r} writes as source {gateway.source!r}: leave source "
                "out or give that one",
            )
        ],
    )


def client_cert_cn(request: web.Request) -> str | None:
    """The subject CN of the connection's client certificate, once TLS has verified it
    against ingest.tls_client_ca_file; None without TLS or without a certificate."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class Gate:
    """One worker's view of the writers. Refuses to be built (SettingsError) with neither a
    token, credentials nor insecure_no_auth, and (CredentialsError) with a credentials file
    that does not load."""

    def __init__(self, options: IngestOptions, metrics: IngestMetrics) -> None:
        self._metrics = metrics
        self._token = options.writer_token()
        self.credentials: creds.Watcher | None = None
        if options.credentials_file is not None:
            self.credentials = creds.Watcher(options.credentials_file, self._reloaded)
        self.insecure = self._token is None and self.credentials is None
        # The legacy token (or no auth at all) writes as it always has: source ingest.source.
        self.legacy = creds.Gateway(creds.LEGACY_GATEWAY, options.source, creds.Scope(None))
        self._poll_s = options.credentials_poll_s
        self._buckets = GatewayBuckets()
        self._task: asyncio.Task[None] | None = None

    @property
    def gateways(self) -> int:
        return len(self.credentials.current.gateways) if self.credentials is not None else 0

    def start(self) -> None:
        if self.credentials is not None and self._task is None:
            self._task = asyncio.create_task(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # ------------------------------------------------------------------ per request

    def identify(self, request: web.Request) -> creds.Gateway | None:
        """The gateway the request's bearer token belongs to, or without a token the one
        whose ``client_cert_cn`` its client certificate names (mutual TLS); None: refuse it
        (401)."""
        if self.insecure:
            return self.legacy
        if "Authorization" not in request.headers and self.credentials is not None:
            cn = client_cert_cn(request)
            if cn is not None:
                by_cert = self.credentials.current.identify_cn(cn, time.time())
                if isinstance(by_cert, str):
                    self._metrics.unauthorized.labels(by_cert).inc()
                    return None
                return by_cert
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        token = presented.strip().encode()
        if scheme.lower() != "bearer" or not token:
            self._metrics.unauthorized.labels("missing").inc()
            return None
        # Constant time: the comparison leaks neither prefix length nor content (the legacy
        # token may be one a person chose; gateway secrets are random: credentials.py).
        if self._token is not None and hmac.compare_digest(token, self._token):
            return self.legacy
        if self.credentials is None:
            self._metrics.unauthorized.labels("unknown").inc()
            return None
        found = self.credentials.current.identify(token, time.time())
        if isinstance(found, str):
            self._metrics.unauthorized.labels(found).inc()
            return None
        return found

    def rate_limited(self, gateway: creds.Gateway) -> web.Response | None:
        """429 with Retry-After when ``gateway`` is past its rate; None: let it in (a
        request limit takes its token now)."""
        rate = gateway.rate
        if rate is None:
            return None
        bucket = self._buckets.bucket(gateway.name, rate.per_s, rate.burst)
        wait_s = bucket.wait_s()
        if not wait_s:
            if rate.unit == "requests":
                bucket.take(1)
            return None
        self._metrics.rate_limited.labels(gateway.name).inc()
        retry_after = max(1, math.ceil(wait_s))
        body: dict[str, Any] = {
            "error": f"gateway {gateway.name!r} is past its rate limit ({rate.per_s:g} "
            f"{rate.unit}/s, burst {rate.burst}; ingest.credentials_file)",
            "retry_after_s": retry_after,
            "written": 0,
        }
        return web.Response(
            status=429,
            body=orjson.dumps(body),
            content_type="application/json",
            headers={"Retry-After": str(retry_after)},
        )

    def admit(self, batch: Batch, gateway: creds.Gateway, *, ndjson: bool) -> None:
        """Once the body is read: an events limit takes its count (into debt if need be);
        events of doc types outside the gateway's scope, and NDJSON events naming another
        source, become dead letters (the normalised event as their raw record). A set lookup
        per event, patterns cached."""
        rate = gateway.rate
        if rate is not None and rate.unit == "events":
            self._buckets.bucket(gateway.name, rate.per_s, rate.burst).take(len(batch))
        if ndjson and gateway is not self.legacy:
            kept = []
            for a in batch.accepted:
                if (error := other_source(gateway, a.value)) is None:
                    kept.append(a)
                else:
                    batch.rejected.append(Rejected(a.value, error))
            batch.accepted = kept
        if gateway.scope.everything:
            return
        allows = gateway.scope.allows
        outside = [a for a in batch.accepted if not allows(a.doc_type)]
        if not outside:
            return
        batch.accepted = [a for a in batch.accepted if allows(a.doc_type)]
        batch.rejected.extend(Rejected(a.value, out_of_scope(gateway, a.doc_type)) for a in outside)
        self._metrics.out_of_scope.labels(gateway.name).inc(len(outside))

    # ------------------------------------------------------------------ the file

    def _reloaded(self, ok: bool) -> None:
        self._metrics.credentials_reloads.labels("ok" if ok else "error").inc()
        if ok and self.credentials is not None:
            self._buckets.keep_only(
                {n for n, g in self.credentials.current.gateways.items() if g.rate is not None}
            )

    async def _watch(self) -> None:
        assert self.credentials is not None
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                self.credentials.check()
            except Exception:  # the watcher must not die: the last good credentials stay
                log.exception("credentials check failed")
