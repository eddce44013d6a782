"""Gateway credentials through the real ingest service and the real broker: each gateway
writes as itself, only its doc types, at its own rate; secrets rotate, revoke and expire
while the service runs (ingest.credentials_file, written by `ingest credentials`)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors import credentials as creds
from anchorwatch.contracts import DeadLetter, SnapshotEvent, decode, encode
from anchorwatch.jobs.settings import JobSettings
from tests.support.ingest import events as _events
from tests.support.ingest import ingest_settings, records, serving

pytestmark = [pytest.mark.integration]


def add(path: Path, gateway: str, *args: str) -> str:
    """`ingest credentials add`: the new token (printed once, on stdout)."""
    result = CliRunner().invoke(
        ingest, ["credentials", "add", "--gateway", gateway, "--file", str(path), *args]
    )
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def revoke(path: Path, gateway: str, secret_id: str) -> None:
    result = CliRunner().invoke(
        ingest,
        [
            "credentials",
            "revoke",
            "--gateway",
            gateway,
            "--secret-id",
            secret_id,
            "--file",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.output


def ndjson(events: list[SnapshotEvent]) -> bytes:
    return b"\n".join(encode(e.model_copy(update={"source": None})) for e in events)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def post(
    http: aiohttp.ClientSession, url: str, token: str, body: bytes
) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with http.post(f"{url}/v1/events", data=body, headers=auth(token)) as r:
        return r.status, await r.json(), dict(r.headers)


def test_a_doc_type_outside_the_gateways_scope_is_dead_lettered_naming_both(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    events = list(_events()[:60])
    kinds = sorted({e.doc_type for e in events})
    allowed, rest = kinds[0], set(kinds[1:])
    assert rest, "the traffic needs several doc types"
    path = tmp_path / "credentials.json"
    # One exact name and a pattern that matches none of the generated types.
    token = add(path, "kong-a", "--doc-types", f"{allowed},zz-nothing-*")
    settings = ingest_settings(job_settings, credentials_file=path, insecure_no_auth=False)

    async def scenario() -> tuple[int, dict[str, Any], float | None]:
        async with serving(settings) as (service, url), aiohttp.ClientSession() as http:
            status, answer, _ = await post(http, url, token, ndjson(events))
            counted = service.registry.get_sample_value(
                "anchorwatch_ingest_out_of_scope_total", {"gateway": "kong-a"}
            )
            return status, answer, counted

    status, answer, counted = asyncio.run(scenario())
    inside = [e for e in events if e.doc_type == allowed]
    outside = [e for e in events if e.doc_type != allowed]
    assert status == 200
    assert (answer["accepted"], answer["rejected"]) == (len(inside), len(outside))
    assert counted == len(outside)
    written = records(job_settings, job_settings.topics.snapshots)
    assert sorted(m.value or b"" for m in written) == sorted(
        encode(e.model_copy(update={"source": "kong-a"})) for e in inside
    )
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in records(job_settings, job_settings.topics.dead_letter)
    ]
    assert len(letters) == len(outside)
    assert {dl.field for dl in letters} == {"doc_type"}
    assert {dl.source for dl in letters} == {"kong-a"}
    for letter in letters:
        assert "gateway 'kong-a' may not write doc type" in letter.reason
        assert any(repr(kind) in letter.reason for kind in rest)


def test_secrets_rotate_revoke_within_a_second_and_expire_while_serving(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    path = tmp_path / "credentials.json"
    old = add(path, "kong-a", "--doc-types", "*")
    new = add(path, "kong-a")  # rotation: a second secret for the same gateway
    old_id, _new_id = (s.id for s in creds.read(path).gateways["kong-a"].secrets)
    body = ndjson(list(_events()[:3]))
    settings = ingest_settings(job_settings, credentials_file=path, insecure_no_auth=False)

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(settings) as (service, url), aiohttp.ClientSession() as http:
            seen["both"] = [(await post(http, url, t, body))[0] for t in (old, new)]
            revoke(path, "kong-a", old_id)
            changed = time.monotonic()
            while (status := (await post(http, url, old, body))[0]) == 200:
                assert time.monotonic() - changed < 3, "the revoked secret is still accepted"
                await asyncio.sleep(0.02)
            seen["revoked"] = (status, time.monotonic() - changed)
            seen["new_after"] = (await post(http, url, new, body))[0]
            # The new secret expired (as the file would say once its time has come).
            file = creds.read(path)
            gw = file.gateways["kong-a"]
            past = datetime.now(UTC) - timedelta(seconds=1)
            expired = gw.model_copy(
                update={"secrets": [s.model_copy(update={"expires": past}) for s in gw.secrets]}
            )
            creds.write(path, file.model_copy(update={"gateways": {"kong-a": expired}}))
            await asyncio.sleep(settings.ingest.credentials_poll_s * 4)
            seen["expired"] = (await post(http, url, new, body))[0]
            seen["causes"] = {
                cause: service.registry.get_sample_value(
                    "anchorwatch_ingest_unauthorized_total", {"cause": cause}
                )
                for cause in ("unknown", "expired")
            }
        return seen

    seen = asyncio.run(scenario())
    assert seen["both"] == [200, 200]
    status, after_s = seen["revoked"]
    assert status == 401
    assert after_s < 1.0
    assert seen["new_after"] == 200
    assert seen["expired"] == 401
    assert seen["causes"] == {"unknown": 1.0, "expired": 1.0}
    sources = {
        decode(SnapshotEvent, m.value or b"").source
        for m in records(job_settings, job_settings.topics.snapshots)
    }
    assert sources == {"kong-a"}


def test_past_its_rate_a_gateway_gets_429_and_retry_after_and_the_other_is_unaffected(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    path = tmp_path / "credentials.json"
    flood = add(path, "kong-flood", "--doc-types", "*", "--rate", "2", "--burst", "3")
    quiet = add(path, "kong-quiet", "--doc-types", "*", "--rate", "50", "--burst", "50")
    body = ndjson(list(_events()[:2]))
    settings = ingest_settings(job_settings, credentials_file=path, insecure_no_auth=False)

    async def scenario() -> tuple[list[Any], list[int], float | None]:
        async with serving(settings) as (service, url), aiohttp.ClientSession() as http:
            flooded = await asyncio.gather(*(post(http, url, flood, body) for _ in range(12)))
            quieted = [(await post(http, url, quiet, body))[0] for _ in range(10)]
            counted = service.registry.get_sample_value(
                "anchorwatch_ingest_rate_limited_total", {"gateway": "kong-flood"}
            )
            return flooded, quieted, counted

    flooded, quieted, counted = asyncio.run(scenario())
    statuses = sorted(status for status, _, _ in flooded)
    assert statuses.count(200) == 3  # the burst
    assert statuses.count(429) == 9
    assert counted == 9
    refused = [(answer, headers) for status, answer, headers in flooded if status == 429]
    for answer, headers in refused:
        assert int(headers["Retry-After"]) >= 1
        assert answer["written"] == 0
        assert "kong-flood" in answer["error"]
    assert quieted == [200] * 10


def test_the_legacy_token_and_a_credentials_file_both_work_each_with_its_source(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    path = tmp_path / "credentials.json"
    token = add(path, "kong-a", "--doc-types", "*")
    events = list(_events()[:4])
    settings = ingest_settings(
        job_settings,
        credentials_file=path,
        auth_token="legacy-shared-token",
        insecure_no_auth=False,
    )

    async def scenario() -> list[int]:
        async with serving(settings) as (_, url), aiohttp.ClientSession() as http:
            return [
                (await post(http, url, "legacy-shared-token", ndjson(events[:2])))[0],
                (await post(http, url, token, ndjson(events[2:])))[0],
                (await post(http, url, "not-a-token", ndjson(events)))[0],
            ]

    assert asyncio.run(scenario()) == [200, 200, 401]
    written = {
        decode(SnapshotEvent, m.value or b"").event_id: decode(SnapshotEvent, m.value or b"").source
        for m in records(job_settings, job_settings.topics.snapshots)
    }
    assert written == {
        **{e.event_id: "ingest" for e in events[:2]},
        **{e.event_id: "kong-a" for e in events[2:]},
    }
