"""The Flink SQL job a user would write instead of the drift job: the peer `bench/job.py
--peer flink-sql` runs side by side with it.

What it computes: per doc type, one-minute tumbling event-time windows over the snapshot
records, each window's ``AVG(drift_score)`` and ``COUNT(*)``, keeping the windows whose
mean is above the static threshold (``HAVING AVG(...) > 0.85``, the policy's fallback
rule), written to a Kafka topic keyed by doc type. Two variants, both in the same rounds:

- ``unnest`` (the honest peer): every record's
  ``anchors`` array unnested, one row per anchor, ``AVG(a.drift_score)`` over the anchor
  rows of the window and ``COUNT(*)`` of them. This is what a user has to write when the
  record is what the gateway sends: drift lives in the anchors.
- ``mean``: the record's own ``mean_drift`` field (the contract writes it on every record:
  the mean of its anchors' drift scores), ``AVG(mean_drift)`` and ``COUNT(*)`` of records:
  the shortcut the anchorwatch contract gives a user, and the figure the drift job itself
  averages (each request weighted once, not by its number of anchors).

Why it is the fair peer: it reads the same topic, the same pre-produced full records (as a
gateway sends them), with Flink's standard ``json`` format and Kafka source, bounded at the
topic's end as the drift job is in the bench; its environment is the drift job's own
(``drift_job.create_environment``: parallelism, checkpoint interval and mode, watermark
interval, source idle timeout, object reuse) with checkpoints in files as
``drift_job.run`` keeps them; its watermark is the drift job's bounded out-of-orderness
(``event_time - job.watermark_delay_ms``), and it writes its rows to Kafka, as the drift job
writes its verdicts, at least once (both write at most a row per window: a Kafka sink
costs them the same, so it stays, rather than a blackhole). It does less than the drift
job: no validation or dead letters, no deduplication by ``event_id``, no late tally, one
figure per window instead of the window's figures judged against a baseline per doc type.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from pyflink.table import DataTypes, Schema, StreamTableEnvironment, TableDescriptor

from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config

#: The peer's source table, named for Attribution.split.
TABLE = "snapshots_json"
#: The unnest variant's view: one row per anchor.
ANCHOR_ROWS = "anchor_rows"
#: The peer's sink table.
SINK = "peer_windows"
#: The static rule's threshold (the policy's fallback).
THRESHOLD = 0.85
VARIANTS = ("unnest", "mean")


def output_topic(settings: JobSettings) -> str:
    """Where the peer writes its rows: beside the run's verdicts topic."""
    return f"{settings.topics.verdicts}.peer-sql"


def create_output_topic(settings: JobSettings) -> None:
    """The peer's output topic, with as many partitions as the verdicts topic (the broker
    creates no topic on its own)."""
    admin = AdminClient(client_config(settings.kafka))
    verdicts = settings.topics.verdicts
    partitions = len(admin.list_topics(verdicts, timeout=30).topics[verdicts].partitions)
    topic = output_topic(settings)
    if topic in admin.list_topics(timeout=30).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def declare_tables(
    t_env: StreamTableEnvironment, settings: JobSettings, variant: str, *, bounded: bool
) -> None:
    """The snapshots topic through Flink's ``json`` format (the columns ``variant`` reads),
    with the drift job's watermark; and the Kafka sink of the windows."""
    o = settings.job
    columns = (
        Schema.new_builder()
        .column("event_id", DataTypes.STRING())
        .column("event_time_ms", DataTypes.BIGINT())
        .column("doc_type", DataTypes.STRING())
    )
    if variant == "unnest":
        anchor = DataTypes.ROW([DataTypes.FIELD("drift_score", DataTypes.DOUBLE())])
        columns = columns.column("anchors", DataTypes.ARRAY(anchor))
    else:
        columns = columns.column("mean_drift", DataTypes.DOUBLE())
    schema = (
        columns.column_by_expression("event_time", "TO_TIMESTAMP_LTZ(event_time_ms, 3)")
        .watermark("event_time", f"event_time - {drift_job.seconds(o.watermark_delay_ms / 1000)}")
        .build()
    )
    source = (
        TableDescriptor.for_connector("kafka")
        .schema(schema)
        .option("topic", settings.topics.snapshots)
        .option("properties.group.id", f"{o.group_id}-peer-sql")
        .option("scan.startup.mode", "earliest-offset" if bounded else o.startup_mode)
        .option("properties.auto.offset.reset", "earliest")
        .option("format", "json")
        # A record that is not JSON is skipped instead of failing the job (the drift job
        # dead-letters it); every record of the bench is valid, so this costs nothing here.
        .option("json.ignore-parse-errors", "true")
    )
    bound = {"scan.bounded.mode": "latest-offset"} if bounded else {}
    options = {**drift_job._kafka(settings), **bound}
    t_env.create_temporary_table(TABLE, drift_job._with(source, options).build())
    sink = (
        TableDescriptor.for_connector("kafka")
        .schema(
            Schema.new_builder()
            .column("doc_type", DataTypes.STRING())
            .column("window_start", DataTypes.TIMESTAMP(3))
            .column("window_end", DataTypes.TIMESTAMP(3))
            .column("mean_drift", DataTypes.DOUBLE())
            .column("request_count", DataTypes.BIGINT())
            .build()
        )
        .option("topic", output_topic(settings))
        .option("key.format", "raw")
        .option("key.fields", "doc_type")
        .option("value.format", "json")
        .option("sink.delivery-guarantee", "at-least-once")
    )
    t_env.create_temporary_table(SINK, drift_job._with(sink, drift_job._kafka(settings)).build())


def query(settings: JobSettings, variant: str, threshold: float = THRESHOLD) -> str:
    """The peer's INSERT: per doc type and one-minute tumbling event-time window."""
    size = drift_job.seconds(settings.job.window_size_s)
    if variant == "unnest":
        # One row per anchor (the row's event time stays its record's, a time attribute).
        rows, drift = ANCHOR_ROWS, "drift_score"
    else:
        rows, drift = TABLE, "mean_drift"
    return f"""
        INSERT INTO {SINK}
        SELECT doc_type, window_start, window_end, AVG({drift}), COUNT(*)
        FROM TABLE(TUMBLE(TABLE {rows}, DESCRIPTOR(event_time), {size}))
        GROUP BY doc_type, window_start, window_end
        HAVING AVG({drift}) > {float(threshold)}
        """  # noqa: S608


def run_peer(
    settings: JobSettings,
    jar: Path,
    variant: str,
    *,
    bounded: bool = True,
    threshold: float = THRESHOLD,
) -> Any:
    """Submit the peer on the local mini-cluster (checkpoints in files, as ``drift_job.run``
    keeps them); returns the TableResult."""
    _, t_env = drift_job.create_environment(settings, jar)
    config = t_env.get_config()
    config.set("pipeline.name", f"anchorwatch-peer-sql-{variant}")
    if not settings.job.checkpoint_dir:
        local = Path(tempfile.gettempdir()) / "anchorwatch-checkpoints"
        config.set("execution.checkpointing.dir", local.as_uri())
    declare_tables(t_env, settings, variant, bounded=bounded)
    if variant == "unnest":
        select = "SELECT doc_type, event_time, a.drift_score FROM"
        unnest = "CROSS JOIN UNNEST(anchors) AS a (drift_score)"
        view = f"CREATE TEMPORARY VIEW {ANCHOR_ROWS} AS {select} {TABLE} {unnest}"
        t_env.execute_sql(view)
    return t_env.execute_sql(query(settings, variant, threshold))


def runner(variant: str, threshold: float = THRESHOLD) -> Any:
    """A bench/job.py runner of the peer (bounded): returns its wall time."""

    def run(settings: JobSettings, jar: Path) -> float:
        started = time.perf_counter()
        run_peer(settings, jar, variant, threshold=threshold).wait()
        return time.perf_counter() - started

    return run
