"""Throughput, latency and memory of the drift job, side by side with a read-discard and a
read-parse-discard job over the same topic, in one run on this machine.

    .venv/bin/python bench/job.py --events 3000000 --rounds 3
    .venv/bin/python bench/job.py --events 2000000 --rounds 1 --event-rate 20   # replaying history
    .venv/bin/python bench/job.py --events 3000000 --rounds 3 --dedup both      # dedup's cost
    .venv/bin/python bench/job.py --events 1500000 --rounds 3 --jackson         # the scanner's gain
    .venv/bin/python bench/job.py --events 3000000 --rounds 2 --input summaries # topics.summaries
    .venv/bin/python bench/job.py --events 3000000 --rounds 2 --input both      # summaries' gain
    .venv/bin/python bench/job.py --events 3000000 --rounds 2 --rocksdb         # its state cost
    .venv/bin/python bench/job.py --events 5000000 --rounds 3 --input summaries --floors

1. Starts a private Kafka (free ports, temporary directory) and loads N realistic snapshot
   events (from the traffic generator, replayed with fresh ids and new event times).
   Event time advances as in a stream sustaining `--event-rate` events/s (default 100k/s,
   the target), so windows hold as many events as they would at that rate.
   `--input` picks the topic the jobs read: `snapshots` (the default, the full events),
   `summaries` (`topics.summaries` set: each event is also written without its anchor log,
   as the connectors write it, `validation.summary_of`, and the drift job reads that topic,
   `topics.drift_input`), or `both`: the same events on both topics, every job below run
   over each input in the same rounds (names end in [snapshots] / [summaries]), and the
   summaries' gain printed side by side.
2. Runs, each bounded over the same topic on the embedded mini-cluster, with the same
   parallelism: (a) read-discard: the same topic through the `raw` format, each record's
   bytes into a blackhole sink, no JSON parsing (the floor: Kafka, the source, the sink);
   (b) read-parse-discard: the drift job's source and format, every column the drift job
   reads, into a blackhole sink; (c) the drift job as deployed. Each rate is
   N / (wall time - fixed cost), the fixed cost (job start, Python workers, stop) being a
   run of the same job over a 1,000-event topic just before; also the CPU seconds per event
   of the JVM and its Python workers (big run minus small run), which other load on the
   machine disturbs far less than wall time; and, from Java Flight Recorder samples of the
   same run, the CPU the job spends downstream of reading and parsing, as a share of the
   CPU spent reading and parsing: the cost of the job's logic, immune to machine load.
   `--rounds` alternates the jobs, after `--warmup-rounds` (default 1) unmeasured rounds
   of them all over the same topic, so that no measured run pays for compiling the code the
   jobs share (Kafka's reading, the source); medians and ratios (each job against read-parse-discard
   and read-discard over the same input) are printed. `--dedup both` also
   runs the drift job without its event_id deduplication in the same rounds, and prints
   what deduplicating costs. `--jackson` also runs read-parse-discard with the format's
   `decoder` 'jackson' (Flink's JSON decoder for every record, the format before its byte
   scanner) in the same rounds. `--rocksdb` also runs the drift job with its state in
   RocksDB (`job.state_backend`) in the same rounds. `--floors` also runs the floor jobs
   over the drift job's own DataStream source (jobs/jvm ReadFloor): read-discard with it,
   read-touch-discard (every byte of each record loaded once, nothing decoded) and
   read-decode-discard (each record decoded as the drift job decodes it, then dropped),
   read-route-discard (decoded, watermarked and routed into the drift job's batches, which
   are dropped) and read-route-exchange-discard (the batches sent across the keyed exchange
   too): each a step further along the drift job's path, so that the cost of each step is
   told apart in one run.
3. Latency: runs the drift job unbounded from the latest offsets (watermark delay 0) and
   first waits until its Kafka source holds a position on every partition of the topic it
   reads: Flink's source assigns the partitions itself (no consumer-group membership to
   see) and resolves "latest" to offsets when it assigns them, and commits those positions
   to the job's consumer group at each checkpoint, so the bench polls the group's committed
   offsets with the Kafka admin client until every partition has one (up to about
   job.checkpoint_interval_s after the job starts). Then, per sample, it sends two events,
   one in window i and one in window i+1 whose event time moves the watermark past window
   i's end. The clock starts just before the two are produced, so it spans the produce and
   the broker's acknowledgement (flush), the job reading them, firing window i and writing
   its verdict, and a consumer reading that verdict from the verdicts topic. Reported:
   p50 / p99 / max over --latency-samples windows (two more before them are not counted:
   they include the job's warm-up); a window whose verdict has not been read within
   --latency-cap seconds (default 30) is a miss, counted in the quantiles as +infinity, and
   the misses are counted. It reads the summaries topic when `--input` is `summaries` or
   `both`, else the snapshots.
4. Memory: peak RSS of the mini-cluster JVM (it is the TaskManager here) during each run,
   its heap, direct memory and metaspace bounded by the job settings local_heap_mb,
   local_direct_mb and local_metaspace_mb (as `job run` does).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psutil
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyflink.table import DataTypes, Schema, TableDescriptor

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import DOC_TYPE_MAX_CHARS, IDENTIFIER_MAX_CHARS
from anchorwatch.demo import slice as flow
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.stack import private_kafka
from bench.quantiles import MISS, misses, quantile

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


class Watch:
    """While a run lasts, samples a JVM and the Python workers it starts (by default this
    process's Java child, the mini-cluster's TaskManager; or the process ``pid``): the JVM's
    peak RSS, its workers' peak RSS together, and the CPU seconds all of them spend. CPU per
    event is the figure other load on the machine disturbs least."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.peak_rss = 0
        self.peak_workers_rss = 0
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self) -> list[psutil.Process]:
        out = []
        for root in self._roots():
            with contextlib.suppress(psutil.Error):
                out += [root, *root.children(recursive=True)]
        return out

    def _roots(self) -> list[psutil.Process]:
        roots = []
        if self.pid is not None:
            with contextlib.suppress(psutil.Error):
                roots.append(psutil.Process(self.pid))
            return roots
        for child in psutil.Process().children():
            # Not the broker (also a Java child here): both jobs read the same records.
            with contextlib.suppress(psutil.Error):
                if "java" in child.name() and "kafka.Kafka" not in child.cmdline():
                    roots.append(child)
        return roots

    def _sample(self) -> None:
        workers = 0
        for proc in self._processes():
            try:
                cpu = proc.cpu_times()
                self._last[proc.pid] = cpu.user + cpu.system
                rss = proc.memory_info().rss
                if "java" in proc.name():
                    self.peak_rss = max(self.peak_rss, rss)
                else:
                    workers += rss
            except psutil.Error:
                pass
        self.peak_workers_rss = max(self.peak_workers_rss, workers)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    @property
    def cpu_s(self) -> float:
        # Processes born during the run (Python workers) count from zero.
        return sum(last - self._start.get(pid, 0.0) for pid, last in self._last.items())

    def __enter__(self) -> Watch:
        self._sample()
        self._start = dict(self._last)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def measured(fn: Any, settings: JobSettings, jar: Path) -> tuple[float, Watch]:
    with Watch() as watch:
        wall = fn(settings, jar)
    return wall, watch


# A Flink task thread is named "<task> (<subtask>/<parallelism>)#<attempt>".
_TASK_THREAD = re.compile(r"\(\d+/\d+\)#\d+$")
_CHAINED = ("ChainingOutput.pushToOperator", "CopyingChainingOutput.pushToOperator")


class Attribution:
    """CPU samples of the mini-cluster JVM during one run (Java Flight Recorder, through
    jcmd), split into reading and parsing the snapshots (the source's fetcher thread, and
    its task thread until it hands a record to the first chained operator) and everything
    downstream of that (the job's logic). Both shares come from the same seconds on the
    same machine, so the ratio holds however loaded the machine is."""

    def __init__(self, workdir: Path) -> None:
        self.file = workdir / f"run-{time.time_ns()}.jfr"
        self.name = self.file.stem
        self.pid = next(
            p.pid for p in psutil.Process().children()
            if "java" in p.name() and "kafka.Kafka" not in p.cmdline()
        )  # fmt: skip

    def _jcmd(self, *args: str) -> None:
        subprocess.run(["jcmd", str(self.pid), *args], check=True, capture_output=True)

    def __enter__(self) -> Attribution:
        self._jcmd("JFR.start", f"name={self.name}", "settings=profile")
        return self

    def __exit__(self, *exc: object) -> None:
        self._jcmd("JFR.stop", f"name={self.name}", f"filename={self.file}")

    def split(self, source: str) -> dict[str, int]:
        out = subprocess.run(
            ["jfr", "print", "--json", "--events", "jdk.ExecutionSample", str(self.file)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        counts = {"read+parse": 0, "logic": 0}
        self.hot: Counter[str] = Counter()
        for event in orjson.loads(out)["recording"]["events"]:
            values = event["values"]
            thread = (values.get("sampledThread") or {}).get("javaName") or ""
            if not _TASK_THREAD.search(thread):
                continue  # job submission, planning, RPC: the fixed cost
            top = (values["stackTrace"]["frames"] or [None])[0]
            if top is not None:
                self.hot[f"{top['method']['type']['name']}.{top['method']['name']}"] += 1
            if thread.startswith("Source Data Fetcher"):
                counts["read+parse"] += 1
            # SQL names the source task "Source: snapshots[1] -> ...", the drift job's
            # DataStream source "Source: snapshots -> route snapshots".
            elif thread.startswith((f"Source: {source}[", f"Source: {source} ")):
                frames = values["stackTrace"]["frames"]
                names = (f"{f['method']['type']['name'].rsplit('/', 1)[-1]}."
                         f"{f['method']['name']}" for f in frames)  # fmt: skip
                chained = any(n.startswith(_CHAINED) for n in names)
                counts["logic" if chained else "read+parse"] += 1
            else:
                counts["logic"] += 1
        self.file.unlink()
        return counts


def wait_for_positions(settings: JobSettings, group: str, timeout_s: float) -> float:
    """Block until consumer group ``group`` has a committed offset on every partition of
    the topic the drift job reads; returns the seconds waited.

    Flink's Kafka source assigns partitions to its readers itself (no group membership to
    observe) and resolves a "latest-offset" start to offsets as it assigns them; it commits
    each reader's positions to the group at every checkpoint. A committed offset on every
    partition therefore means every partition is assigned, with a position."""
    topic = settings.topics.drift_input
    admin = AdminClient(client_config(settings.kafka))
    partitions = [
        TopicPartition(topic, p)
        for p in admin.list_topics(topic, timeout=30).topics[topic].partitions
    ]
    started = time.perf_counter()
    while True:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        committed = admin.list_consumer_group_offsets(request)[group].result(timeout=30)
        if all(tp.offset >= 0 for tp in committed.topic_partitions):
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(
                f"the latency job's source has no position on every partition of {topic} "
                f"after {timeout_s:.0f} s (group {group}: {committed.topic_partitions})"
            )
        time.sleep(0.25)


def latency(settings: JobSettings, jar: Path, samples: int, cap_s: float) -> list[float]:
    """Seconds from producing the events that close each window to its verdict being read;
    a window without a verdict within ``cap_s`` is a miss (+inf). See the module's step 3."""
    group = f"lat-{time.time_ns()}"
    s = settings.model_copy(update={"job": settings.job.model_copy(update={
        "watermark_delay_ms": 0, "startup_mode": "latest-offset", "group_id": group})})  # fmt: skip
    result = drift_job.run(s, jar, bounded=False)
    consumer = Consumer(client_config(s.kafka, **{
        "group.id": f"bench-{time.time_ns()}", "auto.offset.reset": "latest"}))  # fmt: skip
    consumer.subscribe([s.topics.verdicts])
    producer = Producer(client_config(s.kafka, **{"linger.ms": 0}))
    base = 1_900_000_000_000 - 1_900_000_000_000 % MIN
    out: list[float] = []
    try:
        # Not a fixed sleep: until the job's source has a position on every partition (its
        # first checkpoint commits them), with room for a slow start on a loaded machine.
        waited = wait_for_positions(s, group, s.job.checkpoint_interval_s * 4 + 120)
        print(
            f"latency job: a position on every partition of {s.topics.drift_input} "
            f"(committed to group {group}) {waited:.1f} s after submitting it",
            flush=True,
        )
        for i in range(samples + 2):
            # The clock starts before the produce: it spans the broker's acknowledgement.
            sent = time.perf_counter()
            # One event in window i, then one in window i+1 that closes window i.
            for t in (base + i * MIN + 1, base + (i + 1) * MIN + 1):
                record = snapshot(f"l{i}-{t}", "latency", t)
                if s.topics.summaries:  # the job reads the summaries
                    record = summary_of(record)
                producer.produce(s.topics.drift_input, record, b"latency")
            producer.flush(cap_s)
            want = base + i * MIN
            took = MISS
            while time.perf_counter() - sent < cap_s:
                msg = consumer.poll(0.05)
                if msg is None or msg.error():
                    continue
                if orjson.loads(msg.value() or b"{}")["window"]["window_start_ms"] == want:
                    took = time.perf_counter() - sent
                    break
            if i >= 2:  # the first windows include the job's warm-up
                out.append(took)
            time.sleep(0.5)
    finally:
        consumer.close()
        result.get_job_client().cancel().result()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The drift job's throughput (events/s = N / (wall - a 1,000-event run's "
        "fixed cost)), CPU per event and JVM peak RSS, alternating over --rounds rounds with "
        "read-discard and read-parse-discard jobs over the same topic, after --warmup-rounds "
        "uncounted rounds; then its verdict latency: from just before producing the events "
        "that move the watermark past a window's end (the produce and its acknowledgement "
        "included) to the window's verdict read from the verdicts topic, windows without a "
        "verdict within --latency-cap s counted as +inf misses. Details: the module's "
        "docstring.",
    )
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--event-rate",
        type=int,
        default=100_000,
        help="events per second of event time in the loaded stream (sets events per window)",
    )
    parser.add_argument(
        "--latency-samples", type=int, default=20,
        help="windows timed in the latency step (after 2 uncounted ones)",
    )  # fmt: skip
    parser.add_argument(
        "--latency-cap", type=float, default=30.0,
        help="seconds to wait for a window's verdict in the latency step; one not read by "
        "then is a miss, counted in p50/p99 as +inf",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the jobs")
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="unmeasured rounds of every job over the same topic first, so that no measured "
        "run pays for the JIT compiling the code it shares with the others",
    )
    parser.add_argument(
        "--dedup",
        choices=("on", "off", "both"),
        default="on",
        help="the drift job with its event_id deduplication (as deployed), without, or both "
        "side by side in the same rounds",
    )
    parser.add_argument(
        "--jackson",
        action="store_true",
        help="also run read-parse-discard with Flink's JSON decoder for every record "
        "(format option decoder = 'jackson') in the same rounds",
    )
    parser.add_argument("--hot-methods", type=int, default=0, metavar="N",
                        help="print each run's N hottest methods (top of stack in the task "
                        "threads' CPU samples)")  # fmt: skip
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also run, in the same rounds, the floor jobs over the drift job's own source "
        "(jobs/jvm ReadFloor), each a step further along the drift job's path: read-discard "
        "with it, read-touch-discard (every byte of each record loaded once), "
        "read-decode-discard (decoded as the drift job does), read-route-discard (routed "
        "into its batches) and read-route-exchange-discard (the batches across the keyed "
        "exchange)",
    )
    parser.add_argument(
        "--rocksdb",
        action="store_true",
        help="also run the drift job with job.state_backend = rocksdb in the same rounds",
    )
    parser.add_argument(
        "--input",
        choices=("snapshots", "summaries", "both"),
        default="snapshots",
        help="the topic the jobs read: the full snapshots, the summaries (topics.summaries "
        "set, each event also written without its anchor log), or both side by side in the "
        "same rounds",
    )
    args = parser.parse_args()
    with private_kafka(heap="1g") as bootstrap, tempfile.TemporaryDirectory() as tmp:
        args.workdir = tmp
        bench(bootstrap, args)


def bench(bootstrap: str, args: Any) -> None:
    inputs = INPUTS if args.input == "both" else (args.input,)
    # The summaries topic's name; run_scoped_topics makes it private to each load.
    topics = {"summaries": "anchorwatch.summaries"} if "summaries" in inputs else {}
    base = JobSettings.load(kafka={"bootstrap_servers": bootstrap},
                            # One JVM runs every job of the bench, and each leaves its
                            # generated classes behind: 384 MiB filled after 17 runs.
                            job={"parallelism": args.parallelism,
                                 "local_metaspace_mb": 1024},
                            topics=topics)  # fmt: skip
    # Before the first Flink call: PyFlink starts the mini-cluster's JVM with these.
    print(f"mini-cluster JVM: {' '.join(cluster.bound_local_memory(base.job))}", flush=True)
    jar = flow.fetch_artifacts(base).flink_jobs_jar()

    def topics_with(n: int) -> JobSettings:
        s = base.model_copy(
            update={"topics": flow.run_scoped_topics(base.topics, flow.new_run_id())}
        )
        flow.create_topics(s)
        rate = load_events(s, n, args.event_rate)
        written = " and ".join(t for t in (s.topics.snapshots, s.topics.summaries) if t)
        print(f"loaded {n:,} events at {rate:,.0f}/s into {written}")
        return s

    small, big = topics_with(1_000), topics_with(args.events)
    workdir = Path(args.workdir)
    n = args.events - 1_000
    kinds: list[tuple[str, Any, str]] = [
        ("read-discard", run_read_discard, RAW),
        ("read-parse-discard", run_discard, drift_job.SNAPSHOTS),
    ]
    if args.jackson:
        kinds.append(("read-parse-discard, jackson", run_discard_jackson, drift_job.SNAPSHOTS))
    if args.floors:
        kinds.extend(FLOORS)
    if args.dedup in ("on", "both"):
        kinds.append(("drift job", run_drift, drift_job.SNAPSHOTS))
    if args.dedup in ("off", "both"):
        kinds.append(("drift job, no dedup", run_drift_without_dedup, drift_job.SNAPSHOTS))
    if args.rocksdb:
        kinds.append(("drift job, rocksdb", run_drift_on_rocksdb, drift_job.SNAPSHOTS))

    def named(kind: str, source: str) -> str:
        # Today's names when the jobs read the snapshots only.
        return kind if inputs == ("snapshots",) else f"{kind} [{source}]"

    # (name, run, the source Attribution splits on, small settings, big settings): each
    # kind over every input one after the other, so each pair runs under the same load.
    jobs = [(named(kind, source), fn, table, over(small, source), over(big, source))
            for kind, fn, table in kinds for source in inputs]  # fmt: skip
    for source in inputs:
        print(f"input {source}: the jobs read {over(big, source).topics.drift_input}", flush=True)
    width = max(len(name) for name, *_ in jobs)
    rates: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    cpus: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    shares: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    peaks: list[float] = []
    # The first Flink call starts the mini-cluster's JVM: its boot would count in the first
    # job's fixed cost (CPU per event below zero). One unmeasured run starts it first.
    run_read_discard(over(small, inputs[0]), jar)
    # Unmeasured runs of every job over the big topic, recorded as the measured ones are:
    # the JIT compiles the Kafka reading and each job's code, with the flight recorder on,
    # before any round counts (else round 1 runs cold: read-discard then measured at a third
    # of its later rate, and a first recording alone slowed every job of its round).
    for warmup in range(1, args.warmup_rounds + 1):
        for name, fn, _, _, big_s in jobs:
            with Attribution(workdir) as samples:
                wall = fn(big_s, jar)
            samples.file.unlink()
            print(f"warm-up {warmup} {name:<{width}} wall {wall:6.1f}s (not counted)", flush=True)
    for round_no in range(1, args.rounds + 1):
        # Alternating the jobs within each round pairs them under the same machine load.
        for name, fn, table, small_s, big_s in jobs:
            fixed, fixed_watch = measured(fn, small_s, jar)
            verdicts_before = topic_size(big_s, big_s.topics.verdicts)
            with Attribution(workdir) as samples:
                wall, watch = measured(fn, big_s, jar)
            split = samples.split(table)
            if args.hot_methods:
                total = sum(samples.hot.values())
                for method, count in samples.hot.most_common(args.hot_methods):
                    print(f"    {count / total:6.1%}  {method}")
            verdicts = topic_size(big_s, big_s.topics.verdicts)
            events_per_s = n / max(wall - fixed, 1e-9)
            cpu_us = (watch.cpu_s - fixed_watch.cpu_s) / n * 1e6
            share = split["logic"] / max(split["read+parse"], 1)
            rates[name].append(events_per_s)
            cpus[name].append(cpu_us)
            shares[name].append(share)
            peaks.append(watch.peak_rss / 2**20)
            print(
                f"round {round_no} {name:<{width}} wall {wall:6.1f}s fixed {fixed:5.1f}s "
                f"{events_per_s:>10,.0f} events/s  {cpu_us:5.1f} CPU-µs/event  "
                f"logic/read+parse {split['logic']}/{split['read+parse']} samples = {share:.0%}  "
                f"JVM peak RSS {watch.peak_rss / 2**20:,.0f} MiB  "
                f"verdicts written {verdicts - verdicts_before:,} (in topic {verdicts:,})",
                flush=True,
            )
    med_rate, med_cpu, med_share = ({name: statistics.median(v[name]) for name, *_ in jobs}
                                    for v in (rates, cpus, shares))  # fmt: skip

    def costs(kind: str) -> str:
        """What a job's share of CPU samples downstream of its source pays for."""
        if kind.startswith("drift job"):
            return "logic"
        return "sink and projection" if kind.startswith("read-parse") else "sink"

    for source in inputs:
        refs = {named(kind, source): kind for kind in ("read-parse-discard", "read-discard")}
        for kind, *_ in kinds[1:]:
            name = named(kind, source)
            r, c, sh = med_rate[name], med_cpu[name], med_share[name]
            against = [ref for ref in refs if ref != name]
            print(f"median over {args.rounds} rounds: {name} {r:,.0f} events/s = "
                  + ", ".join(f"{r / med_rate[ref]:.0%} of {ref}'s {med_rate[ref]:,.0f}/s"
                              for ref in against)
                  + f"; CPU per event {c:.1f} µs vs "
                  + ", ".join(f"{ref}'s {med_cpu[ref]:.1f} ({c / med_cpu[ref] - 1:+.0%})"
                              for ref in against)
                  + f"; CPU samples: its {costs(kind)} costs {sh:.0%} on top of reading and "
                  "parsing (" + ", ".join(f"{ref}'s {costs(refs[ref])}: {med_share[ref]:.0%}"
                                         for ref in against) + ")",
                  flush=True)  # fmt: skip
    if len(inputs) > 1:
        for kind, *_ in kinds:
            full, cut = named(kind, "snapshots"), named(kind, "summaries")
            print(f"summaries vs snapshots, median: {kind} {med_rate[cut]:,.0f} vs "
                  f"{med_rate[full]:,.0f} events/s ({med_rate[cut] / med_rate[full]:.2f}x); "
                  f"CPU per event {med_cpu[cut]:.1f} vs {med_cpu[full]:.1f} µs "
                  f"({med_cpu[cut] / med_cpu[full] - 1:+.0%})", flush=True)  # fmt: skip
    print(f"JVM peak RSS per run, in order (MiB): {', '.join(f'{p:,.0f}' for p in peaks)}; "
          f"max {max(peaks):,.0f}", flush=True)  # fmt: skip
    if args.dedup == "both":
        for source in inputs:
            with_id, without = named("drift job", source), named("drift job, no dedup", source)
            on, off = med_rate[with_id], med_rate[without]
            extra = med_cpu[with_id] - med_cpu[without]
            print(f"deduplication by event_id costs {1 - on / off:.0%} of {with_id}'s "
                  f"throughput ({on:,.0f} vs {off:,.0f} events/s) and {extra:+.1f} µs CPU per "
                  "event", flush=True)  # fmt: skip
    # The deployed input: the summaries when they are written.
    lat = latency(big, jar, args.latency_samples, args.latency_cap)
    if lat:

        def ms(q: float) -> str:
            return f"{q * 1000:.0f} ms" if q != MISS else "inf"

        print(f"verdict latency after the watermark passes a window end ({len(lat)} windows, "
              f"input {big.topics.drift_input}; clock: from just before producing the events "
              "that close the window, through the broker's acknowledgement, to the verdict "
              f"read from the verdicts topic; {misses(lat)} missed, no verdict within "
              f"{args.latency_cap:g} s, counted as +inf): "
              f"p50 {ms(quantile(lat, 0.5))}, p99 {ms(quantile(lat, 0.99))}, "
              f"max {ms(max(lat))}")  # fmt: skip


if __name__ == "__main__":
    main()
