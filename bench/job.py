"""Throughput, latency and memory of the drift job, side by side with a read-parse-discard
job over the same topic, in one run on this machine.

    .venv/bin/python bench/job.py --events 3000000 --rounds 3
    .venv/bin/python bench/job.py --events 2000000 --rounds 1 --event-rate 20   # replaying history
    .venv/bin/python bench/job.py --events 3000000 --rounds 3 --dedup both      # dedup's cost
    .venv/bin/python bench/job.py --events 1500000 --rounds 3 --jackson         # the scanner's gain

1. Starts a private Kafka (free ports, temporary directory) and loads N realistic snapshot
   events (from the traffic generator, replayed with fresh ids and new event times).
   Event time advances as in a stream sustaining `--event-rate` events/s (default 100k/s,
   the target), so windows hold as many events as they would at that rate.
2. Runs, each bounded over the same topic on the embedded mini-cluster, with the same
   parallelism: (a) read-parse-discard: the same source and format, every column the drift
   job reads, into a blackhole sink; (b) the drift job as deployed. Each rate is
   N / (wall time - fixed cost), the fixed cost (job start, Python workers, stop) being a
   run of the same job over a 1,000-event topic just before; also the CPU seconds per event
   of the JVM and its Python workers (big run minus small run), which other load on the
   machine disturbs far less than wall time; and, from Java Flight Recorder samples of the
   same run, the CPU the job spends downstream of reading and parsing, as a share of the
   CPU spent reading and parsing: the cost of the job's logic, immune to machine load.
   `--rounds` alternates the jobs; medians and ratios are printed. `--dedup both` also
   runs the drift job without its event_id deduplication in the same rounds, and prints
   what deduplicating costs. `--jackson` also runs read-parse-discard with the format's
   `decoder` 'jackson' (Flink's JSON decoder for every record, the format before its byte
   scanner) in the same rounds.
3. Latency: runs the drift job unbounded, and each second sends one event that moves the
   watermark past a window end; reports the time from that send until the window's verdict
   is readable on the verdicts topic (p50 / p99 / max).
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
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from anchorwatch import slice as flow
from anchorwatch.generator import TrafficConfig, generate
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.stack import private_kafka

MIN = 60_000


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
    `event_rate` events/s would; returns the produce rate. ``windows`` collects each
    (doc type, window start) the events fall in."""
    traffic = generate(TrafficConfig(seed=seed, minutes=20, doc_types=16, rate_scale=3.0))
    pool = [orjson.loads(r.raw) for r in traffic.records() if r.event is not None]
    start = pool[0]["event_time_ms"] - pool[0]["event_time_ms"] % MIN
    producer = Producer(client_config(settings.kafka, **{
        "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000}))  # fmt: skip
    started = time.perf_counter()
    for i in range(n):
        record = dict(pool[i % len(pool)])
        cycle = i // len(pool)
        record["event_id"] = f"{record['event_id']}-{cycle}"
        record["event_time_ms"] = start + i * 1000 // event_rate
        if windows is not None:
            windows.add((record["doc_type"], record["event_time_ms"] // MIN * MIN))
        while True:
            try:
                producer.produce(settings.topics.snapshots, orjson.dumps(record),
                                 record["doc_type"].encode())  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    return n / (time.perf_counter() - started)


def run_discard(settings: JobSettings, jar: Path, decoder: str = "scanner") -> float:
    _, t_env = drift_job.create_environment(settings, jar)
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


def run_drift_without_dedup(settings: JobSettings, jar: Path) -> float:
    job = settings.job.model_copy(update={"deduplicate": False})
    return run_drift(settings.model_copy(update={"job": job}), jar)


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
        for event in orjson.loads(out)["recording"]["events"]:
            values = event["values"]
            thread = (values.get("sampledThread") or {}).get("javaName") or ""
            if not _TASK_THREAD.search(thread):
                continue  # job submission, planning, RPC: the fixed cost
            if thread.startswith("Source Data Fetcher"):
                counts["read+parse"] += 1
            elif thread.startswith(f"Source: {source}["):
                frames = values["stackTrace"]["frames"]
                names = (f"{f['method']['type']['name'].rsplit('/', 1)[-1]}."
                         f"{f['method']['name']}" for f in frames)  # fmt: skip
                chained = any(n.startswith(_CHAINED) for n in names)
                counts["logic" if chained else "read+parse"] += 1
            else:
                counts["logic"] += 1
        self.file.unlink()
        return counts


def latency(settings: JobSettings, jar: Path, samples: int) -> list[float]:
    s = settings.model_copy(update={"job": settings.job.model_copy(update={
        "watermark_delay_ms": 0, "startup_mode": "latest-offset",
        "group_id": f"lat-{time.time_ns()}"})})  # fmt: skip
    result = drift_job.run(s, jar, bounded=False)
    consumer = Consumer(client_config(s.kafka, **{
        "group.id": f"bench-{time.time_ns()}", "auto.offset.reset": "latest"}))  # fmt: skip
    consumer.subscribe([s.topics.verdicts])
    producer = Producer(client_config(s.kafka, **{"linger.ms": 0}))
    base = 1_900_000_000_000 - 1_900_000_000_000 % MIN
    out: list[float] = []
    try:
        time.sleep(15)  # the job's readers join the topic (they start at the latest offset)
        for i in range(samples + 2):
            # One event in window i, then one in window i+1 that closes window i.
            for t in (base + i * MIN + 1, base + (i + 1) * MIN + 1):
                record = snapshot(f"l{i}-{t}", "latency", t)
                producer.produce(s.topics.snapshots, record, b"latency")
            producer.flush()
            sent = time.perf_counter()
            want = base + i * MIN
            while time.perf_counter() - sent < 30:
                msg = consumer.poll(0.05)
                if msg is None or msg.error():
                    continue
                if orjson.loads(msg.value() or b"{}")["window"]["window_start_ms"] == want:
                    if i >= 2:  # the first windows include the job's warm-up
                        out.append(time.perf_counter() - sent)
                    break
            time.sleep(0.5)
    finally:
        consumer.close()
        result.get_job_client().cancel().result()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--event-rate",
        type=int,
        default=100_000,
        help="events per second of event time in the loaded stream (sets events per window)",
    )
    parser.add_argument("--latency-samples", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the jobs")
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
    args = parser.parse_args()
    with private_kafka(heap="1g") as bootstrap, tempfile.TemporaryDirectory() as tmp:
        args.workdir = tmp
        bench(bootstrap, args)


def bench(bootstrap: str, args: Any) -> None:
    base = JobSettings.load(kafka={"bootstrap_servers": bootstrap},
                            # One JVM runs every job of the bench, and each leaves its
                            # generated classes behind: 384 MiB filled after 17 runs.
                            job={"parallelism": args.parallelism,
                                 "local_metaspace_mb": 1024})  # fmt: skip
    # Before the first Flink call: PyFlink starts the mini-cluster's JVM with these.
    print(f"mini-cluster JVM: {' '.join(cluster.bound_local_memory(base.job))}", flush=True)
    jar = flow.fetch_artifacts(base).flink_jobs_jar()

    def topics_with(n: int) -> JobSettings:
        s = base.model_copy(
            update={"topics": flow.run_scoped_topics(base.topics, flow.new_run_id())}
        )
        flow.create_topics(s)
        rate = load_events(s, n, args.event_rate)
        print(f"loaded {n:,} events at {rate:,.0f}/s")
        return s

    small, big = topics_with(1_000), topics_with(args.events)
    workdir = Path(args.workdir)
    n = args.events - 1_000
    jobs: list[tuple[str, Any]] = [("read-parse-discard", run_discard)]
    if args.jackson:
        jobs.append(("read-parse-discard, jackson", run_discard_jackson))
    if args.dedup in ("on", "both"):
        jobs.append(("drift job", run_drift))
    if args.dedup in ("off", "both"):
        jobs.append(("drift job, no dedup", run_drift_without_dedup))
    rates: dict[str, list[float]] = {name: [] for name, _ in jobs}
    cpus: dict[str, list[float]] = {name: [] for name, _ in jobs}
    shares: dict[str, list[float]] = {name: [] for name, _ in jobs}
    peaks: list[float] = []
    for round_no in range(1, args.rounds + 1):
        # Alternating the jobs within each round pairs them under the same machine load.
        for name, fn in jobs:
            fixed, fixed_watch = measured(fn, small, jar)
            with Attribution(workdir) as samples:
                wall, watch = measured(fn, big, jar)
            split = samples.split(drift_job.SNAPSHOTS)
            events_per_s = n / max(wall - fixed, 1e-9)
            cpu_us = (watch.cpu_s - fixed_watch.cpu_s) / n * 1e6
            share = split["logic"] / max(split["read+parse"], 1)
            rates[name].append(events_per_s)
            cpus[name].append(cpu_us)
            shares[name].append(share)
            peaks.append(watch.peak_rss / 2**20)
            print(
                f"round {round_no} {name:<27} wall {wall:6.1f}s fixed {fixed:5.1f}s "
                f"{events_per_s:>10,.0f} events/s  {cpu_us:5.1f} CPU-µs/event  "
                f"logic/read+parse {split['logic']}/{split['read+parse']} samples = {share:.0%}  "
                f"JVM peak RSS {watch.peak_rss / 2**20:,.0f} MiB  "
                f"verdicts in topic {topic_size(big, big.topics.verdicts):,}",
                flush=True,
            )
    med_rate, med_cpu, med_share = ({name: statistics.median(v[name]) for name, _ in jobs}
                                    for v in (rates, cpus, shares))  # fmt: skip
    ref = "read-parse-discard"
    for name, _ in jobs[1:]:
        r, c, sh = med_rate[name], med_cpu[name], med_share[name]
        print(f"median over {args.rounds} rounds: {name} {r:,.0f} events/s = "
              f"{r / med_rate[ref]:.0%} of read-parse-discard's {med_rate[ref]:,.0f}/s; "
              f"CPU per event {c:.1f} vs {med_cpu[ref]:.1f} µs ({c / med_cpu[ref] - 1:+.0%}); "
              f"CPU samples: its logic costs {sh:.0%} on top of reading and parsing "
              f"(read-parse-discard's sink and projection: {med_share[ref]:.0%})",
              flush=True)  # fmt: skip
    print(f"JVM peak RSS per run, in order (MiB): {', '.join(f'{p:,.0f}' for p in peaks)}; "
          f"max {max(peaks):,.0f}", flush=True)  # fmt: skip
    if args.dedup == "both":
        on, off = med_rate["drift job"], med_rate["drift job, no dedup"]
        extra = med_cpu["drift job"] - med_cpu["drift job, no dedup"]
        print(f"deduplication by event_id costs {1 - on / off:.0%} of the drift job's "
              f"throughput ({on:,.0f} vs {off:,.0f} events/s) and {extra:+.1f} µs CPU per event",
              flush=True)  # fmt: skip
    lat = latency(big, jar, args.latency_samples)
    if lat:
        q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99
        print(f"verdict latency after the watermark passes a window end ({len(lat)} windows): "
              f"p50 {statistics.median(lat) * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms, "
              f"max {max(lat) * 1000:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
