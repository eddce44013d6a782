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
    .venv/bin/python bench/job.py --events 1000000 --rounds 3 --peer flink-sql --peer-floors

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
   machine disturbs far less than wall time; it includes the JIT compiling the job's classes
   anew (each job gets its own classloader, so the warm-up rounds do not warm them), shown
   apart as "of it JIT" (the JVM's compiler threads' CPU, big run minus small run); and,
   from Java Flight Recorder samples of the same run, the CPU the job spends downstream of
   reading and parsing, as a share of the CPU spent reading and parsing: the cost of the
   job's logic, immune to machine load. `--rounds` alternates the jobs, after
   `--warmup-rounds` (default 1) unmeasured rounds of them all over the same topic, so that
   no measured run pays for compiling the code the jobs share (the JVM's and Flink's own
   classes: Kafka's reading, the runtime); medians and ratios (each job against
   read-parse-discard and read-discard over the same input) are printed. `--dedup both` also
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

5. `--peer flink-sql`: instead of steps 2 to 4, the drift job alternating with the Flink
   SQL job a user would write instead (bench/peer_sql.py: per doc type, one-minute tumbling
   windows, AVG(drift_score) and COUNT(*), Flink's `json` format) over the same snapshots,
   with events/s, CPU per million events, JVM peak RSS and heap; bench/job_peer.py.

The events loaded and the jobs run are in bench/job_runs.py, the instruments (CPU and peak
RSS, the flight recorder's split, the latency step) in bench/job_measure.py; this script
runs the steps in order and prints the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.demo import slice as flow
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.stack import private_kafka
from bench import job_peer, peer_sql
from bench.job_measure import Attribution, latency, measured
from bench.job_runs import (
    FLOORS,
    INPUTS,
    RAW,
    load_events,
    over,
    run_discard,
    run_discard_jackson,
    run_drift,
    run_drift_on_rocksdb,
    run_drift_without_dedup,
    run_read_discard,
    topic_size,
)
from bench.quantiles import MISS, misses, quantile


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
        "run pays for the JIT compiling the JVM's and Flink's own code (not the job's "
        "classes: each job has its own classloader)",
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
    parser.add_argument(
        "--peer",
        choices=("flink-sql",),
        help="instead of the floors and the latency step, the drift job alternating with the "
        "Flink SQL job a user would write (bench/peer_sql.py) over the snapshots",
    )
    parser.add_argument(
        "--peer-variants",
        default=",".join(peer_sql.VARIANTS),
        help="the SQL peer's variants, comma-separated: 'unnest' (AVG over the anchors' "
        "drift_score, the honest peer) and/or 'mean' (AVG over each record's mean_drift)",
    )
    parser.add_argument(
        "--peer-floors",
        action="store_true",
        help="with --peer: also read-parse-discard and read-discard in the same rounds",
    )
    parser.add_argument(
        "--peer-threshold",
        type=float,
        default=peer_sql.THRESHOLD,
        help="the SQL peer's HAVING AVG(...) > threshold (a check: 0 writes every window)",
    )
    args = parser.parse_args()
    if args.peer and args.input != "snapshots":
        parser.error("--peer reads the snapshots: --input snapshots only")
    if args.peer and not set(args.peer_variants.split(",")) <= set(peer_sql.VARIANTS):
        parser.error(f"--peer-variants: some of {', '.join(peer_sql.VARIANTS)}")
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
    jits: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    shares: dict[str, list[float]] = {name: [] for name, *_ in jobs}
    peaks: list[float] = []
    # The first Flink call starts the mini-cluster's JVM: its boot would count in the first
    # job's fixed cost (CPU per event below zero). One unmeasured run starts it first.
    run_read_discard(over(small, inputs[0]), jar)
    if args.peer:
        job_peer.bench(small, big, jar, workdir, args)
        return
    # Unmeasured runs of every job over the big topic, recorded as the measured ones are:
    # the JIT compiles the JVM's and Flink's own code (the Kafka reading, the runtime), with
    # the flight recorder on, before any round counts (else round 1 runs cold: read-discard
    # then measured at a third of its later rate, and a first recording alone slowed every
    # job of its round). Not the job's classes: each submission loads them in a classloader
    # of its own, compiled anew in every run (the "of it JIT" figure).
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
            jit_us = (watch.jit_s - fixed_watch.jit_s) / n * 1e6
            share = split["logic"] / max(split["read+parse"], 1)
            rates[name].append(events_per_s)
            cpus[name].append(cpu_us)
            jits[name].append(jit_us)
            shares[name].append(share)
            peaks.append(watch.peak_rss / 2**20)
            print(
                f"round {round_no} {name:<{width}} wall {wall:6.1f}s fixed {fixed:5.1f}s "
                f"{events_per_s:>10,.0f} events/s  {cpu_us:5.1f} CPU-µs/event "
                f"({jit_us:.1f} of it JIT)  "
                f"logic/read+parse {split['logic']}/{split['read+parse']} samples = {share:.0%}  "
                f"JVM peak RSS {watch.peak_rss / 2**20:,.0f} MiB  "
                f"verdicts written {verdicts - verdicts_before:,} (in topic {verdicts:,})",
                flush=True,
            )
    med_rate, med_cpu, med_jit, med_share = ({name: statistics.median(v[name])
                                              for name, *_ in jobs}
                                             for v in (rates, cpus, jits, shares))  # fmt: skip

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
                  + f"; CPU per event {c:.1f} µs (JIT {med_jit[name]:.1f}) vs "
                  + ", ".join(f"{ref}'s {med_cpu[ref]:.1f} (JIT {med_jit[ref]:.1f}, "
                              f"{c / med_cpu[ref] - 1:+.0%})"
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
