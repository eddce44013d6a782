"""First slice of the drift job: count and average drift per doc type per event-time window.

Reads the snapshots topic, groups events into tumbling event-time windows per doc type and
writes one WindowAggregate per (doc type, window) to the windows topic. All per-event work
is Flink SQL in the JVM: no Python runs per event.
"""

from __future__ import annotations

from pathlib import Path

from pyflink.table import (
    DataTypes,
    EnvironmentSettings,
    Schema,
    Table,
    TableDescriptor,
    TableEnvironment,
    TableResult,
)

from anchorwatch.jobs.settings import JobSettings

SOURCE = "snapshots"
SINK = "windows"


def create_table_env(settings: JobSettings, connector_jar: Path) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    config.set("pipeline.jars", connector_jar.resolve().as_uri())
    config.set("parallelism.default", str(settings.job.parallelism))
    config.set("table.local-time-zone", "UTC")
    config.set("table.exec.source.idle-timeout", f"{settings.job.idle_timeout_s} s")
    config.set("pipeline.name", "anchorwatch-window-counts")
    return t_env


def _kafka_properties(settings: JobSettings) -> dict[str, str]:
    props = {"properties.bootstrap.servers": settings.kafka.bootstrap_servers}
    props.update({f"properties.{k}": v for k, v in settings.kafka.client_properties.items()})
    return props


def declare_tables(t_env: TableEnvironment, settings: JobSettings, *, bounded: bool) -> None:
    delay_ms = settings.job.watermark_delay_ms
    source = (
        TableDescriptor.for_connector("kafka")
        .schema(
            Schema.new_builder()
            .column("event_id", DataTypes.STRING())
            .column("event_time_ms", DataTypes.BIGINT())
            .column("doc_type", DataTypes.STRING())
            .column("snapshot_status", DataTypes.STRING())
            .column("anchor_count", DataTypes.INT())
            .column("mean_drift", DataTypes.DOUBLE())
            .column_by_expression("event_time", "TO_TIMESTAMP_LTZ(event_time_ms, 3)")
            # delay_ms is a validated int: nothing user-typed is pasted into SQL.
            .watermark("event_time", f"event_time - INTERVAL '{delay_ms / 1000:.3f}' SECOND")
            .build()
        )
        .option("topic", settings.topics.snapshots)
        .option("properties.group.id", settings.job.group_id)
        .option("scan.startup.mode", "earliest-offset" if bounded else settings.job.startup_mode)
        .option("properties.auto.offset.reset", "earliest")
        .option("format", "json")
        .option("json.fail-on-missing-field", "false")
        .option("json.ignore-parse-errors", "false")
    )
    if bounded:
        source = source.option("scan.bounded.mode", "latest-offset")
    for key, value in _kafka_properties(settings).items():
        source = source.option(key, value)
    t_env.create_temporary_table(SOURCE, source.build())

    sink = (
        TableDescriptor.for_connector("kafka")
        .schema(
            Schema.new_builder()
            .column("doc_type", DataTypes.STRING().not_null())
            .column("window_start_ms", DataTypes.BIGINT())
            .column("window_end_ms", DataTypes.BIGINT())
            .column("request_count", DataTypes.BIGINT())
            .column("mean_drift", DataTypes.DOUBLE())
            .build()
        )
        .option("topic", settings.topics.windows)
        .option("key.format", "raw")
        .option("key.fields", "doc_type")
        .option("value.format", "json")
        .option("value.fields-include", "ALL")
        .option("sink.delivery-guarantee", "at-least-once")
    )
    for key, value in _kafka_properties(settings).items():
        sink = sink.option(key, value)
    t_env.create_temporary_table(SINK, sink.build())


def window_counts(t_env: TableEnvironment, settings: JobSettings) -> Table:
    size_s = settings.job.window_size_s
    size_ms = size_s * 1000
    # Only validated integers and our own table name are interpolated into the SQL.
    # Tumbling windows are aligned to the epoch, so every event's floored time is the
    # window start in epoch milliseconds (no timestamp-to-number conversion needed).
    return t_env.sql_query(
        f"""
        SELECT
          doc_type,
          MIN(event_time_ms - MOD(event_time_ms, {size_ms})) AS window_start_ms,
          MIN(event_time_ms - MOD(event_time_ms, {size_ms})) + {size_ms} AS window_end_ms,
          COUNT(*) AS request_count,
          AVG(mean_drift) AS mean_drift
        FROM TABLE(
          TUMBLE(TABLE {SOURCE}, DESCRIPTOR(event_time), INTERVAL '{size_s}' SECOND)
        )
        GROUP BY doc_type, window_start, window_end
        """  # noqa: S608
    )


def run(settings: JobSettings, connector_jar: Path, *, bounded: bool) -> TableResult:
    """Submit the job to the local mini-cluster; ``bounded`` stops at the current end of
    the topic (for tests and the demo), otherwise it runs until cancelled."""
    t_env = create_table_env(settings, connector_jar)
    declare_tables(t_env, settings, bounded=bounded)
    return window_counts(t_env, settings).execute_insert(SINK)
