"""bench/job.py's measurements: ``Watch`` (a JVM's and its Python workers' peak RSS and
CPU seconds while a run lasts; ``measured`` times a runner under it), ``Attribution`` (Java
Flight Recorder samples of one run split into reading and parsing the input and the job's
logic downstream of it, and the hottest methods), and the latency step (``latency``: the
drift job unbounded, each window's verdict timed from producing the events that close it,
once ``wait_for_positions`` sees the job's source placed on every partition).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import psutil
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from anchorwatch.connectors.validation import summary_of
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from bench.job_runs import MIN, snapshot
from bench.quantiles import MISS

_COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class Watch:
    """While a run lasts, samples a JVM and the Python workers it starts (by default this
    process's Java child, the mini-cluster's TaskManager; or the process ``pid``): the JVM's
    peak RSS, its workers' peak RSS together, and the CPU seconds all of them spend. CPU per
    event is the figure other load on the machine disturbs least. ``jit_s``: the part of it
    the JVM's JIT compiler threads spent, read at the same start and end as ``cpu_s``."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self.peak_rss = 0
        self.peak_workers_rss = 0
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._jit_start: dict[tuple[int, int], float] = {}
        self._jit_end: dict[tuple[int, int], float] = {}
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

    def _compiler_threads(self) -> dict[tuple[int, int], float]:
        """CPU seconds so far of each JIT compiler thread ("C1 CompilerThread0", "C2 ...";
        Linux cuts thread names to 15 characters) of the watched JVMs, by (pid, tid)."""
        out: dict[tuple[int, int], float] = {}
        for root in self._roots():
            tasks = Path(f"/proc/{root.pid}/task")
            with contextlib.suppress(OSError):
                for task in tasks.iterdir():
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        if not (task / "comm").read_text().startswith(_COMPILER_THREADS):
                            continue
                        # After the last ')': the name, inside parentheses, may hold spaces.
                        stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
                        # Fields 14 and 15 (utime, stime); stat[0] is field 3 (state).
                        ticks = int(stat[11]) + int(stat[12])
                        out[root.pid, int(task.name)] = ticks / _CLK_TCK
        return out

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    @property
    def cpu_s(self) -> float:
        # Processes born during the run (Python workers) count from zero.
        return sum(last - self._start.get(pid, 0.0) for pid, last in self._last.items())

    @property
    def jit_s(self) -> float:
        # A compiler thread born during the run counts from zero; one that exited before the
        # end is lost (HotSpot keeps at least one C1 and one C2 thread: on a small machine,
        # with few of them, none exit).
        return sum(end - self._jit_start.get(key, 0.0) for key, end in self._jit_end.items())

    def __enter__(self) -> Watch:
        self._sample()
        self._start = dict(self._last)
        self._jit_start = self._compiler_threads()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._jit_end = self._compiler_threads()


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
        # ANCHORWATCH_BENCH_KEEP_JFR=DIR keeps each recording there, for a closer look.
        keep = os.environ.get("ANCHORWATCH_BENCH_KEEP_JFR")
        if keep:
            shutil.copy(self.file, Path(keep) / f"{source}-{self.file.name}")
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
