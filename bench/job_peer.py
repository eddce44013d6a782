"""bench/job.py ``--peer flink-sql``: the drift job side by side with the Flink SQL job a
user would write instead (bench/peer_sql.py), alternating in the same rounds over the same
topic of full snapshot records, each run bounded from the topic's start.

Per run: events/s (N / (wall - a 1,000-event run's fixed cost), as bench/job.py measures
every job), CPU seconds per million events (the mini-cluster JVM, which is the TaskManager
here, and its Python workers, big run minus small run; the JVM's own share printed too), the
JVM's peak RSS and peak heap used (``jstat -gc`` every 250 ms; the heap is bounded by
``job.local_heap_mb``), the Flight Recorder split of the task threads' CPU samples (reading
and parsing vs everything downstream), and the rows each job wrote. Ends with the medians
and exactly one line ``median over N rounds: <drift> vs <sql> = N.Nx the SQL job`` (the
SQL job being the ``unnest`` variant when it runs, else ``mean``). ``--peer-floors`` adds
bench/job.py's read-parse-discard and read-discard to the same rounds, and each job's rate
as a share of theirs.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import threading
from pathlib import Path
from typing import Any

import psutil

from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from bench import peer_sql
from bench.job_measure import Attribution, Watch
from bench.job_runs import (
    RAW,
    run_discard,
    run_drift,
    run_drift_without_dedup,
    run_read_discard,
    topic_size,
)


class JvmWatch(Watch):
    """``Watch``, with the CPU seconds of the JVM alone (not its Python workers) apart."""

    def __init__(self) -> None:
        super().__init__()
        self.java: set[int] = set()

    def _sample(self) -> None:
        super()._sample()
        for root in self._roots():
            self.java.add(root.pid)

    def __enter__(self) -> JvmWatch:
        super().__enter__()
        return self

    @property
    def jvm_cpu_s(self) -> float:
        return sum(
            last - self._start.get(pid, 0.0) for pid, last in self._last.items() if pid in self.java
        )


class HeapWatch:
    """Peak heap used (young + old generation, after or between collections as sampled) of
    a JVM while a run lasts, from ``jstat -gc <pid> 250``: one process for the whole run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kib = 0.0
        self._proc: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        head: list[str] = []
        for line in self._proc.stdout:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "S0C":
                head = fields
                continue
            with contextlib.suppress(ValueError, IndexError):
                used = sum(float(fields[head.index(c)]) for c in ("S0U", "S1U", "EU", "OU"))
                self.peak_kib = max(self.peak_kib, used)

    def __enter__(self) -> HeapWatch:
        self._proc = subprocess.Popen(
            ["jstat", "-gc", str(self.pid), "250"], stdout=subprocess.PIPE, text=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        self._proc.terminate()
        self._proc.wait()
        self._thread.join()


def _jvm_pid() -> int:
    return next(
        p.pid for p in psutil.Process().children()
        if "java" in p.name() and "kafka.Kafka" not in p.cmdline()
    )  # fmt: skip


def kinds(args: Any) -> list[tuple[str, Any, str]]:
    """(name, runner, the source table Attribution splits on) of the jobs compared."""
    out: list[tuple[str, Any, str]] = [("drift job", run_drift, drift_job.SNAPSHOTS)]
    if args.dedup == "both":
        out.append(("drift job, no dedup", run_drift_without_dedup, drift_job.SNAPSHOTS))
    for variant in args.peer_variants.split(","):
        run = peer_sql.runner(variant, args.peer_threshold)
        out.append((f"SQL peer, {variant}", run, peer_sql.TABLE))
    if args.peer_floors:
        out.append(("read-parse-discard", run_discard, drift_job.SNAPSHOTS))
        out.append(("read-discard", run_read_discard, RAW))
    return out


def _output(name: str, settings: JobSettings) -> str | None:
    """The topic a job writes its rows to (none for the floors, which discard)."""
    if name.startswith("drift job"):
        return settings.topics.verdicts
    return peer_sql.output_topic(settings) if name.startswith("SQL peer") else None


def bench(small: JobSettings, big: JobSettings, jar: Path, workdir: Path, args: Any) -> None:
    for s in (small, big):
        peer_sql.create_output_topic(s)
    jobs = kinds(args)
    width = max(len(name) for name, *_ in jobs)
    figures: dict[str, dict[str, list[float]]] = {
        name: {k: [] for k in ("rate", "cpu", "jvm_cpu", "rss", "heap", "share")}
        for name, *_ in jobs
    }
    n = args.events - 1_000
    pid = _jvm_pid()
    for warmup in range(1, args.warmup_rounds + 1):
        for name, fn, *_ in jobs:
            with Attribution(workdir) as samples:
                wall = fn(big, jar)
            samples.file.unlink()
            print(f"warm-up {warmup} {name:<{width}} wall {wall:6.1f}s (not counted)", flush=True)
    for round_no in range(1, args.rounds + 1):
        for name, fn, table in jobs:
            with JvmWatch() as fixed_watch:
                fixed = fn(small, jar)
            out_topic = _output(name, big)
            before = topic_size(big, out_topic) if out_topic else 0
            with Attribution(workdir) as samples, HeapWatch(pid) as heap, JvmWatch() as watch:
                wall = fn(big, jar)
            split = samples.split(table)
            if args.hot_methods:
                total = sum(samples.hot.values())
                for method, count in samples.hot.most_common(args.hot_methods):
                    print(f"    {count / total:6.1%}  {method}")
            rows = f"{topic_size(big, out_topic) - before:,}" if out_topic else "-"
            f = figures[name]
            f["rate"].append(n / max(wall - fixed, 1e-9))
            # CPU-µs per event = CPU seconds per million events.
            f["cpu"].append((watch.cpu_s - fixed_watch.cpu_s) / n * 1e6)
            f["jvm_cpu"].append((watch.jvm_cpu_s - fixed_watch.jvm_cpu_s) / n * 1e6)
            f["rss"].append(watch.peak_rss / 2**20)
            f["heap"].append(heap.peak_kib / 1024)
            f["share"].append(split["logic"] / max(split["read+parse"], 1))
            print(
                f"round {round_no} {name:<{width}} wall {wall:6.1f}s fixed {fixed:5.1f}s "
                f"{f['rate'][-1]:>9,.0f} events/s  CPU {f['cpu'][-1]:5.1f} s per 1M events "
                f"(JVM {f['jvm_cpu'][-1]:5.1f}), cores busy {watch.cpu_s / wall:.2f}  "
                f"JVM peak RSS {f['rss'][-1]:,.0f} MiB, "
                f"heap used {f['heap'][-1]:,.0f} MiB  downstream/read+parse "
                f"{split['logic']}/{split['read+parse']} samples = {f['share'][-1]:.0%}  "
                f"rows written {rows}",
                flush=True,
            )
    med = {name: {k: statistics.median(v) for k, v in f.items()} for name, f in figures.items()}
    for name, *_ in jobs:
        m = med[name]
        print(
            f"median over {args.rounds} rounds: {name:<{width}} {m['rate']:>9,.0f} events/s; "
            f"CPU {m['cpu']:.1f} s per 1M events (JVM {m['jvm_cpu']:.1f}); JVM peak RSS "
            f"max {max(figures[name]['rss']):,.0f} MiB, heap used max "
            f"{max(figures[name]['heap']):,.0f} MiB (bound {big.job.local_heap_mb:,} MiB); "
            f"CPU samples downstream of reading and parsing {m['share']:.0%} on top",
            flush=True,
        )
    peers = [name for name, *_ in jobs if name.startswith("SQL peer")]
    drift = med["drift job"]
    for name in peers:
        m = med[name]
        print(
            f"drift job vs {name}: {drift['rate'] / m['rate']:.2f}x the events/s, "
            f"{drift['cpu'] / m['cpu']:.2f}x the CPU per event",
            flush=True,
        )
    for floor in ("read-parse-discard", "read-discard"):
        if floor in med:
            m = med[floor]
            print(
                f"as a share of {floor}'s {m['rate']:,.0f} events/s, median: "
                + ", ".join(f"{name} {med[name]['rate'] / m['rate']:.0%}" for name in med),
                flush=True,
            )
    sql = "SQL peer, unnest" if "SQL peer, unnest" in med else peers[0]
    print(
        f"median over {args.rounds} rounds: {drift['rate']:,.0f} vs {med[sql]['rate']:,.0f} = "
        f"{drift['rate'] / med[sql]['rate']:.1f}x the SQL job",
        flush=True,
    )
