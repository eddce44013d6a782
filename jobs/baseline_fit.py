"""The baseline fit: a Flink batch job over snapshot history, then one fit per doc type.

    snapshots topic (bounded: from the earliest offset, or from --since, to the current
    end) or NDJSON snapshot files
      -> Flink SQL, batch, in the JVM: the drift job's record checks, then per doc type and
         one-minute event-time window: request count, mean drift
      -> Python, per doc type: anchorwatch.policy.fitting (median, MAD, quantiles, hourly
         profile, thresholds, minimum sample size)
      -> Baseline records keyed by doc type on the compacted baselines topic (and/or a file)

The per-event work is SQL (no Python runs per event); Python sees one row per window. The
windows are the drift job's windows: the same checks decide which records count, and the
same arithmetic (count, average of the requests' mean drift) makes the figures.

Windows already computed (the verdicts or windows topic, a CSV/NDJSON file) need no Flink:
``windows_from_topic`` and ``anchorwatch.history.read_windows`` read them for the fit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from pyflink.table import (
    EnvironmentSettings,
    Schema,
    Table,
    TableDescriptor,
    TableEnvironment,
)

from anchorwatch.baseline_publish import (  # the services (no pyflink) publish too
    BaselinePublishError as BaselinePublishError,
)
from anchorwatch.contracts import Baseline, ContractError, WindowAggregate, decode_baseline
from anchorwatch.errors import AnchorwatchError
from anchorwatch.history import window_from_row
from anchorwatch.jobs.baseline_settings import BaselineSettings
from anchorwatch.jobs.drift_job import checked_columns, invalid_condition
from anchorwatch.kafkaio import read_topic
from anchorwatch.settings import KafkaSettings

log = logging.getLogger(__name__)

HISTORY: Final = "snapshot_history"
#: How much earlier than --since a record may have been produced than its event time says
#: (clock skew between gateway and producer) and still be read.
PRODUCE_SKEW_MS: Final = 3_600_000


# --------------------------------------------------------------------------- the Flink part


def create_table_env(settings: BaselineSettings, connector_jar: Path | None) -> TableEnvironment:
    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    config = t_env.get_config()
    if connector_jar is not None:
        config.set("pipeline.jars", connector_jar.resolve().as_uri())
    config.set("parallelism.default", str(settings.job.parallelism))
    config.set("table.local-time-zone", "UTC")
    config.set("pipeline.name", "anchorwatch-baseline-fit")
    return t_env


def _schema() -> Any:
    # The columns the drift job's record checks read, and nothing per anchor.
    return checked_columns(Schema.new_builder()).build()


def declare_topic_source(
    t_env: TableEnvironment, settings: BaselineSettings, since_ms: int | None
) -> None:
    """The snapshots topic, bounded by the end offsets at the start of the run. With a
    start time, partitions are read from the first record produced after it (less a skew
    allowance): a record is produced after the request it describes."""
    descriptor = (
        TableDescriptor.for_connector("kafka")
        .schema(_schema())
        .option("topic", settings.topics.snapshots)
        .option("properties.group.id", settings.baseline.group_id)
        .option("scan.bounded.mode", "latest-offset")
        .option("format", "json")
        .option("json.ignore-parse-errors", "true")
        .option("properties.bootstrap.servers", settings.kafka.bootstrap_servers)
    )
    if since_ms is None:
        descriptor = descriptor.option("scan.startup.mode", "earliest-offset")
    else:
        descriptor = descriptor.option("scan.startup.mode", "timestamp").option(
            "scan.startup.timestamp-millis", str(max(0, since_ms - PRODUCE_SKEW_MS))
        )
    merged = {**settings.kafka.client_properties, **settings.kafka.java_properties}
    for key, value in merged.items():
        descriptor = descriptor.option(f"properties.{key}", value)
    t_env.create_temporary_table(HISTORY, descriptor.build())


def declare_file_source(t_env: TableEnvironment, paths: Sequence[Path]) -> None:
    """NDJSON snapshot events (files or directories of them), as on the snapshots topic.
    Lines that are not JSON objects are skipped; records failing the job's checks too."""
    if not paths:
        raise ValueError("paths: at least one file is needed")
    tables: list[Table] = []
    for i, path in enumerate(paths):
        if not path.exists():
            raise AnchorwatchError(f"{path}: no such file or directory")
        name = f"{HISTORY}_{i}"
        t_env.create_temporary_table(
            name,
            TableDescriptor.for_connector("filesystem")
            .schema(_schema())
            .option("path", str(path.resolve()))
            .option("format", "json")
            .option("json.ignore-parse-errors", "true")
            .build(),
        )
        tables.append(t_env.from_path(name))
    union = tables[0]
    for table in tables[1:]:
        union = union.union_all(table)
    t_env.create_temporary_view(HISTORY, union)


def window_aggregates(
    t_env: TableEnvironment, window_size_s: int, since_ms: int | None, until_ms: int | None
) -> Table:
    """Per doc type and window starting in [since, until): request count and mean drift."""
    size_ms = window_size_s * 1000
    bounds = []
    # Only validated integers and constant SQL are interpolated below.
    if since_ms is not None:
        bounds.append(f"window_start_ms >= {int(since_ms)}")
    if until_ms is not None:
        bounds.append(f"window_start_ms < {int(until_ms)}")
    where = f"WHERE {' AND '.join(bounds)}" if bounds else ""
    return t_env.sql_query(
        f"""
        SELECT doc_type, window_start_ms, COUNT(*) AS request_count,
               AVG(mean_drift) AS mean_drift
        FROM (
          SELECT doc_type, mean_drift,
                 event_time_ms - MOD(event_time_ms, {size_ms}) AS window_start_ms
          FROM {HISTORY}
          WHERE NOT ({invalid_condition()})
        )
        {where}
        GROUP BY doc_type, window_start_ms
        """  # noqa: S608
    )


def aggregate_history(
    settings: BaselineSettings,
    *,
    connector_jar: Path | None,
    files: Sequence[Path] = (),
    since_ms: int | None = None,
    until_ms: int | None = None,
    on_window: Callable[[], None] | None = None,
) -> list[WindowAggregate]:
    """Run the batch job on the local mini-cluster and collect its windows (sorted).
    Reads ``files`` when given, else the snapshots topic."""
    t_env = create_table_env(settings, connector_jar)
    if files:
        declare_file_source(t_env, files)
    else:
        declare_topic_source(t_env, settings, since_ms)
    size_ms = settings.job.window_size_s * 1000
    table = window_aggregates(t_env, settings.job.window_size_s, since_ms, until_ms)
    windows = []
    with table.execute().collect() as rows:
        for row in rows:
            windows.append(
                WindowAggregate(
                    doc_type=row[0],
                    window_start_ms=row[1],
                    window_end_ms=row[1] + size_ms,
                    request_count=row[2],
                    mean_drift=min(1.0, row[3]),  # a double sum may overshoot 1 by an ulp
                )
            )
            if on_window is not None:
                on_window()
    return sorted(windows, key=lambda w: (w.window_start_ms, w.doc_type))


# --------------------------------------------------------------------------- Kafka I/O


def windows_from_topic(
    kafka: KafkaSettings, topic: str, *, window_size_s: int = 60
) -> list[WindowAggregate]:
    """Window aggregates already on a topic: the verdicts topic (each verdict holds its
    window) or a windows topic. Invalid records are logged and skipped."""
    out = []
    skipped = 0
    for m in read_topic(kafka, topic):
        if m.value is None:
            continue
        try:
            out.append(window_from_row(orjson.loads(m.value), window_size_s * 1000))
        except (ValueError, ContractError):
            skipped += 1
    if skipped:
        log.warning("skipped records that hold no window", extra={"topic": topic, "n": skipped})
    return sorted(out, key=lambda w: (w.window_start_ms, w.doc_type))


def read_baselines(kafka: KafkaSettings, topic: str) -> dict[str, Baseline]:
    """The current baseline per doc type on the compacted topic: the latest record of each
    key wins, a tombstone (null value) removes the type."""
    out: dict[str, Baseline] = {}
    for m in read_topic(kafka, topic):
        key = m.key.decode("utf-8", errors="replace") if m.key is not None else None
        if m.value is None:
            if key is not None:
                out.pop(key, None)
            continue
        try:
            baseline = decode_baseline(m.value)
        except ContractError as exc:
            log.error("ignoring an invalid baseline record", extra={"error": str(exc)})
            continue
        out[baseline.doc_type] = baseline
    return out
