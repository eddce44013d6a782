"""The drift job: per doc type, one-minute event-time windows judged against baselines.

    snapshots (Kafka, JSON) --per event, in the JVM (jobs/jvm DriftFront)-------------.
      valid    -> split by the watermark:                                                |
      on time  -> tumbling event-time windows per doc type: count, mean, max, p95,       |
                  stddev, anchors, data-quality shares, mean KL, each event_id once      |
                  (`deduplicate`; WindowFiguresOperator, a small record per event), and  |
                  the breakdown (anchor kinds, top anchors, models, latency p50/p95)     |
      late     -> SQL: tallied per doc type every `late_report_s` (processing time)      |
      invalid  -> SQL: dead-letter topic (field and reason named; partition and offset   |
                  kept), including records that are not JSON objects (their text kept)   |
    baselines (compacted Kafka topic) ------------------------------------------------.  |
                                                                                      v  v
      Python, per window (not per event): keyed by doc type, keeps the latest baseline,
      the late tally and the flat-line state (jobs/judge.py, pure), judges the window
      with anchorwatch.policy.window.judge_window -> verdicts (Kafka)

Late events are not dropped silently: an event is late when its source task's watermark
has passed it (as SQL's `CURRENT_WATERMARK` there); such events are counted and reported in
the next verdict of their doc type (`window.late_count`). So is an event that passed its
own task as on time but finds its window already fired (its partition was idle while the
others moved the watermark on).

Counted once: a client retry or a producer resend can put an event on the topic twice;
each event_id counts at most once in its window (a copy has its original's doc type and
event time, so it lands in the same window) and once per late-tally interval.

Delivery: Kafka sinks are at-least-once. Verdict ids are deterministic (doc type, window
start, job version), so consumers deduplicate; exactly-once sinks would hold every verdict
back until the next checkpoint completes, adding up to `checkpoint_interval_s` of latency
to every alert.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from pyflink.common import Row, Types
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor
from pyflink.table import (
    DataTypes,
    Schema,
    StatementSet,
    StreamTableEnvironment,
    TableDescriptor,
)

from anchorwatch.contracts import (
    DOC_TYPE_MAX_CHARS,
    IDENTIFIER_MAX_CHARS,
    BaselinePin,
    ContractError,
    decode_baseline,
    encode,
)
from anchorwatch.jobs.judge import DocTypeJudge, JudgeState
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import producer_max_bytes, record_limit
from anchorwatch.policy.window import QualityLimits, StaticRule

log = logging.getLogger(__name__)

#: Part of every verdict id: bump when a change alters verdicts for the same input.
#: 2: each event_id counted once per window. 3: flat lines across windows and drops to a
#: quarter of the normal level diagnosed. 4: ids remembered per window and late interval
#: (a copy arriving after its window fired is tallied late), figures summed in arrival order.
#: 5: the per-event path in the JVM; an event that finds its window fired (its partition
#: idle meanwhile) is tallied late instead of dropped. 6: the window's breakdown
#: (anchorwatch.contracts.breakdown: kinds, top anchors, models, latency).
JOB_VERSION = "6"

SNAPSHOTS = "snapshots"
BASELINES = "baselines"
VERDICTS = "verdicts"
DEAD_LETTER = "dead_letter"

# Window figures handed from SQL to the per-window Python code, in this order (jobs/jvm
# DriftFront.WINDOW_COLUMNS). `breakdown`: the window's breakdown as JSON (WindowBreakdown).
WINDOW_FIELDS = (
    "doc_type", "kind", "window_start_ms", "window_end_ms", "request_count", "mean_drift",
    "max_drift", "p95_drift", "stddev_drift", "anchor_count", "disabled_share",
    "zero_anchor_share", "resample_share", "mean_kl_divergence", "breakdown", "letter",
)  # fmt: skip


def breakdown_figures(text: str | None) -> dict[str, Any]:
    """The WindowAggregate fields of a window's ``breakdown`` column (kinds, top_anchors,
    models, other_models, latency_count and, when a request had a latency, latency_p50_ms
    and latency_p95_ms); none for a window without one. ``DocTypeJudge.judge`` checks them
    against the contract."""
    if not text:
        return {}
    figures: dict[str, Any] = orjson.loads(text)
    return figures


def seconds(value: float) -> str:
    """A SQL interval of ``value`` seconds, to the millisecond. Spelled DAY TO SECOND: a
    plain ``SECOND`` interval holds at most two digits, so 100 s or more would not parse."""
    ms = round(value * 1000)
    days, ms = divmod(ms, 86_400_000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    return f"INTERVAL '{days} {hours:02d}:{minutes:02d}:{ms / 1000:06.3f}' DAY TO SECOND(3)"


def create_environment(
    settings: JobSettings, connector_jar: Path | None
) -> tuple[StreamExecutionEnvironment, StreamTableEnvironment]:
    """Environment for the local mini-cluster, or (when the Flink CLI runs this module) for
    the cluster it submits to. ``connector_jar`` is None when the CLI ships the jar."""
    env = StreamExecutionEnvironment.get_execution_environment()
    if connector_jar is not None:
        # Before the table environment exists, so its planner's class loader sees the jar.
        env.add_jars(connector_jar.resolve().as_uri())
    t_env = StreamTableEnvironment.create(env)
    o = settings.job
    config = t_env.get_config()
    python = str(o.python_executable or sys.executable)
    config.set("python.executable", python)
    config.set("python.client.executable", python)
    config.set("parallelism.default", str(o.parallelism))
    # The per-event path is built on the stream environment, which reads none of the above.
    env.set_parallelism(o.parallelism)
    # No operator holds on to a record it passed on, so chained operators can share it
    # instead of each getting a copy (the source's route feeds its events and a side output).
    config.set("pipeline.object-reuse", "true")
    env.get_config().enable_object_reuse()
    # Python runs once per window, so small bundles cost nothing and keep verdict latency
    # down (the default holds elements for up to a second), and so does a watermark every
    # 50 ms instead of 200: a window fires when the watermark passes its end. Together they
    # took the verdict p99 after the watermark from about 500 to about 300 ms (benchmarks.md).
    config.set("python.fn-execution.bundle.time", "20")
    config.set("pipeline.auto-watermark-interval", "50 ms")
    env.get_config().set_auto_watermark_interval(50)
    config.set("table.local-time-zone", "UTC")
    config.set("table.exec.source.idle-timeout", f"{o.idle_timeout_s} s")
    config.set("pipeline.name", "anchorwatch-drift")
    config.set("execution.checkpointing.interval", f"{o.checkpoint_interval_s} s")
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    if o.checkpoint_dir:
        config.set("execution.checkpointing.dir", o.checkpoint_dir)
    if o.state_backend is not None:
        config.set("state.backend.type", o.state_backend)
    # The window figures change the windows they count in place between checkpoints and
    # hand them to the state before each barrier; the changelog backend snapshots without
    # that hook, so it stays off whatever the cluster's default.
    config.set("state.changelog.enabled", "false")
    if o.state_backend == "rocksdb":
        # Upload only the files that changed since the last checkpoint.
        config.set("execution.checkpointing.incremental", "true")
    return env, t_env


def _kafka(settings: JobSettings) -> dict[str, str]:
    props = {"properties.bootstrap.servers": settings.kafka.bootstrap_servers}
    merged = {**settings.kafka.client_properties, **settings.kafka.java_properties}
    props.update({f"properties.{k}": v for k, v in merged.items()})
    return props


def _with(descriptor: Any, options: dict[str, str]) -> Any:
    for key, value in options.items():
        descriptor = descriptor.option(key, value)
    return descriptor


def declare_tables(
    t_env: StreamTableEnvironment,
    settings: JobSettings,
    *,
    bounded: bool,
    breakdown: bool = False,
) -> None:
    """``breakdown``: the snapshots table has the breakdown's columns too (model,
    latency_ms, and kinds and top_anchors as their JSON text)."""
    o, topics = settings.job, settings.topics
    start = "earliest-offset" if bounded else o.startup_mode
    bound = {"scan.bounded.mode": "latest-offset"} if bounded else {}
    delay_s = o.watermark_delay_ms / 1000
    # The snapshots as a table, with the columns, format and watermark the job's per-event
    # path (DriftFront) reads them with: for the benchmarks' read-parse-discard and the
    # format's tests. The job itself does not scan this table. The Kafka table source
    # decodes every column declared (no projection pushdown): the breakdown's are left out
    # unless asked for, so read-parse-discard reads what the job read before the breakdown
    # (the job's reading of it counts as its logic); the summaries' binary form would have
    # to be written out as JSON text for them, which the job never does.
    columns = (
        checked_columns(Schema.new_builder())
        .column("max_drift", DataTypes.DOUBLE())
        .column("max_kl_divergence", DataTypes.DOUBLE())
        .column("resample_count", DataTypes.INT())
    )
    if breakdown:
        columns = (
            columns.column("model", DataTypes.STRING())
            .column("latency_ms", DataTypes.INT())
            # JSON columns: the object's or array's text (format option json-columns).
            .column("kinds", DataTypes.STRING())
            .column("top_anchors", DataTypes.STRING())
        )
    snapshots = (
        TableDescriptor.for_connector("kafka")
        .schema(
            columns
            # Set (to the record's text) only for a record that is not a JSON object.
            .column(UNPARSABLE, DataTypes.STRING())
            .column_by_metadata("kafka_partition", DataTypes.INT(), "partition", True)
            .column_by_metadata("kafka_offset", DataTypes.BIGINT(), "offset", True)
            .column_by_expression("event_time", "TO_TIMESTAMP_LTZ(event_time_ms, 3)")
            .column_by_expression("proc_time", "PROCTIME()")
            # A validated number, not user text, goes into this expression.
            .watermark("event_time", f"event_time - {seconds(delay_s)}")
            .build()
        )
        # The summaries when they are written (the same fields, without the anchor log).
        .option("topic", topics.drift_input)
        .option("properties.group.id", o.group_id)
        .option("scan.startup.mode", start)
        .option("properties.auto.offset.reset", "earliest")
        # Flink's JSON decoding (a field of the wrong type becomes NULL and is dead-lettered
        # below, naming it, instead of failing the job) that also keeps a record which is
        # not a JSON object, in UNPARSABLE, instead of skipping it: one reader sees all.
        .option("format", "anchorwatch-json")
        .option("anchorwatch-json.payload-column", UNPARSABLE)
        .option("anchorwatch-json.json-columns", "kinds;top_anchors")
    )
    t_env.create_temporary_table(SNAPSHOTS, _with(snapshots, {**_kafka(settings), **bound}).build())

    baselines = (
        TableDescriptor.for_connector("kafka")
        .schema(Schema.new_builder().column("baseline", DataTypes.STRING()).build())
        .option("topic", topics.baselines)
        .option("properties.group.id", f"{o.group_id}-baselines")
        .option("scan.startup.mode", "earliest-offset")
        .option("format", "raw")
    )
    t_env.create_temporary_table(BASELINES, _with(baselines, {**_kafka(settings), **bound}).build())

    def keyed_sink(topic: str, value_column: str) -> Any:
        return (
            TableDescriptor.for_connector("kafka")
            .schema(
                Schema.new_builder()
                .column("doc_type", DataTypes.STRING())
                .column(value_column, DataTypes.STRING())
                .build()
            )
            .option("topic", topic)
            .option("key.format", "raw")
            .option("key.fields", "doc_type")
            .option("value.format", "raw")
            .option("value.fields-include", "EXCEPT_KEY")
            .option("sink.delivery-guarantee", "at-least-once")
            # The size chain (anchorwatch.kafkaio.record_limit): the Java producer's default
            # of 1 MB would fail the whole job on one large dead letter.
            .option("properties.max.request.size", str(producer_max_bytes(topics)))
        )

    t_env.create_temporary_table(
        VERDICTS, _with(keyed_sink(topics.verdicts, "verdict"), _kafka(settings)).build()
    )
    t_env.create_temporary_table(
        DEAD_LETTER, _with(keyed_sink(topics.dead_letter, "letter"), _kafka(settings)).build()
    )


#: Column of the snapshots table holding a record that is not a JSON object (format
#: anchorwatch-json, built from jobs/jvm); NULL for every other record.
UNPARSABLE = "unparsable_payload"

# Every check a record must pass, as (field, reason, SQL that is TRUE when it fails).
# The connectors validate fully; this guards the job against other producers of the topic.
_CHECKS = (
    ("event_id", "required field is missing or not a string", "event_id IS NULL"),
    ("event_id", f"longer than {IDENTIFIER_MAX_CHARS} characters",
     f"CHAR_LENGTH(event_id) > {IDENTIFIER_MAX_CHARS}"),
    ("event_time_ms", "required field is missing or not an integer", "event_time_ms IS NULL"),
    ("doc_type", "required field is missing or empty", "doc_type IS NULL OR doc_type = ''"),
    ("doc_type", f"longer than {DOC_TYPE_MAX_CHARS} characters",
     f"CHAR_LENGTH(doc_type) > {DOC_TYPE_MAX_CHARS}"),
    ("snapshot_status", "must be 'active' or 'disabled'",
     "snapshot_status IS NULL OR snapshot_status NOT IN ('active', 'disabled')"),
    ("anchor_count", "required, a non-negative integer",
     "anchor_count IS NULL OR anchor_count < 0"),
    ("mean_drift", "required, between 0 and 1",
     "mean_drift IS NULL OR mean_drift < 0 OR mean_drift > 1"),
)  # fmt: skip


_NOT_AN_OBJECT = ("$", "not a JSON object", f"{UNPARSABLE} IS NOT NULL")


def checked_columns(builder: Any) -> Any:
    """``builder`` with the columns of a snapshot event that _CHECKS reads (the baseline fit
    reads snapshots with these too)."""
    return (
        builder.column("event_id", DataTypes.STRING())
        .column("event_time_ms", DataTypes.BIGINT())
        .column("doc_type", DataTypes.STRING())
        .column("snapshot_status", DataTypes.STRING())
        .column("anchor_count", DataTypes.INT())
        .column("mean_drift", DataTypes.DOUBLE())
    )


def invalid_condition() -> str:
    """SQL that is TRUE for a decoded record with an invalid field (the baseline fit reads
    snapshots with this too)."""
    return " OR ".join(f"({cond})" for _, _, cond in _CHECKS)


def _reason_expression() -> str:
    def literal(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    cases = " ".join(
        f"WHEN {cond} THEN {literal(f'{field}: {reason}')}"
        for field, reason, cond in (_NOT_AN_OBJECT, *_CHECKS)
    )
    return f"CASE {cases} END"


#: Every figure of a window from the valid events, in one aggregate (jobs/jvm WindowFigures).
FIGURES_FUNCTION = "window_figures"
FIGURES_CLASS = "dev.anchorwatch.flink.WindowFigures"


#: Records that are not a valid on-time event, from the per-event path (DriftFront.others).
OTHERS = "other_snapshots"


def source_properties(settings: JobSettings) -> Any:
    """The Kafka client properties of the job's DataStream source (jobs/jvm DriftFront), as
    the Java map it takes."""
    from pyflink.java_gateway import get_gateway

    properties = get_gateway().jvm.java.util.HashMap()
    for key, value in _kafka(settings).items():
        properties.put(key.removeprefix("properties."), value)
    properties.put("auto.offset.reset", "earliest")
    return properties


def _front(t_env: StreamTableEnvironment, settings: JobSettings, *, bounded: bool) -> Any:
    """The job's per-event path (jobs/jvm DriftFront) on ``t_env``'s stream environment."""
    from pyflink.java_gateway import get_gateway

    o, topics = settings.job, settings.topics
    return get_gateway().jvm.dev.anchorwatch.flink.DriftFront.build(
        t_env._j_tenv.execEnv(),
        topics.drift_input,
        o.group_id,
        "earliest-offset" if bounded else o.startup_mode,
        bounded,
        source_properties(settings),
        o.window_size_s * 1000,
        o.watermark_delay_ms,
        o.idle_timeout_s * 1000,
        o.deduplicate,
        o.late_report_s * 1000,
        IDENTIFIER_MAX_CHARS,
        DOC_TYPE_MAX_CHARS,
    )


def build(
    t_env: StreamTableEnvironment, settings: JobSettings, *, bounded: bool = False
) -> StatementSet:
    """Wire the whole job into one statement set (tables must be declared first).

    Windows, late tallies and dead letters are one union handed to the per-window Python
    stage, so the whole job is one plan and the snapshots topic is read once."""
    o = settings.job
    nulls = ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in _NULL_FIGURES)
    source = (
        f"CONCAT('drift-job:', '{settings.topics.drift_input}', '/', "
        "CAST(kafka_partition AS STRING), '@', CAST(kafka_offset AS STRING))"
    )
    front = _front(t_env, settings, bounded=bounded)
    others = t_env.from_data_stream(
        DataStream(front.getOthers()),
        Schema.new_builder().column_by_expression("proc_time", "PROCTIME()").build(),
    )
    t_env.create_temporary_view(OTHERS, others)
    t_env.create_java_temporary_function(FIGURES_FUNCTION, FIGURES_CLASS)
    dedup = "TRUE" if o.deduplicate else "FALSE"
    # The late tally: each event_id counted once per interval when deduplicating (the judge
    # reads only its count).
    late_tally = t_env.sql_query(
        f"""
        SELECT doc_type, CAST('late' AS STRING) AS kind,
          CAST(NULL AS BIGINT) AS window_start_ms, CAST(NULL AS BIGINT) AS window_end_ms,
          w.f.request_count AS request_count, {nulls}, CAST(NULL AS STRING) AS letter
        FROM (
          SELECT doc_type,
            {FIGURES_FUNCTION}(event_id, mean_drift, anchor_count, snapshot_status,
                               resample_count, max_kl_divergence, {dedup}) AS f
          FROM TABLE(TUMBLE((SELECT * FROM {OTHERS} WHERE late), DESCRIPTOR(proc_time),
                            {seconds(o.late_report_s)}))
          GROUP BY doc_type, window_start, window_end) AS w
        """  # noqa: S608
    )
    windows = t_env.from_data_stream(DataStream(front.getWindows()))
    # A dead letter keeps the record's text up to what fits under the record limit even if
    # JSON writes every character as 6 bytes (\u0001), key and fields included; a longer one
    # is cut, and its reason gives the length and the sha256 of the whole text.
    keep = (record_limit(settings.topics) - 4 * DOC_TYPE_MAX_CHARS - 16 * 1024) // 6
    invalid = t_env.sql_query(
        f"""
        SELECT
          SUBSTRING(COALESCE(doc_type, ''), 1, {DOC_TYPE_MAX_CHARS}) AS doc_type,
          CAST('dead_letter' AS STRING) AS kind,
          CAST(NULL AS BIGINT) AS window_start_ms,
          CAST(NULL AS BIGINT) AS window_end_ms,
          CAST(NULL AS BIGINT) AS request_count,
          {nulls},
          JSON_OBJECT(
            KEY 'raw' VALUE CASE WHEN CHAR_LENGTH(raw_text) > {keep}
                            THEN SUBSTRING(raw_text, 1, {keep}) ELSE raw_text END,
            KEY 'reason' VALUE CASE WHEN CHAR_LENGTH(raw_text) > {keep}
              THEN CONCAT(problem, ' [raw cut to its first {keep} of ',
                          CAST(CHAR_LENGTH(raw_text) AS STRING),
                          ' characters; sha256 of all: ', SHA256(raw_text), ']')
              ELSE problem END,
            KEY 'field' VALUE SPLIT_INDEX(problem, ':', 0),
            KEY 'source' VALUE {source},
            KEY 'rejected_at_ms' VALUE UNIX_TIMESTAMP() * 1000) AS letter
        FROM (
          SELECT *,
            COALESCE({UNPARSABLE}, JSON_STRING(JSON_OBJECT(
              KEY 'event_id' VALUE event_id, KEY 'event_time_ms' VALUE event_time_ms,
              KEY 'doc_type' VALUE doc_type, KEY 'snapshot_status' VALUE snapshot_status,
              KEY 'anchor_count' VALUE anchor_count, KEY 'mean_drift' VALUE mean_drift)))
              AS raw_text,
            {_reason_expression()} AS problem
          FROM {OTHERS}
          WHERE NOT late)
        """  # noqa: S608
    )
    figures = windows.union_all(late_tally).union_all(invalid)
    judge = JudgeWindows(
        JOB_VERSION,
        settings.policy.fallback,
        QualityLimits(o.quality_zero_anchor_share, o.quality_disabled_share,
                      o.quality_resample_share, o.quality_mean_kl_divergence),
        settings.policy.settings_pins(),
    )  # fmt: skip
    baselines = t_env.to_data_stream(t_env.from_path(BASELINES))
    outputs = (
        t_env.to_data_stream(figures)
        .key_by(lambda row: row[0], key_type=Types.STRING())
        .connect(baselines.key_by(_baseline_key, key_type=Types.STRING()))
        .process(judge, output_type=Types.ROW_NAMED(["kind", "doc_type", "payload"],
                                                    [Types.STRING()] * 3))
        .name("judge windows")
    )  # fmt: skip
    t_env.create_temporary_view("outputs", t_env.from_data_stream(outputs))
    statements = t_env.create_statement_set()
    for table, kind in ((VERDICTS, "verdict"), (DEAD_LETTER, "dead_letter")):
        statements.add_insert_sql(
            f"INSERT INTO {table} SELECT NULLIF(doc_type, ''), payload FROM outputs "  # noqa: S608
            f"WHERE kind = '{kind}'"
        )
    return statements


_NULL_FIGURES = (
    ("mean_drift", "DOUBLE"), ("max_drift", "DOUBLE"), ("p95_drift", "DOUBLE"),
    ("stddev_drift", "DOUBLE"), ("anchor_count", "BIGINT"), ("disabled_share", "DOUBLE"),
    ("zero_anchor_share", "DOUBLE"), ("resample_share", "DOUBLE"),
    ("mean_kl_divergence", "DOUBLE"), ("breakdown", "STRING"),
)  # fmt: skip


def _baseline_key(row: Row) -> str:
    try:
        return decode_baseline(row[0] or b"").doc_type
    except ContractError:
        # Unusable baselines all land on one key, where process_element2 logs and drops them.
        return ""


class JudgeWindows(KeyedCoProcessFunction):  # type: ignore[misc]
    """Per doc type, in Flink's keyed state: the logic of ``DocTypeJudge`` (latest baseline,
    late tally, flat-line state), which this adapter loads and stores around each call.
    Runs once per window, not per event."""

    def __init__(
        self,
        job_version: str,
        static: StaticRule,
        quality: QualityLimits,
        pins: Mapping[str, BaselinePin] | None = None,
    ) -> None:
        self.job_version = job_version
        self.static = static
        self.quality = quality
        self.pins = dict(pins or {})  # the pins in settings, by doc type

    def open(self, runtime_context: RuntimeContext) -> None:
        self.baseline = runtime_context.get_state(ValueStateDescriptor("baseline", Types.STRING()))
        self.late = runtime_context.get_state(ValueStateDescriptor("late", Types.LONG()))
        # Added with flat lines; a savepoint from before has none and starts it afresh.
        self.flat = runtime_context.get_state(ValueStateDescriptor("flat", Types.STRING()))

    def _load(self) -> DocTypeJudge:
        state = JudgeState(
            baseline=self.baseline.value(),
            late=self.late.value() or 0,
            flat=JudgeState.flat_from_json(self.flat.value()),
        )
        return DocTypeJudge(self.job_version, self.static, self.quality, state, self.pins)

    def process_element1(self, row: Row, ctx: KeyedCoProcessFunction.Context) -> Iterator[Row]:
        figures = dict(zip(WINDOW_FIELDS, row, strict=True))
        doc_type, kind, letter = figures.pop("doc_type"), figures.pop("kind"), figures.pop("letter")
        if kind == "dead_letter":
            yield Row("dead_letter", doc_type, letter)
            return
        judge = self._load()
        if kind == "late":
            judge.add_late(figures["request_count"])
            self.late.update(judge.state.late)
            return
        figures.update(breakdown_figures(figures.pop("breakdown")))
        verdict = judge.judge({"doc_type": doc_type, **figures})
        self.late.clear()
        self.flat.update(judge.state.flat_json())
        yield Row("verdict", doc_type, encode(verdict).decode())

    def process_element2(self, row: Row, ctx: KeyedCoProcessFunction.Context) -> Iterator[Row]:
        judge = self._load()
        try:
            judge.add_baseline(row[0] or "")
        except ContractError as exc:
            log.error("ignoring an invalid baseline record", extra={"error": str(exc)})
            return
        if judge.state.baseline is not None:
            self.baseline.update(judge.state.baseline)
        yield from ()


def run(
    settings: JobSettings, connector_jar: Path, *, bounded: bool, savepoint: str | None = None
) -> Any:
    """Run on the local mini-cluster; ``bounded`` stops at the current end of the topics.
    Returns the TableResult (``.wait()`` blocks until a bounded run is done)."""
    _, t_env = create_environment(settings, connector_jar)
    if not settings.job.checkpoint_dir:
        # The mini-cluster's default keeps checkpoints in the JobManager's memory, 5 MB at
        # most: the deduplication's ids outgrow that within seconds at full rate (every
        # checkpoint failed and the job restarted, over and over). Files instead; Flink
        # deletes a job's checkpoints when it finishes or is cancelled.
        local = Path(tempfile.gettempdir()) / "anchorwatch-checkpoints"
        t_env.get_config().set("execution.checkpointing.dir", local.as_uri())
    if savepoint:
        t_env.get_config().set("execution.state-recovery.path", savepoint)
    declare_tables(t_env, settings, bounded=bounded)
    return build(t_env, settings, bounded=bounded).execute()


#: `anchorwatch job submit` hands its validated settings to this module through this variable.
SETTINGS_ENV = "ANCHORWATCH_JOB_SETTINGS_JSON"


def main(argv: list[str] | None = None) -> None:
    """Entry point when the Flink CLI runs this module (``anchorwatch job submit``): settings
    come from SETTINGS_ENV or, when run by hand, the environment / ANCHORWATCH_CONFIG; the
    connector jar from the CLI's ``--jarfile``."""
    import os

    from anchorwatch import logs

    logs.configure()
    handed = os.environ.get(SETTINGS_ENV)
    settings = JobSettings.model_validate_json(handed) if handed else JobSettings.load()
    _, t_env = create_environment(settings, connector_jar=None)
    bounded = "--bounded" in (argv or sys.argv[1:])
    declare_tables(t_env, settings, bounded=bounded)
    build(t_env, settings, bounded=bounded).execute()


if __name__ == "__main__":
    main()
