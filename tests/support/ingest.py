"""The ingest service against the real broker, shared by its integration tests: generated
events, service settings on a test's topics, a running service, and what a topic holds."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.demo import slice as flow
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import Message, read_topic


@functools.lru_cache(maxsize=1)
def events() -> tuple[SnapshotEvent, ...]:
    traffic = generate(TrafficConfig(seed=21, minutes=4, doc_types=5, background_fault_rate=0.05))
    return tuple(r.event for r in traffic.records() if r.event is not None)


# The generated traffic is timed from 2025-11-29: older than the snapshots topic keeps.
GENERATED_AGE_S = 20 * 365 * 86_400


def ingest_settings(job: JobSettings, **ingest: Any) -> IngestSettings:
    """The service's settings on ``job``'s broker and topics; without a token given, with
    ``insecure_no_auth`` (the service does not start with neither)."""
    token_given = {"auth_token", "auth_token_file"} & set(ingest)
    return IngestSettings.load(
        kafka=job.kafka.model_dump(),
        topics=job.topics.model_dump(),
        ingest={
            "port": 0,
            "max_event_age_s": GENERATED_AGE_S,
            **({} if token_given else {"insecure_no_auth": True}),
            **ingest,
        },
    )


@asynccontextmanager
async def serving(settings: IngestSettings) -> AsyncIterator[tuple[IngestService, str]]:
    service = IngestService(settings)
    port = await service.start()
    try:
        yield service, f"http://127.0.0.1:{port}"
    finally:
        await service.stop()


def records(job: JobSettings, topic: str) -> list[Message]:
    return list(read_topic(job.kafka, topic, timeout_s=10))


def as_written(event: SnapshotEvent, source: str = "ingest") -> bytes:
    return encode(event.model_copy(update={"source": source}))


@contextmanager
def summaries_written(job: JobSettings) -> Iterator[JobSettings]:
    """``job`` with ``topics.summaries`` set: its topic created now, deleted after."""
    topics = job.topics.model_copy(update={"summaries": f"{job.topics.snapshots}.summaries"})
    settings = job.model_copy(update={"topics": topics})
    flow.create_topics(settings)
    try:
        yield settings
    finally:
        flow.delete_topics(settings)


def settings_in_env(monkeypatch: pytest.MonkeyPatch, job: JobSettings) -> None:
    """The broker and the topics of ``job`` as a command reads them from its environment."""
    for name, value in {
        "ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS": job.kafka.bootstrap_servers,
        "ANCHORWATCH_TOPICS__SNAPSHOTS": job.topics.snapshots,
        "ANCHORWATCH_TOPICS__SUMMARIES": job.topics.summaries,
        "ANCHORWATCH_TOPICS__DEAD_LETTER": job.topics.dead_letter,
    }.items():
        monkeypatch.setenv(name, value)
