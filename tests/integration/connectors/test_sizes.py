"""Large records, the size chain, and the retry path of partly failed requests, against the
real broker (topics private to each test)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from typing import Any

import aiohttp
import orjson
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import DeadLetter, SnapshotEvent, decode, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.demo.slice import create_topics
from anchorwatch.errors import AnchorwatchError
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config, read_topic
from anchorwatch.stack.topics import topic_message_bytes

pytestmark = [pytest.mark.integration]


def _settings(job: JobSettings, **ingest: Any) -> IngestSettings:
    return IngestSettings.load(
        kafka=job.kafka.model_dump(),
        topics=job.topics.model_dump(),
        ingest={"port": 0, "insecure_no_auth": True, **ingest},
    )


def _values(job: JobSettings, topic: str) -> list[bytes]:
    return [m.value or b"" for m in read_topic(job.kafka, topic, timeout_s=10)]


def _set_max_message_bytes(job: JobSettings, topic: str, size: int) -> None:
    entry = ConfigEntry("max.message.bytes", str(size), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient(client_config(job.kafka))
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    # The broker applies it once the controller's change reaches it.
    for _ in range(100):
        if topic_message_bytes(admin, [topic], 10)[topic] == size:
            return
        time.sleep(0.1)
    raise AssertionError(f"{topic}: max.message.bytes never became {size}")


def _events(n: int) -> list[SnapshotEvent]:
    # Recent event times: the service may refuse events older than the topic keeps.
    start_ms = (time.time_ns() // 1_000_000 // 60_000 - 5) * 60_000
    traffic = generate(TrafficConfig(seed=17, minutes=2, doc_types=3, start_ms=start_ms))
    return [r.event for r in traffic.records() if r.event is not None and r.event.anchors][:n]


def _with_anchors(event: SnapshotEvent, count: int) -> SnapshotEvent:
    anchors = [
        event.anchors[i % len(event.anchors)].model_copy(update={"anchor_id": f"SECTION_{i:05d}"})
        for i in range(count)
    ]
    return event.model_copy(update={"anchors": anchors, "anchor_count": count})


def test_records_up_to_the_contract_maximum_land_and_oversized_dead_letters_are_cut(
    job_settings: JobSettings,
) -> None:
    base = _events(1)[0]
    big = _with_anchors(base, 10_000).model_copy(update={"source": "gw"})
    big_line = encode(big)
    assert len(big_line) > 1_000_000  # above Kafka's 1 MB defaults
    # A line of the same size that breaks the contract in its last anchor, and a line
    # whose dead letter (JSON writes each control byte as 6) is larger than any record.
    broken = big_line.replace(b'"drift_score":', b'"drift_score":-', 1)
    garbage = b"\x01" * 3_000_000
    body = b"\n".join([big_line, broken, garbage]) + b"\n"

    async def scenario() -> tuple[int, dict[str, Any]]:
        service = IngestService(_settings(job_settings))
        port = await service.start()
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"http://127.0.0.1:{port}/v1/events", data=body) as r,
            ):
                return r.status, await r.json()
        finally:
            await service.stop()

    status, answer = asyncio.run(scenario())
    assert status == 200, answer
    assert (answer["accepted"], answer["rejected"]) == (1, 2)
    assert _values(job_settings, job_settings.topics.snapshots) == [big_line]
    letters = [
        decode(DeadLetter, v) for v in _values(job_settings, job_settings.topics.dead_letter)
    ]
    whole = next(dl for dl in letters if dl.raw == broken.decode())
    assert whole.field.startswith("anchors[0].drift_score")
    cut = next(dl for dl in letters if dl is not whole)
    sha = hashlib.sha256(garbage).hexdigest()
    assert cut.reason.startswith("invalid NDJSON") or "not valid JSON" in cut.reason
    assert cut.reason.endswith(f" of {len(garbage)} bytes; sha256 of all: {sha}]")
    kept = int(cut.reason.rsplit("[raw cut to its first ", 1)[1].split(" ", 1)[0])
    assert kept > 2_000_000
    assert cut.raw == "\x01" * kept


def test_a_topic_that_refuses_large_records_stops_the_start_naming_it(
    job_settings: JobSettings,
) -> None:
    topic = job_settings.topics.dead_letter
    _set_max_message_bytes(job_settings, topic, 1_048_588)  # Kafka's own default
    settings = _settings(job_settings)

    async def start() -> None:
        service = IngestService(settings)
        try:
            await service.start()
        finally:
            await service.stop()

    with pytest.raises(AnchorwatchError) as caught:
        asyncio.run(start())
    message = str(caught.value)
    assert f"topic {topic} takes records of up to 1048588 bytes (max.message.bytes)" in message
    assert "topics.max_message_bytes (ANCHORWATCH_TOPICS__MAX_MESSAGE_BYTES) = 16777216" in message
    # Creating the topics again (`anchorwatch stack up` does) raises the limit; then it starts.
    create_topics(job_settings)
    asyncio.run(start())


def test_a_retry_skips_exactly_what_kafka_acknowledged_and_never_a_new_event(
    job_settings: JobSettings,
) -> None:
    events = _events(5)
    good = [to_kong_entry(e) for e in events]
    bad = to_kong_entry(events[0])
    bad["started_at"] = "not a time"
    bad["padding"] = base64.b64encode(os.urandom(8192)).decode()  # incompressible
    body = orjson.dumps([*good, bad])
    # The same request id as events[0], another event: a client reusing an id.
    reused = to_kong_entry(events[0])
    reused["started_at"] += 1
    dead_letter = job_settings.topics.dead_letter

    async def scenario() -> list[tuple[int, dict[str, Any]]]:
        service = IngestService(_settings(job_settings, ack_timeout_s=3))
        port = await service.start()
        url = f"http://127.0.0.1:{port}/v1/kong"
        loop = asyncio.get_running_loop()
        answers = []
        try:
            async with aiohttp.ClientSession() as http:
                # The broker now refuses the dead letter: the events are written, the
                # request as a whole is not, and the client retries it.
                await loop.run_in_executor(
                    None, _set_max_message_bytes, job_settings, dead_letter, 1024
                )
                for data in (body, None, body, orjson.dumps(reused), body):
                    if data is None:
                        await loop.run_in_executor(
                            None, _set_max_message_bytes, job_settings, dead_letter, 16777216
                        )
                        continue
                    async with http.post(url, data=data) as r:
                        answers.append((r.status, await r.json()))
        finally:
            await service.stop()
        return answers

    failed, retried, other, again = asyncio.run(scenario())
    assert failed[0] == 503, failed
    assert failed[1]["written"] == 5
    assert retried == (
        200,
        {
            "accepted": 5,
            "rejected": 1,
            "already_written": 5,
            "reasons": [{"field": "started_at", "reason": retried[1]["reasons"][0]["reason"],
                         "count": 1}],
        },
    )  # fmt: skip
    assert other[0] == 200
    assert other[1]["already_written"] == 0
    assert again[0] == 200
    assert again[1]["already_written"] == 5
    written = [orjson.loads(v) for v in _values(job_settings, job_settings.topics.snapshots)]
    ids = sorted(w["event_id"] for w in written)
    # Each event once, and the other event with the reused id as well.
    assert ids == sorted([e.event_id for e in events] + [events[0].event_id])
    times = {w["event_time_ms"] for w in written if w["event_id"] == events[0].event_id}
    assert times == {events[0].event_time_ms, events[0].event_time_ms + 1}
    assert len(_values(job_settings, dead_letter)) == 2
