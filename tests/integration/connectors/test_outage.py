"""Kafka goes away and comes back while Kong keeps posting: nothing answered 2xx is lost.

Runs its own broker (a private stack on free ports), because stopping the shared session
broker would break every other test.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import aiohttp
import orjson
import pytest

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import SnapshotEvent
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.kafkaio import read_topic
from anchorwatch.stack.stack import Stack
from tests.support.waiting import wait_until_async

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BATCHES = 60
PER_BATCH = 20
SENDERS = 4
# Each sender sends one batch per round (batch i is in round i // SENDERS), a round only
# once what it waits for is observable. The rounds before STOPPING go at once, and the
# broker is stopped only when they are answered 2xx and their records are read back from
# the topic; from STOPPING they go as the broker stops (some are in flight as it goes);
# from DOWN they wait until the service says Kafka is gone, so that some requests are
# refused (503) and retried however quickly the rounds before went; BACK, the last round,
# waits until Kafka is back.
STOPPING, DOWN, BACK = 2, 12, BATCHES // SENDERS - 1


@pytest.fixture
def private_stack(private_kafka: Callable[..., Stack]) -> Stack:
    return private_kafka(partitions=2)


def _batches() -> list[list[SnapshotEvent]]:
    traffic = generate(TrafficConfig(seed=31, minutes=12, doc_types=6))
    events = [r.event for r in traffic.records() if r.event is not None]
    assert len(events) >= BATCHES * PER_BATCH
    return [events[i * PER_BATCH : (i + 1) * PER_BATCH] for i in range(BATCHES)]


def test_kafka_down_then_back_loses_nothing_answered_2xx(private_stack: Stack) -> None:
    stack = private_stack
    settings = IngestSettings.load(
        kafka={"bootstrap_servers": stack.kafka.bootstrap},
        # The generated traffic is timed from 2025-11-29: accept it whatever today is.
        ingest={
            "port": 0,
            "ack_timeout_s": 2,
            "retry_after_s": 1,
            "max_event_age_s": 6e8,
            "insecure_no_auth": True,
        },
    )
    batches = _batches()
    saw_503: set[int] = set()
    accepted: set[int] = set()
    readiness: list[int] = []

    async def scenario() -> None:
        service = IngestService(settings)
        port = await service.start()
        url = f"http://127.0.0.1:{port}"
        loop = asyncio.get_running_loop()
        stopping, down, back = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def kong(http: aiohttp.ClientSession, sender: int) -> None:
            # What Kong's queue does: resend a batch until it gets a 2xx. Several senders,
            # so that some batches are in flight when the broker goes.
            for i in range(sender, BATCHES, SENDERS):
                round_ = i // SENDERS
                if round_ >= STOPPING:
                    await stopping.wait()
                if round_ >= DOWN:
                    await down.wait()
                if round_ >= BACK:
                    await back.wait()
                body = orjson.dumps([to_kong_entry(e) for e in batches[i]])
                for _ in range(200):
                    async with http.post(f"{url}/v1/kong", data=body) as r:
                        if r.status == 200:
                            accepted.add(i)
                            break
                        assert r.status == 503, await r.text()
                        saw_503.add(i)
                        await asyncio.sleep(float(r.headers["Retry-After"]) / 4)
                else:
                    raise AssertionError(f"batch {i} never accepted")
                await asyncio.sleep(0.05)

        def not_in_topic(event_ids: set[str]) -> set[str]:
            written = read_topic(settings.kafka, settings.topics.snapshots, timeout_s=10)
            return event_ids - {orjson.loads(m.value or b"")["event_id"] for m in written}

        async def outage(http: aiohttp.ClientSession) -> None:
            async def ready_status() -> int:
                async with http.get(f"{url}/readyz") as r:
                    return r.status

            # The first rounds accepted, and their records observably in Kafka.
            first = set(range(STOPPING * SENDERS))
            await wait_until_async(
                lambda: first <= accepted, 60, f"batches {sorted(first)} to be answered 2xx"
            )
            want = {e.event_id for i in first for e in batches[i]}
            deadline = loop.time() + 30
            while missing := await loop.run_in_executor(None, not_in_topic, want):
                assert loop.time() < deadline, (
                    f"{len(missing)} of the {len(want)} events answered 2xx before the outage "
                    f"are not in the topic after 30 s, e.g. {sorted(missing)[:3]}"
                )
                await asyncio.sleep(0.2)
            stopping.set()
            await loop.run_in_executor(None, stack.kafka.stop)
            # Kafka stays away until the service has noticed: its readiness and a request.
            deadline = loop.time() + 60
            while True:
                if (status := await ready_status()) == 503:
                    down.set()
                    if saw_503:
                        break
                assert loop.time() < deadline, (
                    f"after 60 s without Kafka: /readyz {status}, 503 answers {len(saw_503)}"
                )
                await asyncio.sleep(0.1)
            readiness.append(status)
            await loop.run_in_executor(None, stack.up)
            back.set()

        async with aiohttp.ClientSession() as http:
            await asyncio.gather(outage(http), *(kong(http, k) for k in range(SENDERS)))
            async with http.get(f"{url}/readyz") as r:
                readiness.append(r.status)
        await service.stop()

    asyncio.run(scenario())

    assert saw_503, "the outage was not noticed by any request"
    assert not saw_503 & set(range(STOPPING * SENDERS)), "a batch before the outage was refused"
    assert readiness == [503, 200]
    seen = Counter(
        orjson.loads(m.value or b"")["event_id"]
        for m in read_topic(settings.kafka, settings.topics.snapshots, timeout_s=30)
    )
    sent = {e.event_id: i for i, batch in enumerate(batches) for e in batch}
    # Every event of every batch answered 2xx is in the topic.
    assert set(seen) == set(sent)
    # A record appears twice only if its batch was answered 503 before (the retry may repeat
    # what Kafka wrote but did not acknowledge in time); event_id is the key to deduplicate.
    duplicated = {sent[event_id] for event_id, n in seen.items() if n > 1}
    assert duplicated <= saw_503
    assert all(n <= 2 for n in seen.values())
