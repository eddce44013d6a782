"""The HTTP front door without a broker: auth, size limits, bad bodies, Kafka unreachable.

The producer points at a closed local port, so every request that gets as far as Kafka is
answered 503 + Retry-After; everything before that (auth, size, parsing) is decided first.
The broker-backed behaviour is in tests/integration/connectors/test_ingest.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.stack.processes import free_port

Scenario = Callable[[TestClient[Any, Any]], Awaitable[None]]


def _settings(**ingest: Any) -> IngestSettings:
    # Nothing listens there: Kafka is unreachable. Without a token the test says so.
    auth = {} if "auth_token" in ingest else {"insecure_no_auth": True}
    return IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        ingest={"retry_after_s": 7, "max_body_bytes": 64 * 1024, **auth, **ingest},
    )


def _run(settings: IngestSettings, scenario: Scenario) -> None:
    service = IngestService(settings)

    async def main() -> None:
        async with TestClient(TestServer(service.app())) as client:
            await scenario(client)

    try:
        asyncio.run(main())
    finally:
        service.producer.close(0)


def _kong_body(n: int = 3) -> bytes:
    events = [r.event for r in generate(TrafficConfig(minutes=1)).records() if r.event]
    return orjson.dumps([to_kong_entry(e) for e in events[:n]])


BODY = _kong_body()


def test_with_auth_on_requests_need_the_bearer_token() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            r = await client.post("/v1/kong", data=BODY, headers=headers)
            assert r.status == 401
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert "bearer token" in (await r.json())["error"]
        # Right token (any case of the scheme): past auth, on to Kafka, which is down.
        r = await client.post("/v1/kong", data=BODY, headers={"Authorization": "bearer s3cret"})
        assert r.status == 503
        # Health, readiness and metrics stay open for probes and Prometheus.
        assert (await client.get("/healthz")).status == 200

    _run(_settings(auth_token="s3cret"), scenario)


def test_with_insecure_no_auth_no_token_is_needed() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        r = await client.post("/v1/events", data=b"not json")
        assert r.status == 400

    _run(_settings(), scenario)


def test_kafka_unreachable_is_503_with_retry_after_and_unready() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        r = await client.post("/v1/kong", data=BODY)
        assert r.status == 503
        assert r.headers["Retry-After"] == "7"
        assert await r.json() == {
            "error": "Kafka is unreachable",
            "written": 0,
            "retry_after_s": 7,
        }
        ready = await client.get("/readyz")
        assert ready.status == 503
        assert (await ready.json())["reason"] == "Kafka is unreachable"

    _run(_settings(), scenario)


def test_oversized_bodies_are_refused_announced_or_chunked() -> None:
    big = b"[" + b" " * (64 * 1024) + b"]"

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    async def scenario(client: TestClient[Any, Any]) -> None:
        r = await client.post("/v1/kong", data=big)
        assert r.status == 413
        assert (
            "exceeds the limit of 65536 bytes (ingest.max_body_bytes)" in (await r.json())["error"]
        )
        r = await client.post("/v1/events", data=chunks())  # no Content-Length: chunked
        assert r.status == 413

    _run(_settings(), scenario)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/kong", b"<html>502</html>", "body is not JSON"),
        ("/v1/kong", b"", "empty body"),
        ("/v1/kong", b"3.5", "expected a Kong log entry"),
        ("/v1/events", b"garbage\nmore garbage", "no line is JSON"),
    ],
)
def test_a_body_that_is_not_json_is_400_with_the_reason(
    path: str, body: bytes, message: str
) -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        r = await client.post(path, data=body)
        assert r.status == 400
        assert message in (await r.json())["error"]

    _run(_settings(), scenario)


def test_metrics_count_requests_bytes_and_refusals() -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        await client.post("/v1/kong", data=BODY)
        await client.post("/v1/kong", data=b"nope")
        await client.post("/v1/kong", data=BODY, headers={"Authorization": "Bearer x"})
        text = await (await client.get("/metrics")).text()
        expected = [
            'anchorwatch_ingest_request_seconds_count{code="503",format="kong"} 2.0',
            'anchorwatch_ingest_request_seconds_count{code="400",format="kong"} 1.0',
            'anchorwatch_ingest_unavailable_total{cause="kafka_down"} 2.0',
            f'anchorwatch_ingest_received_bytes_total{{format="kong"}} {2 * len(BODY) + 4}.0',
            f'anchorwatch_ingest_records_total{{format="kong",outcome="failed"}} {2 * 3}.0',
            "anchorwatch_ingest_kafka_up 0.0",
        ]
        for line in expected:
            assert line in text

    _run(_settings(), scenario)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bodies=st.lists(st.binary(max_size=200) | st.sampled_from([BODY, b"[]", b"{}"]), max_size=4))
def test_garbage_bodies_never_get_a_500(bodies: list[bytes]) -> None:
    async def scenario(client: TestClient[Any, Any]) -> None:
        for body in bodies:
            for path in ("/v1/kong", "/v1/events"):
                r = await client.post(path, data=body)
                assert r.status in (200, 400, 503), (body, r.status, await r.text())

    _run(_settings(), scenario)
