"""The drift job on a Flink session cluster at full speed: the TaskManager's memory against
its configured process size.

    .venv/bin/python -m bench.session --events 6000000
    .venv/bin/python -m bench.session --events 6000000 --tm-memory 1728m --event-rate 100000
    .venv/bin/python -m bench.session --events 6000000 --summaries   # the job reads those

1. Starts Kafka and a Flink session cluster of its own (free ports, a temporary directory;
   one TaskManager of `--tm-memory` process memory, the stack's default, with two slots).
2. Loads N snapshot events whose event time advances as in a stream of `--event-rate`
   events/s (so each one-minute window holds event-rate x 60 events and their ids), then one
   event per doc type a window later, which closes every window. With `--summaries` each
   event's binary summary goes to the summaries topic too, and the job reads that topic.
3. Submits the drift job (parallelism 2, from the earliest offset): it reads the backlog as
   fast as it can, which is the highest rate it sustains here.
4. Samples the TaskManager's RSS (the JVM alone; its Python workers are separate processes,
   reported apart) every 0.2 s until every window's verdict is on the verdicts topic, and
   prints the rate, the peak RSS against the configured process memory, the GC time, and
   whether the job restarted (an OutOfMemoryError restarts it).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import requests
from confluent_kafka import Consumer, Producer

from anchorwatch.connectors.validation import summary_of
from anchorwatch.demo import slice as flow
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.stack import Stack
from bench.job_measure import Watch
from bench.job_runs import MIN, load_events, snapshot
from tests.support.stack import stack_on_free_ports


def gc_seconds(pid: int) -> float:
    """Total GC time of a JVM so far (jstat's GCT)."""
    lines = subprocess.run(["jstat", "-gcutil", str(pid)], capture_output=True, text=True,
                           check=True).stdout.split("\n")  # fmt: skip
    head, values = lines[0].split(), lines[1].split()
    return float(values[head.index("GCT")])


def restarts(rest: cluster.FlinkRest, job: str) -> int:
    url = f"{rest.base}/jobs/{job}/metrics?get=numRestarts"
    found = requests.get(url, timeout=10).json()
    return int(found[0]["value"]) if found else 0


def windows_on_topic(
    settings: JobSettings, want: int, timeout_s: float, rest: cluster.FlinkRest, job: str
) -> float:
    """Wait until ``want`` verdicts are on the verdicts topic; returns when the last came.
    Stops at the job's first restart (an OutOfMemoryError restarts it)."""
    group = f"bench-session-{time.time_ns()}"
    consumer = Consumer(
        client_config(settings.kafka, **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([settings.topics.verdicts])
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < want:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {seen} of {want} verdicts within {timeout_s:.0f}s")
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen += 1
            elif restarts(rest, job):
                cause = requests.get(f"{rest.base}/jobs/{job}/exceptions", timeout=10).json()
                first = (cause.get("exceptionHistory", {}).get("entries") or [{}])[0]
                # The exception's own message, and its root cause (the last "Caused by").
                lines = (first.get("stacktrace") or "").splitlines()
                said = [lines[0]] if lines else []
                said += [line for line in lines if line.startswith("Caused by:")][-1:]
                # Where it happened: the trace, up to the first frames of each cause.
                print("\n".join(lines[:200]), flush=True)
                raise SystemExit(
                    f"the job restarted after {seen} of {want} verdicts: "
                    + " / ".join(said or [str(first.get("exceptionName"))])
                )
        return time.perf_counter()
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6_000_000)
    parser.add_argument("--event-rate", type=int, default=100_000)
    parser.add_argument("--tm-memory", default="1728m", help="TaskManager process memory")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--state-backend",
        choices=("hashmap", "rocksdb"),
        help="the job's job.state_backend (default: the cluster's, hashmap)",
    )
    parser.add_argument(
        "--summaries",
        action="store_true",
        help="set topics.summaries: each event is also written as its binary summary, as the "
        "connectors write it, and the job reads those",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="anchorwatch-bench-session-") as tmp:
        stack = stack_on_free_ports(Path(tmp), flink=True,
                                    stack={"flink_taskmanager_memory": args.tm_memory})  # fmt: skip
        stack.up(with_flink=True)
        try:
            run(stack, args)
        except SystemExit:
            # What failed, from the logs (the REST API gives a checkpoint failure's summary
            # only): the distinct root causes, before the directory goes.
            causes = {line.strip() for log in sorted(stack.flink.log_dir.glob("*.log"))
                      for line in log.read_text(errors="replace").splitlines()
                      if line.startswith("Caused by:")}  # fmt: skip
            print("\n".join(["causes in the Flink logs:", *sorted(causes)]), flush=True)
            raise
        finally:
            stack.down()


def close_windows(settings: JobSettings, windows: set[tuple[str, int]]) -> None:
    """One event per doc type a window and the watermark delay after the last: the watermark
    passes every loaded window."""
    end = max(start for _, start in windows) + 2 * MIN + settings.job.watermark_delay_ms
    producer = Producer(client_config(settings.kafka))
    for doc_type in sorted({d for d, _ in windows}):
        record = snapshot(f"closer-{doc_type}", doc_type, end)
        if settings.topics.summaries:  # the job reads the summaries
            record = summary_of(record)
        producer.produce(settings.topics.drift_input, record, doc_type.encode())
    producer.flush()


def run(stack: Stack, args: argparse.Namespace) -> None:
    base = JobSettings.load(kafka={"bootstrap_servers": stack.kafka.bootstrap},
                            job={"parallelism": args.parallelism,
                                 "startup_mode": "earliest-offset",
                                 "state_backend": args.state_backend},
                            topics={"summaries": "anchorwatch.summaries"}
                            if args.summaries else {})  # fmt: skip
    settings = base.model_copy(
        update={"topics": flow.run_scoped_topics(base.topics, flow.new_run_id())}
    )
    flow.create_topics(settings)
    windows: set[tuple[str, int]] = set()
    rate = load_events(settings, args.events, args.event_rate, windows=windows)
    close_windows(settings, windows)
    print(f"loaded {args.events:,} events at {rate:,.0f}/s; {len(windows):,} windows to judge",
          flush=True)  # fmt: skip
    jar = flow.fetch_artifacts(settings).flink_jobs_jar()
    [tm] = stack.flink.task_managers()
    gc_before = gc_seconds(tm.pid)
    rest = cluster.FlinkRest(stack.flink.address)
    with Watch(tm.pid) as peak:
        job = cluster.submit(stack.flink.address, jar, parallelism=args.parallelism,
                             env={drift_job.SETTINGS_ENV: settings.model_dump_json()})  # fmt: skip
        while not rest.running(job):
            time.sleep(0.2)
        started = time.perf_counter()
        try:
            done = windows_on_topic(settings, len(windows), 1800, rest, job)
        finally:
            restarted = restarts(rest, job)
            rest.cancel(job)
    gc = gc_seconds(tm.pid) - gc_before
    wall = done - started
    configured = psutil.Process(tm.pid).cmdline()
    heap = next((w for w in configured if w.startswith("-Xmx")), "?")
    print(f"drift job on the session cluster: {args.events:,} events in {wall:.1f} s = "
          f"{args.events / wall:,.0f} events/s (from its tasks running to the last verdict)",
          flush=True)  # fmt: skip
    jvm, workers = peak.peak_rss / 2**20, peak.peak_workers_rss / 2**20
    print(f"TaskManager ({args.tm_memory} process memory, heap {heap}, state "
          f"{args.state_backend or 'hashmap'}): peak RSS {jvm:,.0f} "
          f"MiB; its Python workers {workers:,.0f} MiB; GC {gc:.1f} s; restarts {restarted}",
          flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
