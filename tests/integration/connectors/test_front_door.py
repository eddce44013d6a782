"""Untrusted Kong batches through the real ingest service into the real broker: good entries
land in the snapshots topic, bad ones alone in the dead-letter topic, naming the field."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import DeadLetter, decode, encode
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from tests.support.kong import five_entry_batch, latin1_user_agent_entry

pytestmark = [pytest.mark.integration]

# The generated traffic is timed from 2025-11-29: older than the snapshots topic keeps.
GENERATED_AGE_S = 20 * 365 * 86_400


def _post(job: JobSettings, bodies: list[bytes]) -> list[dict[str, Any]]:
    settings = IngestSettings.load(
        kafka=job.kafka.model_dump(),
        topics=job.topics.model_dump(),
        ingest={"port": 0, "max_event_age_s": GENERATED_AGE_S, "insecure_no_auth": True},
    )

    async def scenario() -> list[dict[str, Any]]:
        service = IngestService(settings)
        port = await service.start()
        answers = []
        try:
            async with aiohttp.ClientSession() as http:
                for body in bodies:
                    async with http.post(f"http://127.0.0.1:{port}/v1/kong", data=body) as r:
                        assert r.status == 200
                        answers.append(await r.json())
        finally:
            await service.stop()
        return answers

    return asyncio.run(scenario())


def test_a_five_entry_kong_batch_lands_three_events_and_two_dead_letters(
    job_settings: JobSettings,
) -> None:
    body, expected = five_entry_batch()
    (answer,) = _post(job_settings, [body])
    assert (answer["accepted"], answer["rejected"]) == (3, 2)
    written = list(read_topic(job_settings.kafka, job_settings.topics.snapshots, timeout_s=10))
    assert sorted(m.value or b"" for m in written) == sorted(
        encode(e.model_copy(update={"source": "ingest"})) for e in expected
    )
    odd = next(m for m in written if b"<!channel>" in (m.key or b""))
    assert (odd.key or b"").decode() == '<!channel> "DO" \\ report*'
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in read_topic(job_settings.kafka, job_settings.topics.dead_letter, timeout_s=10)
    ]
    assert sorted(dl.field for dl in letters) == [
        "request.headers.x-anthropic-doc-type",
        "response.headers.x-anthropic-snapshot-log[0].drift_score",
    ]
    assert all(dl.reason.startswith(f"invalid Kong http-log entry: {dl.field}") for dl in letters)


def test_an_entry_that_is_not_utf8_is_dead_lettered_and_its_neighbours_land(
    job_settings: JobSettings,
) -> None:
    body, expected = five_entry_batch()
    entries = orjson.loads(body)
    # One client's Latin-1 User-Agent, as Kong's JSON encoder passes it through.
    mixed = b"[" + orjson.dumps(entries[0]) + b"," + latin1_user_agent_entry() + b"]"
    (answer,) = _post(job_settings, [mixed])
    assert (answer["accepted"], answer["rejected"]) == (1, 1)
    assert answer["reasons"][0]["field"] == "request.headers.user-agent"
    written = list(read_topic(job_settings.kafka, job_settings.topics.snapshots, timeout_s=10))
    assert [m.value for m in written] == [
        encode(expected[0].model_copy(update={"source": "ingest"}))
    ]
    (letter,) = [
        decode(DeadLetter, m.value or b"")
        for m in read_topic(job_settings.kafka, job_settings.topics.dead_letter, timeout_s=10)
    ]
    assert "entry 1 of the batch" in letter.reason
    assert "sk-secret" not in letter.raw
