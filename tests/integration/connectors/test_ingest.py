"""The ingest service and the replay connector against the real broker (topics private to
each test)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors.server import IngestService
from anchorwatch.contracts import DeadLetter, decode, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.jobs.settings import JobSettings
from tests.support.ingest import as_written as _as_written
from tests.support.ingest import events as _events
from tests.support.ingest import ingest_settings as _settings
from tests.support.ingest import records as _records
from tests.support.ingest import serving, settings_in_env
from tests.support.waiting import wait_until_async

pytestmark = [pytest.mark.integration]

DOC = "x-anthropic-doc-type"
COUNT = "x-anthropic-anchor-count"
LOG = "x-anthropic-snapshot-log"


def test_kong_payloads_as_kong_sends_them_land_keyed_by_doc_type(job_settings: JobSettings) -> None:
    events = _events()[:120]
    entries = [to_kong_entry(e) for e in events]
    # Odd header case and repeated headers that agree.
    odd = entries[1]["request"]["headers"]
    odd["X-ANTHROPIC-DOC-TYPE"] = odd.pop(DOC)
    entries[2]["response"]["headers"][COUNT] = [str(events[2].anchor_count)] * 2
    odd_log = entries[3]["response"]["headers"]
    odd_log["X-Anthropic-Snapshot-Log"] = odd_log.pop(LOG)
    batch, single = entries[:119], entries[119]

    async def scenario() -> list[dict[str, Any]]:
        async with serving(_settings(job_settings)) as (_, url), aiohttp.ClientSession() as http:
            answers = []
            for body in (orjson.dumps(batch), orjson.dumps(single)):
                async with http.post(f"{url}/v1/kong", data=body) as r:
                    assert r.status == 200
                    answers.append(await r.json())
            return answers

    answers = asyncio.run(scenario())
    assert answers == [
        {"accepted": 119, "rejected": 0, "already_written": 0, "reasons": []},
        {"accepted": 1, "rejected": 0, "already_written": 0, "reasons": []},
    ]
    written = _records(job_settings, job_settings.topics.snapshots)
    assert sorted(m.value or b"" for m in written) == sorted(_as_written(e) for e in events)
    partitions: dict[bytes, set[int]] = {}
    for m in written:
        key = m.key or b""
        assert key == orjson.loads(m.value or b"")["doc_type"].encode()
        partitions.setdefault(key, set()).add(m.partition)
    assert all(len(p) == 1 for p in partitions.values())
    assert _records(job_settings, job_settings.topics.dead_letter) == []


BROKEN: list[tuple[str, str, Any, str]] = [
    # (request or response header, or field; new value, dead letter's field)
    ("response", COUNT, "twelve", f"response.headers.{COUNT}"),
    ("request", DOC, None, f"request.headers.{DOC}"),
    ("request", DOC, ["invoice", "nda"], f"request.headers.{DOC}"),
    (
        "response",
        "x-anthropic-snapshot-status",
        "paused",
        "response.headers.x-anthropic-snapshot-status",
    ),
    ("response", LOG, "[{oops", f"response.headers.{LOG}"),
    ("response", LOG, '[{"anchor_id": "A"}]', f"response.headers.{LOG}[0].position"),
    ("field", "started_at", 1_764_403_200, "started_at"),
    ("field", "started_at", None, "started_at"),
    ("field", "request", None, f"request.headers.{DOC}"),
]


def test_every_rejection_reaches_the_dead_letter_topic_with_raw_reason_and_source(
    job_settings: JobSettings,
) -> None:
    event = next(e for e in _events() if e.anchors)
    good = to_kong_entry(event)
    broken = []
    for kind, name, value, _ in BROKEN:
        entry = copy.deepcopy(good)
        target = entry[kind]["headers"] if kind in ("request", "response") else entry
        if value is None:
            del target[name]
        else:
            target[name] = value
        broken.append(entry)
    body = orjson.dumps([good, *broken, "not an entry"])

    async def scenario() -> dict[str, Any]:
        async with serving(_settings(job_settings)) as (_, url), aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/kong", data=body) as r:
                assert r.status == 200
                answer: dict[str, Any] = await r.json()
            async with http.get(f"{url}/metrics") as r:
                metrics = await r.text()
            assert (
                f'anchorwatch_ingest_rejected_total{{format="kong",reason="{BROKEN[0][3]}"}} 1.0'
                in metrics
            )
            return answer

    answer = asyncio.run(scenario())
    assert (answer["accepted"], answer["rejected"]) == (1, len(BROKEN) + 1)
    assert answer["reasons"][0] == {
        "field": f"response.headers.{COUNT}",
        "reason": "not an integer: 'twelve'",
        "count": 1,
    }
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in _records(job_settings, job_settings.topics.dead_letter)
    ]
    assert len(letters) == len(BROKEN) + 1
    for entry, (_, _, _, field) in zip(broken, BROKEN, strict=True):
        letter = next(dl for dl in letters if orjson.loads(dl.raw) == entry)
        assert letter.field == field
        assert letter.reason.startswith(f"invalid Kong http-log entry: {field}")
        assert letter.source == "ingest"
    assert any(orjson.loads(dl.raw) == "not an entry" for dl in letters)
    assert [m.value for m in _records(job_settings, job_settings.topics.snapshots)] == [
        _as_written(event)
    ]


def test_ndjson_events_with_auth_on(job_settings: JobSettings, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    events = _events()[:20]
    body = b"\n".join(encode(e) for e in events) + b"\n{broken\n"

    async def scenario() -> None:
        settings = _settings(job_settings, auth_token_file=token)
        async with serving(settings) as (_, url), aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/events", data=body) as r:
                assert r.status == 401
            headers = {"Authorization": "Bearer t0ken", "Content-Type": "application/x-ndjson"}
            async with http.post(f"{url}/v1/events", data=body, headers=headers) as r:
                assert r.status == 200
                assert (await r.json())["accepted"] == 20

    asyncio.run(scenario())
    # The refused request wrote nothing; the NDJSON events keep their own source.
    assert sorted(
        m.value or b"" for m in _records(job_settings, job_settings.topics.snapshots)
    ) == sorted(encode(e) for e in events)
    assert len(_records(job_settings, job_settings.topics.dead_letter)) == 1


def test_a_full_producer_queue_answers_503_and_writes_nothing_of_that_request(
    job_settings: JobSettings,
) -> None:
    first = orjson.dumps([to_kong_entry(e) for e in _events()[:5]])
    second = orjson.dumps([to_kong_entry(e) for e in _events()[5:10]])
    # linger keeps the first request's records unacknowledged (a second) while the second
    # request arrives: 5 records in flight and 5 more would pass the limit of 6.
    settings = _settings(job_settings, max_inflight_records=6, linger_ms=1000, retry_after_s=3)

    async def scenario() -> list[tuple[int, str | None]]:
        async with serving(settings) as (service, url), aiohttp.ClientSession() as http:

            async def post(body: bytes) -> tuple[int, str | None]:
                async with http.post(f"{url}/v1/kong", data=body) as r:
                    return r.status, r.headers.get("Retry-After")

            posted_first = asyncio.create_task(post(first))
            await wait_until_async(
                lambda: service.producer.inflight_records == 5,
                10,
                "the first request's 5 records to await Kafka's acknowledgement",
            )
            refused = await post(second)
            return [await posted_first, refused]

    assert asyncio.run(scenario()) == [(200, None), (503, "3")]
    assert len(_records(job_settings, job_settings.topics.snapshots)) == 5


def test_shutdown_lets_in_flight_requests_finish_and_flushes(job_settings: JobSettings) -> None:
    bodies = [
        orjson.dumps([to_kong_entry(e) for e in _events()[i : i + 10]]) for i in range(0, 100, 10)
    ]
    settings = _settings(job_settings, linger_ms=1000)

    async def scenario() -> list[int]:
        service = IngestService(settings)
        port = await service.start()
        async with aiohttp.ClientSession() as http:

            async def post(body: bytes) -> int:
                async with http.post(f"http://127.0.0.1:{port}/v1/kong", data=body) as r:
                    return r.status

            posts = [asyncio.create_task(post(b)) for b in bodies]
            # Stop once every body has arrived: the requests then wait for Kafka.
            sent = sum(map(len, bodies))
            await wait_until_async(
                lambda: (
                    service.registry.get_sample_value(
                        "anchorwatch_ingest_received_bytes_total", {"format": "kong"}
                    )
                    == sent
                ),
                10,
                f"the service to have received all {sent} bytes of the requests",
            )
            assert service.producer.inflight_records > 0
            await service.stop()
            return list(await asyncio.gather(*posts))

    assert asyncio.run(scenario()) == [200] * len(bodies)
    assert len(_records(job_settings, job_settings.topics.snapshots)) == 100


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(
        st.binary(max_size=300) | st.sampled_from([b"[]", b"{}", b"[1, {}]"]),
        min_size=1,
        max_size=5,
    )
)
def test_garbage_over_http_never_gets_a_500(job_settings: JobSettings, bodies: list[bytes]) -> None:
    async def scenario() -> None:
        async with serving(_settings(job_settings)) as (_, url), aiohttp.ClientSession() as http:
            for body in bodies:
                for path in ("/v1/kong", "/v1/events"):
                    async with http.post(f"{url}{path}", data=body) as r:
                        assert r.status in (200, 400), (body, r.status, await r.text())

    asyncio.run(scenario())


def test_replay_kong_and_ndjson_files(
    job_settings: JobSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traffic = generate(TrafficConfig(seed=4, minutes=2, doc_types=3, malformed_rate=0.05))
    records = list(traffic.records())
    good = [r.event for r in records if r.event is not None]
    bad = [r for r in records if r.event is None]
    assert bad
    kong_file = tmp_path / "kong.log"
    # What `anchorwatch generate --format kong` writes: entries, malformed lines as they are.
    kong_file.write_bytes(
        b"".join(
            (orjson.dumps(to_kong_entry(r.event)) if r.event else r.raw) + b"\n" for r in records
        )
    )
    ndjson_file = tmp_path / "events.ndjson"
    ndjson_file.write_bytes(b"".join(r.raw + b"\n" for r in records))
    settings_in_env(monkeypatch, job_settings)

    result = CliRunner().invoke(ingest, ["replay", str(kong_file)])
    assert result.exit_code == 0, result.output
    assert f"replayed {kong_file} (kong): {len(records)} lines, {len(good)} events" in result.output
    assert f"{len(bad)} rejects" in result.output
    written = _records(job_settings, job_settings.topics.snapshots)
    assert sorted(m.value or b"" for m in written) == sorted(
        _as_written(e, "replay:kong.log") for e in good
    )

    result = CliRunner().invoke(ingest, ["replay", "-"], input=ndjson_file.read_bytes())
    assert result.exit_code == 0, result.output
    assert f"(ndjson): {len(records)} lines, {len(good)} events" in result.output
    written = _records(job_settings, job_settings.topics.snapshots)
    assert len(written) == 2 * len(good)
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in _records(job_settings, job_settings.topics.dead_letter)
    ]
    assert sorted(dl.source for dl in letters) == sorted(
        ["replay:kong.log"] * len(bad) + ["replay:stdin"] * len(bad)
    )


def test_requests_arriving_during_a_round_go_to_kafka_together_in_the_next(
    job_settings: JobSettings,
) -> None:
    bodies = [orjson.dumps([to_kong_entry(e) for e in _events()[i : i + 5]]) for i in (0, 5, 10)]
    # linger keeps the first round in flight (about a second) while the others arrive.
    settings = _settings(job_settings, linger_ms=1000)
    rounds = "anchorwatch_ingest_produce_round_records"

    async def scenario() -> tuple[list[int], IngestService]:
        async with serving(settings) as (service, url), aiohttp.ClientSession() as http:

            async def post(body: bytes) -> int:
                async with http.post(f"{url}/v1/kong", data=body) as r:
                    return r.status

            def rounds_so_far() -> tuple[float | None, float | None]:
                """How many rounds went to Kafka, and how many records they held."""
                get = service.registry.get_sample_value
                return get(f"{rounds}_count"), get(f"{rounds}_sum")

            first = asyncio.create_task(post(bodies[0]))
            await wait_until_async(
                lambda: rounds_so_far() == (1, 5), 10, "the first request's round to start"
            )
            later = [asyncio.create_task(post(b)) for b in bodies[1:]]
            # All 15 records await Kafka: the first round's 5 (not acknowledged yet) and
            # the 10 of the later requests, waiting for the next round.
            await wait_until_async(
                lambda: service.producer.inflight_records == 15,
                10,
                "the later requests to arrive while the first round is in flight",
            )
            assert rounds_so_far() == (1, 5)
            return [await first, *await asyncio.gather(*later)], service

    statuses, service = asyncio.run(scenario())
    assert statuses == [200, 200, 200]
    # The two later requests went together, in the second round.
    assert service.registry.get_sample_value(f"{rounds}_count") == 2
    assert service.registry.get_sample_value(f"{rounds}_sum") == 15
    written = _records(job_settings, job_settings.topics.snapshots)
    assert sorted(m.value or b"" for m in written) == sorted(_as_written(e) for e in _events()[:15])


def test_the_model_version_reaches_the_topic_and_a_bad_one_the_dead_letters(
    job_settings: JobSettings,
) -> None:
    """Kong logs the request body (request.body, ingest.model_from's default): each event
    carries its model; one 10,000 characters long is dead-lettered, naming `model`."""
    events = _events()[:4]
    entries = [to_kong_entry(e) for e in events]
    for i, entry in enumerate(entries):
        entry["request"]["body"] = orjson.dumps({"model": f"summarizer-2.{i}"}).decode()
    entries[3]["request"]["body"] = {"model": "m" * 10_000}

    async def scenario() -> dict[str, Any]:
        body = orjson.dumps(entries)
        async with (
            serving(_settings(job_settings)) as (_, url),
            aiohttp.ClientSession() as http,
            http.post(f"{url}/v1/kong", data=body) as r,
        ):
            assert r.status == 200
            answer: dict[str, Any] = await r.json()
            return answer

    answer = asyncio.run(scenario())
    assert (answer["accepted"], answer["rejected"]) == (3, 1)
    written = _records(job_settings, job_settings.topics.snapshots)
    assert [m.value for m in written] == [
        encode(e.model_copy(update={"source": "ingest", "model": f"summarizer-2.{i}"}))
        for i, e in enumerate(events[:3])
    ]
    (letter,) = [
        decode(DeadLetter, m.value or b"")
        for m in _records(job_settings, job_settings.topics.dead_letter)
    ]
    assert letter.field == "request.body.model"
    assert "request.body.model: model: String should have at most 128 characters" in letter.reason
