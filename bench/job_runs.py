"""bench/job.py's load and jobs: the snapshot events it produces into Kafka (their event
time advancing as in a stream of a given rate, and their summaries when the summaries topic
is set), the settings that point the drift job at one input, and the runners of the jobs it
times, each returning its wall time: read-discard (SQL, `raw` format), read-parse-discard
(the drift job's source and format; with Flink's `jackson` decoder too), the floor jobs over
the drift job's own DataStream source (jobs/jvm ReadFloor), and the drift job itself, as
deployed or with job settings changed. Also the size of a topic (the verdicts written).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from pyflink.table import DataTypes, Schema, TableDescriptor

from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import DOC_TYPE_MAX_CHARS, IDENTIFIER_MAX_CHARS
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config

MIN = 60_000
INPUTS = ("snapshots", "summaries")
# The read-discard job's source table, named for Attribution.split.
RAW = "raw_records"


def snapshot(event_id: str, doc_type: str, event_time_ms: int) -> bytes:
    """A valid snapshot without anchors: an event that only moves the watermark."""
    return orjson.dumps({
        "event_id": event_id, "event_time_ms": event_time_ms, "doc_type": doc_type,
        "snapshot_status": "active", "anchor_count": 0, "anchors": [], "mean_drift": 0.0,
        "max_drift": 0.0, "max_kl_divergence": 0.0, "resample_count": 0})  # fmt: skip


def load_events(
    settings: JobSettings,
    n: int,
    event_rate: int,
    seed: int = 5,
    windows: set[tuple[str, int]] | None = None,
) -> float:
    """Produce n events (keyed by doc type) whose event time advances as a stream sustaining
    `event_rate` events/s would, and when ``topics.summaries`` is set each one's summary
    too (same key), as the connectors write them; returns the produce rate in events/s.
    ``windows`` collects each (doc type, window start) the events fall in."""
    traffic = generate(TrafficConfig(seed=seed, minutes=20, doc_types=16, rate_scale=3.0))
    pool = [orjson.loads(r.raw) for r in traffic.records() if r.event is not None]
    start = pool[0]["event_time_ms"] - pool[0]["event_time_ms"] % MIN
    producer = Producer(client_config(settings.kafka, **{
        "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000}))  # fmt: skip
    summaries = settings.topics.summaries

    def send(topic: str, value: bytes, key: bytes) -> None:
        while True:
            try:
                producer.produce(topic, value, key)
                return
            except BufferError:
                producer.poll(0.05)

    started = time.perf_counter()
    for i in range(n):
        record = dict(pool[i % len(pool)])
        cycle = i // len(pool)
        record["event_id"] = f"{record['event_id']}-{cycle}"
        record["event_time_ms"] = start + i * 1000 // event_rate
        if windows is not None:
            windows.add((record["doc_type"], record["event_time_ms"] // MIN * MIN))
        value, key = orjson.dumps(record), record["doc_type"].encode()
        send(settings.topics.snapshots, value, key)
        if summaries:
            send(summaries, summary_of(value), key)
    producer.flush()
    return n / (time.perf_counter() - started)


def over(settings: JobSettings, source: str) -> JobSettings:
    """``settings`` whose drift job reads ``source`` (one of INPUTS): the snapshots topic
    when ``topics.summaries`` is empty, else the summaries topic (``topics.drift_input``)."""
    if source == "summaries":
        if not settings.topics.summaries:
            raise ValueError("topics.summaries is not set")
        return settings
    topics = settings.topics.model_copy(update={"summaries": ""})
    return settings.model_copy(update={"topics": topics})


def run_read_discard(settings: JobSettings, jar: Path) -> float:
    """The floor under any job over the topic: each record's bytes read from the drift
    job's input, bounded as the drift job's source is, into a blackhole; no JSON parsing.
    (Flink SQL has no length function for BYTES, CHAR_LENGTH takes text only, and a CAST
    to STRING would decode UTF-8, so the bytes themselves go into the sink.)"""
    _, t_env = drift_job.create_environment(settings, jar)
    raw = (
        TableDescriptor.for_connector("kafka")
        .schema(Schema.new_builder().column("record", DataTypes.BYTES()).build())
        .option("topic", settings.topics.drift_input)
        .option("properties.group.id", f"{settings.job.group_id}-raw")
        .option("scan.startup.mode", "earliest-offset")
        .option("properties.auto.offset.reset", "earliest")
        .option("scan.bounded.mode", "latest-offset")
        .option("format", "raw")
    )
    t_env.create_temporary_table(RAW, drift_job._with(raw, drift_job._kafka(settings)).build())
    t_env.execute_sql("CREATE TEMPORARY TABLE sink (record BYTES) WITH ('connector'='blackhole')")
    started = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink SELECT record FROM {RAW}").wait()  # noqa: S608
    return time.perf_counter() - started


def floor(mode: str) -> Callable[[JobSettings, Path], float]:
    """A floor job of jobs/jvm ReadFloor (``discard``, ``touch``, ``decode``, ``route`` or
    ``exchange``) over the drift job's input, with the drift job's own DataStream source;
    returns its runner."""

    def run(settings: JobSettings, jar: Path) -> float:
        from pyflink.java_gateway import get_gateway

        env, _ = drift_job.create_environment(settings, jar)
        o = settings.job
        get_gateway().jvm.dev.anchorwatch.flink.ReadFloor.build(
            env._j_stream_execution_environment, settings.topics.drift_input,
            f"{o.group_id}-floor-{mode}", drift_job.source_properties(settings), mode,
            o.window_size_s * 1000, o.watermark_delay_ms, o.idle_timeout_s * 1000,
            o.deduplicate, IDENTIFIER_MAX_CHARS, DOC_TYPE_MAX_CHARS)  # fmt: skip
        started = time.perf_counter()
        env.execute(f"floor {mode}")
        return time.perf_counter() - started

    return run


#: The floor jobs (`--floors`): name, runner, the source name Attribution splits on.
FLOORS = [
    ("read-discard, DataStream", floor("discard"), "floor discard"),
    ("read-touch-discard", floor("touch"), "floor touch"),
    ("read-decode-discard", floor("decode"), "floor decode"),
    ("read-route-discard", floor("route"), "floor route"),
    ("read-route-exchange-discard", floor("exchange"), "floor exchange"),
]


def run_discard(settings: JobSettings, jar: Path, decoder: str = "scanner") -> float:
    _, t_env = drift_job.create_environment(settings, jar)
    # The drift job's source: over topics.drift_input, the summaries when they are set (a
    # summary has every column read below).
    drift_job.declare_tables(t_env, settings, bounded=True)
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE sink (n BIGINT, d DOUBLE) WITH ('connector'='blackhole')"
    )
    started = time.perf_counter()
    # Uses every column the drift job reads, so the JSON work is the same.
    columns = (
        "event_time_ms + COALESCE(anchor_count, 0) + COALESCE(resample_count, 0) "
        "+ CHAR_LENGTH(event_id) + CHAR_LENGTH(doc_type) + CHAR_LENGTH(snapshot_status), "
        "mean_drift + max_drift + max_kl_divergence"
    )
    hint = f"/*+ OPTIONS('anchorwatch-json.decoder'='{decoder}') */"
    query = f"INSERT INTO sink SELECT {columns} FROM {drift_job.SNAPSHOTS} {hint}"  # noqa: S608
    t_env.execute_sql(query).wait()
    return time.perf_counter() - started


def run_discard_jackson(settings: JobSettings, jar: Path) -> float:
    return run_discard(settings, jar, decoder="jackson")


def run_drift(settings: JobSettings, jar: Path) -> float:
    started = time.perf_counter()
    drift_job.run(settings, jar, bounded=True).wait()
    return time.perf_counter() - started


def drift_with(**job_options: Any) -> Callable[[JobSettings, Path], float]:
    """``run_drift`` with these job settings changed."""

    def run(settings: JobSettings, jar: Path) -> float:
        job = settings.job.model_copy(update=job_options)
        return run_drift(settings.model_copy(update={"job": job}), jar)

    return run


run_drift_without_dedup = drift_with(deduplicate=False)
run_drift_on_rocksdb = drift_with(state_backend="rocksdb")


def topic_size(settings: JobSettings, topic: str) -> int:
    consumer = Consumer(client_config(settings.kafka, **{"group.id": "bench-size"}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            high - low
            for low, high in (
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta
            )
        )
    finally:
        consumer.close()
