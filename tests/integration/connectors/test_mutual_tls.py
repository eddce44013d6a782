"""Mutual TLS in front of the ingest service, for real: certificates made now (openssl), the
service serving HTTPS with ingest.tls_cert_file / tls_key_file and requiring client
certificates with tls_client_ca_file, and the real broker behind it. A gateway known by its
certificate's subject CN (``client_cert_cn``) writes as itself, its doc types and its rate;
a client without a certificate, or with one from a CA the service does not trust, gets no
HTTP answer at all: the handshake fails."""

from __future__ import annotations

import asyncio
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from anchorwatch.connectors import credentials as creds
from anchorwatch.contracts import DeadLetter, SnapshotEvent, decode, encode
from anchorwatch.jobs.settings import JobSettings
from tests.support.ingest import events as _events
from tests.support.ingest import ingest_settings, records, serving
from tests.support.tls_certs import client_context, new_ca

pytestmark = [pytest.mark.integration]


def _credentials(path: Path, allowed: str) -> str:
    """Gateway gw-a by its certificate (one doc type, 2 requests at once then 1/s); gateway
    gw-t by a bearer token. Returns gw-t's token."""
    token = creds.new_token()
    secret = creds.SecretEntry(
        id="t0k3n", sha256=creds.digest_hex(token), created=datetime.now(UTC), expires=None
    )
    creds.write(
        path,
        creds.CredentialsFile(
            gateways={
                "gw-a": creds.GatewayEntry(
                    doc_types=[allowed],
                    rate=creds.RateLimit(per_s=0.01, burst=2, unit="requests"),
                    client_cert_cn="gw-a.gateways.test",
                ),
                "gw-t": creds.GatewayEntry(doc_types=["*"], secrets=[secret]),
            }
        ),
    )
    return token


def _ndjson(events: list[SnapshotEvent]) -> bytes:
    return b"\n".join(encode(e.model_copy(update={"source": None})) for e in events)


async def _post(
    url: str, context: ssl.SSLContext, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/v1/events", data=body, headers=headers, ssl=context) as r,
    ):
        return r.status, await r.json()


def test_a_gateway_writes_by_its_client_certificate_and_strangers_fail_the_handshake(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    ca = new_ca(tmp_path / "pki", "anchorwatch-test-ca")
    server = ca.issue("127.0.0.1", server=True)
    gw_a = ca.issue("gw-a.gateways.test")
    unknown_cn = ca.issue("gw-nobody.gateways.test")
    rogue_ca = new_ca(tmp_path / "rogue", "rogue-ca")
    rogue_a = rogue_ca.issue("gw-a.gateways.test")  # the right CN, from the wrong CA

    events = list(_events()[:40])
    kinds = sorted({e.doc_type for e in events})
    allowed = kinds[0]
    inside = [e for e in events if e.doc_type == allowed]
    outside = [e for e in events if e.doc_type != allowed]
    assert inside, "the traffic needs the allowed doc type"
    assert outside, "the traffic needs other doc types"
    path = tmp_path / "credentials.json"
    token = _credentials(path, allowed)
    settings = ingest_settings(
        job_settings,
        credentials_file=path,
        insecure_no_auth=False,
        tls_cert_file=server.cert,
        tls_key_file=server.key,
        tls_client_ca_file=ca.cert,
    )

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(settings) as (service, _):
            url = f"https://127.0.0.1:{service.port}"
            as_a = client_context(ca, gw_a)
            seen["a"] = await _post(url, as_a, _ndjson(events))
            seen["a_again"] = (await _post(url, as_a, _ndjson(inside[:1])))[0]
            seen["a_past_rate"] = (await _post(url, as_a, _ndjson(inside[:1])))[0]
            seen["unknown_cn"] = (await _post(url, client_context(ca, unknown_cn), b""))[0]
            # A token gateway still writes by its token, over the same mutual TLS.
            seen["token"] = (
                await _post(
                    url,
                    client_context(ca, unknown_cn),
                    _ndjson(inside[:1]),
                    {"Authorization": f"Bearer {token}"},
                )
            )[0]
            for name, context in (
                ("no_cert", client_context(ca, None)),
                ("rogue_cert", client_context(ca, rogue_a)),
            ):
                try:
                    seen[name] = await _post(url, context, _ndjson(inside))
                except (aiohttp.ClientError, ssl.SSLError, ConnectionError) as exc:
                    seen[name] = exc
            try:  # plain HTTP gets no HTTP answer either
                async with (
                    aiohttp.ClientSession() as http,
                    http.get(f"http://127.0.0.1:{service.port}/healthz") as r,
                ):
                    seen["plain"] = r.status
            except aiohttp.ClientError as exc:
                seen["plain"] = exc
        return seen

    seen = asyncio.run(scenario())
    status, answer = seen["a"]
    assert status == 200, answer
    assert (answer["accepted"], answer["rejected"]) == (len(inside), len(outside))
    assert seen["a_again"] == 200  # the burst of 2
    assert seen["a_past_rate"] == 429
    assert seen["unknown_cn"] == 401
    assert seen["token"] == 200
    for name in ("no_cert", "rogue_cert", "plain"):
        # The TLS layer resets the connection (TLS 1.3: an alert after the client's part
        # of the handshake): no status line, nothing read.
        assert isinstance(seen[name], aiohttp.ClientOSError | aiohttp.ServerDisconnectedError), (
            f"{name}: answered {seen[name]!r}"
        )

    written = [
        decode(SnapshotEvent, m.value or b"")
        for m in records(job_settings, job_settings.topics.snapshots)
    ]
    by_source = {s: sorted(e.event_id for e in written if e.source == s) for s in ("gw-a", "gw-t")}
    assert by_source == {
        "gw-a": sorted(e.event_id for e in [*inside, inside[0]]),
        "gw-t": [inside[0].event_id],
    }
    assert {e.source for e in written} == {"gw-a", "gw-t"}
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in records(job_settings, job_settings.topics.dead_letter)
    ]
    assert len(letters) == len(outside)
    assert {dl.source for dl in letters} == {"gw-a"}
    assert all("gateway 'gw-a' may not write doc type" in dl.reason for dl in letters)
