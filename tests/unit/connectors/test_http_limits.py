"""What a client's bytes may cost the ingest service: half-sent heads and bodies time out,
connections past the cap are refused, malformed HTTP is a 4xx logged once without a
traceback, and the accept loop's errors are throttled. No broker: the producer points at a
closed port and is never started; the HTTP side listens on its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.stack.processes import free_port

# Only a safety net for a server that never answers: no assertion is about durations.
_PATIENCE_S = 20.0

Scenario = Callable[[IngestService, int], Awaitable[None]]


def _run(scenario: Scenario, **ingest: Any) -> IngestService:
    settings = IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        ingest={
            "port": 0,
            "insecure_no_auth": True,
            "header_timeout_s": 0.3,
            "body_timeout_s": 0.3,
            **ingest,
        },
    )
    service = IngestService(settings)

    async def main() -> None:
        port = await service.listen()
        try:
            await scenario(service, port)
        finally:
            await service.stop()

    asyncio.run(main())
    return service


def _insecure_notice(record: logging.LogRecord) -> bool:
    """The warning every start without a token logs (these tests opt out of the token)."""
    return "accepting unauthenticated writers" in record.getMessage()


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    with contextlib.suppress(ConnectionError):  # the server may close before reading it all
        await writer.drain()


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    with contextlib.suppress(ConnectionError):
        while chunk := await asyncio.wait_for(reader.read(65536), _PATIENCE_S):
            chunks.append(chunk)
    return b"".join(chunks)


def _refused(service: IngestService, cause: str) -> float | None:
    return service.registry.get_sample_value(
        "anchorwatch_ingest_connections_refused_total", {"cause": cause}
    )


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: ingest\r\n\r\n"


def test_half_sent_heads_are_answered_408_and_closed() -> None:
    async def scenario(_service: IngestService, port: int) -> None:
        partial = b"POST /v1/kong HTTP/1.1\r\nHost: ingest\r\nContent-Le"
        connections = [await _connect(port) for _ in range(20)]
        for i, (_, writer) in enumerate(connections):
            if i % 2:  # half of them send nothing at all
                await _send(writer, partial)
        answers = await asyncio.gather(*(_until_closed(r) for r, _ in connections))
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
            assert b"ingest.header_timeout_s" in answer
        for _, writer in connections:
            writer.close()

    service = _run(scenario)
    assert _refused(service, "header_timeout") == 20


def test_a_kept_alive_connection_gets_the_head_deadline_for_each_request() -> None:
    async def scenario(_service: IngestService, port: int) -> None:
        reader, writer = await _connect(port)
        await _send(writer, HEALTH)
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        while await reader.readline() != b"\r\n":
            pass
        await reader.readexactly(len(b'{"status":"ok"}'))
        await _send(writer, b"POST /v1/kong HTTP/1.1\r\nHo")
        assert (await _until_closed(reader)).startswith(b"HTTP/1.1 408")
        writer.close()

    _run(scenario, keepalive_timeout_s=600)


def test_a_body_that_does_not_arrive_in_time_is_408() -> None:
    async def scenario(_service: IngestService, port: int) -> None:
        reader, writer = await _connect(port)
        await _send(
            writer, b"POST /v1/kong HTTP/1.1\r\nHost: ingest\r\nContent-Length: 1000\r\n\r\n[{}"
        )
        answer = await _until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"ingest.body_timeout_s" in answer
        writer.close()

    service = _run(scenario)
    assert _refused(service, "body_timeout") == 1
    assert service.registry.get_sample_value(
        "anchorwatch_ingest_request_seconds_count", {"format": "kong", "code": "408"}
    )


def test_connections_past_the_cap_are_refused_and_the_slot_comes_back() -> None:
    async def scenario(_service: IngestService, port: int) -> None:
        held = [await _connect(port) for _ in range(3)]
        await _send(held[0][1], HEALTH)  # the three are registered: one answered
        assert (await held[0][0].readline()).startswith(b"HTTP/1.1 200")
        reader, writer = await _connect(port)
        answer = await _until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"ingest.max_connections" in answer
        writer.close()
        for _, w in held:
            w.close()
        # Once they are gone, a new connection is served.
        for _ in range(200):
            reader, writer = await _connect(port)
            await _send(writer, HEALTH)
            status = await asyncio.wait_for(reader.readline(), _PATIENCE_S)
            writer.close()
            if status.startswith(b"HTTP/1.1 200"):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("no connection was served after the others closed")

    service = _run(scenario, max_connections=3, header_timeout_s=60)
    assert (_refused(service, "max_connections") or 0) >= 1


def _post(path: str, body: bytes, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return b"POST %s HTTP/1.1\r\nHost: ingest\r\nContent-Length: %d\r\n\r\n%s" % (
        path.encode(),
        size,
        body,
    )


def test_bodies_in_memory_are_bounded_and_a_request_past_it_waits_then_gets_503() -> None:
    async def scenario(service: IngestService, port: int) -> None:
        # One request holds most of the room while its body trickles in.
        slow_reader, slow = await _connect(port)
        await _send(slow, _post("/v1/kong", b"[" + b" " * 99, length=60_000))
        # It holds its share once the service has taken it (before reading the body).
        budget = service._bodies
        for _ in range(500):
            if budget.free < budget.total:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the slow request never took its share of the room")
        reader, writer = await _connect(port)
        await _send(writer, _post("/v1/kong", b"[" + b" " * 9998 + b"]"))
        answer = await _response(reader)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"ingest.max_bodies_bytes" in answer
        writer.close()
        slow.close()
        await _until_closed(slow_reader)
        # Its room is back: the next request gets as far as Kafka (unreachable here).
        for _ in range(100):
            reader, writer = await _connect(port)
            await _send(writer, _post("/v1/kong", b"[" + b" " * 9998 + b"]"))
            answer = await _response(reader)
            writer.close()
            if b"Kafka is unreachable" in answer:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the room never came back: {answer[:300]!r}")

    service = _run(
        scenario,
        max_body_bytes=65_536,
        max_bodies_bytes=65_536,
        ack_timeout_s=0.3,
        body_timeout_s=60,
        header_timeout_s=60,
    )
    assert (
        service.registry.get_sample_value(
            "anchorwatch_ingest_unavailable_total", {"cause": "memory"}
        )
        == 1
    )


async def _response(reader: asyncio.StreamReader) -> bytes:
    """One response: its head and its Content-Length body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _PATIENCE_S)
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await asyncio.wait_for(reader.readexactly(length), _PATIENCE_S)


@pytest.mark.parametrize(
    "request_head",
    [
        b"POST /v1/kong HTTP/1.1\r\nHost: ingest\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
        b"POST /v1/kong HTTP/1.1\r\nHost: ingest\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(2000))
        + b"\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS to a plain port\r\n\r\n",
    ],
    ids=["100KB-header", "2000-headers", "not-http"],
)
def test_malformed_http_is_a_4xx_logged_once_without_a_traceback(
    request_head: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(_service: IngestService, port: int) -> None:
        for _ in range(5):
            reader, writer = await _connect(port)
            await _send(writer, request_head)
            answer = await _until_closed(reader)
            assert answer.split(b" ", 2)[1] == b"400", answer[:200]
            writer.close()

    with caplog.at_level(logging.DEBUG, logger="anchorwatch"):
        service = _run(scenario)
    lines = [r for r in caplog.records if r.name.startswith("anchorwatch.connectors.server")]
    lines = [r for r in lines if r.levelno >= logging.WARNING and not _insecure_notice(r)]
    assert [r.getMessage() for r in lines] == ["malformed HTTP request refused"]
    assert lines[0].exc_info is None
    assert lines[0].exc_text is None
    assert _refused(service, "bad_http") == 5


def test_accept_errors_are_logged_once_per_interval_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(_service: IngestService, _port: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(1000):  # what asyncio reports per failed accept when out of fds
            loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(24, "Too many open files"),
                }
            )

    with caplog.at_level(logging.DEBUG):
        _run(scenario)
    accept = [r for r in caplog.records if "accept" in r.getMessage() and not _insecure_notice(r)]
    assert len(accept) == 1
    assert accept[0].exc_info is None
    assert getattr(accept[0], "errno", None) == 24
