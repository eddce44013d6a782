"""The summaries topic against the real broker: the ingest service and the replay connector
write each accepted event's summary next to it (same key, same partition), never one for a
rejected record, and an event counts as written only with its summary."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import SnapshotEvent, SnapshotSummary, encode
from anchorwatch.contracts.avro import decode_summary, is_avro_summary
from anchorwatch.demo import slice as flow
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.errors import AnchorwatchError
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import Message, client_config
from tests.support.ingest import as_written as _as_written
from tests.support.ingest import events as _events
from tests.support.ingest import ingest_settings as _settings
from tests.support.ingest import records as _records
from tests.support.ingest import serving as _serving
from tests.support.ingest import settings_in_env, summaries_written

pytestmark = [pytest.mark.integration]


@pytest.fixture
def with_summaries(job_settings: JobSettings) -> Iterator[JobSettings]:
    with summaries_written(job_settings) as settings:
        yield settings


def _by_id(messages: list[Message]) -> dict[str, list[Message]]:
    out: dict[str, list[Message]] = {}
    for m in messages:
        value = m.value or b""
        event_id = (
            decode_summary(value).event_id if is_avro_summary(value)
            else orjson.loads(value)["event_id"]
        )  # fmt: skip
        out.setdefault(event_id, []).append(m)
    return out


def _assert_summarised(settings: JobSettings, written: list[bytes]) -> None:
    """Each record of ``written`` (the full events, as the connector wrote them) has one
    summary in its binary form, holding the contract's summary, beside it: same key, same
    partition."""
    full = _by_id(_records(settings, settings.topics.snapshots))
    summaries = _by_id(_records(settings, settings.topics.summaries))
    events = [SnapshotEvent.model_validate_json(w) for w in written]
    assert sorted(summaries) == sorted(e.event_id for e in events)
    for e in events:
        (summary,) = summaries[e.event_id]
        assert decode_summary(summary.value or b"") == SnapshotSummary.of(e)
        assert all(summary.value == summary_of(m.value or b"") for m in full[e.event_id])
        assert {(m.key, m.partition) for m in full[e.event_id]} == {
            (summary.key, summary.partition)
        }


def test_kong_and_ndjson_requests_write_a_summary_per_accepted_event(
    with_summaries: JobSettings,
) -> None:
    kong, ndjson = list(_events()[:60]), list(_events()[60:80])
    body = b"\n".join(encode(e) for e in ndjson) + b"\n{broken\n"

    async def scenario() -> None:
        async with (
            _serving(_settings(with_summaries)) as (_, url),
            aiohttp.ClientSession() as http,
        ):
            entries = orjson.dumps([to_kong_entry(e) for e in kong])
            async with http.post(f"{url}/v1/kong", data=entries) as r:
                assert r.status == 200
            headers = {"Content-Type": "application/x-ndjson"}
            async with http.post(f"{url}/v1/events", data=body, headers=headers) as r:
                assert r.status == 200
                assert (await r.json())["rejected"] == 1

    asyncio.run(scenario())
    # NDJSON events keep their own source (here none); the broken line is a dead letter only.
    written = [_as_written(e) for e in kong] + [encode(e) for e in ndjson]
    assert sorted(
        m.value or b"" for m in _records(with_summaries, with_summaries.topics.snapshots)
    ) == sorted(written)
    _assert_summarised(with_summaries, written)
    assert len(_records(with_summaries, with_summaries.topics.dead_letter)) == 1


def test_replay_writes_the_summaries_too(
    with_summaries: JobSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = list(_events()[:40])
    kong_file = tmp_path / "kong.log"
    kong_file.write_bytes(b"".join(orjson.dumps(to_kong_entry(e)) + b"\n" for e in events))
    settings_in_env(monkeypatch, with_summaries)
    result = CliRunner().invoke(ingest, ["replay", str(kong_file)])
    assert result.exit_code == 0, result.output
    # Each event and its summary: two records acknowledged per event.
    assert f"{2 * len(events)} records acknowledged" in result.output
    _assert_summarised(with_summaries, [_as_written(e, "replay:kong.log") for e in events])


def test_a_missing_summaries_topic_stops_the_service_naming_it(
    job_settings: JobSettings,
) -> None:
    topics = job_settings.topics.model_copy(update={"summaries": "anchorwatch.no-such-topic"})
    settings = _settings(job_settings.model_copy(update={"topics": topics}))

    async def scenario() -> None:
        service = IngestService(settings)
        try:
            await service.start()
        finally:
            await service.stop()

    with pytest.raises(AnchorwatchError, match=r"anchorwatch\.no-such-topic"):
        asyncio.run(scenario())


def test_an_event_whose_summary_kafka_refused_is_written_again_with_it(
    with_summaries: JobSettings,
) -> None:
    """The summaries topic goes away under a running service: the request fails (the client
    retries), and the retry writes both the event and its summary, although Kafka had
    acknowledged the event itself the first time."""
    events = list(_events()[:10])
    body = orjson.dumps([to_kong_entry(e) for e in events])
    admin = AdminClient(client_config(with_summaries.kafka))
    summaries = with_summaries.topics.summaries

    async def post(url: str, http: aiohttp.ClientSession) -> tuple[int, dict[str, object]]:
        async with http.post(f"{url}/v1/kong", data=body) as r:
            return r.status, await r.json()

    async def scenario() -> list[tuple[int, dict[str, object]]]:
        settings = _settings(with_summaries, ack_timeout_s=3)
        async with _serving(settings) as (_, url), aiohttp.ClientSession() as http:
            admin.delete_topics([summaries], operation_timeout=30)[summaries].result(30)
            failed = await post(url, http)
            await asyncio.to_thread(flow.create_topics, with_summaries)
            retried = await post(url, http)
            return [failed, retried]

    (status, answer), (retry_status, retry_answer) = asyncio.run(scenario())
    assert status == 503, answer
    assert answer["written"] == len(events)  # the events, not their summaries
    assert retry_status == 200, retry_answer
    assert retry_answer["already_written"] == 0
    full = _by_id(_records(with_summaries, with_summaries.topics.snapshots))
    assert {k: len(v) for k, v in full.items()} == {e.event_id: 2 for e in events}
    _assert_summarised(with_summaries, [_as_written(e) for e in events])
