"""Ingest throughput: Kong http-log batches over HTTP vs a plain confluent-kafka producer of
the same records, against the same broker, in the same run.

Starts a private Kafka on free ports (or uses --bootstrap), generates realistic traffic,
then:

1. plain: produces the encoded snapshot events (exactly the bytes the service writes, keyed
   by doc type) with a bare confluent-kafka producer, the way a plain application does
   (``produce()`` per record, ``poll(0)``), and waits for every acknowledgement. It is
   configured exactly like the service's producer: idempotent, acks=all, the same
   ``--compression`` and ``--linger-ms`` (defaults: the service's own), librdkafka's defaults
   for the rest;
2. ingest: runs `anchorwatch ingest serve` in its own process(es) and posts the same events
   as Kong http-log batches (`--batch` entries per request) from `--concurrency`
   connections, each with one batch in flight as a Kong worker has (a list: each is run);
   every 200 means Kafka acknowledged the whole batch.

Prints events/s for both, the ratio, p50/p99 request latency, peak RSS of the service, CPU
per event of the service (librdkafka's threads included, and their part), of the private
broker and of this load generator, how busy the machine's cores were, and checks that the
topic holds exactly one record per event.
The broker, the service and the load generator share the machine's cores.

The broker is warmed up first (its JVM compiles the produce path under load), then
``--rounds`` rounds each run the plain producer and every ingest setup in turn; medians and
per-round ratios are printed at the end.

    .venv/bin/python bench/ingest.py --events 100000 --workers 2 --concurrency 8 32
    .venv/bin/python bench/ingest.py --events 100000 --workers 2 --concurrency 32 --summaries both

``--summaries on`` sets ``topics.summaries``, so the service writes each event's summary too
(and the topic's count is checked the same way); ``both`` runs each setup with and without.

``--rejected-mib M`` measures memory instead: one worker, ``--rejected-clients`` connections
each posting ``--rejected-requests`` Kong bodies of M MiB whose every entry is rejected (a
``started_at`` that is not a number), so each entry becomes a dead letter; prints the
service's peak RSS (VmHWM) and checks the dead-letter topic holds every entry once.

    .venv/bin/python bench/ingest.py --rejected-mib 13 --rejected-clients 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from anchorwatch import logs
from anchorwatch.connectors.server import serve
from anchorwatch.connectors.settings import IngestOptions, IngestSettings
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.demo.slice import private_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import private_kafka


def make_events(count: int) -> list[SnapshotEvent]:
    events: list[SnapshotEvent] = []
    seed = 1
    # The last hour: the service refuses events older than the snapshots topic keeps.
    start_ms = (time.time_ns() // 60_000_000_000 - 61) * 60_000
    while len(events) < count:
        config = TrafficConfig(seed=seed, minutes=60, doc_types=12, rate_scale=4, start_ms=start_ms)
        traffic = generate(config)
        events += [r.event for r in traffic.records() if r.event is not None]
        seed += 1
    return events[:count]


def plain_producer(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], compression: str, linger: float
) -> tuple[float, float, float, float]:
    """Events/s of a bare producer, from the first produce to the last acknowledgement, its
    CPU microseconds per event (librdkafka's threads included), those threads' part, and
    the private broker's CPU microseconds per event."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger,
            "compression.type": compression,
        }
    )
    producer.list_topics(topic, timeout=10)  # connected before the clock starts
    delivered = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    started, cpu = time.perf_counter(), time.process_time()
    kafka_cpu, broker_cpu = _kafka_threads_cpu_s(os.getpid()), _broker_cpu_s()
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    kafka_cpu = _kafka_threads_cpu_s(os.getpid()) - kafka_cpu
    broker_cpu = _broker_cpu_s() - broker_cpu
    if delivered != len(records):
        raise SystemExit(f"plain producer: {delivered} of {len(records)} acknowledged")
    n = len(records)
    return n / elapsed, cpu / n * 1e6, kafka_cpu / n * 1e6, broker_cpu / n * 1e6


def topic_count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        total = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def _serve(settings: IngestSettings) -> None:
    logs.configure("WARNING")
    serve(settings, log_level="WARNING")


def _tree(pid: int) -> list[int]:
    """The process and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
    return out


def _rss_peak_kib(pid: int) -> int:
    """Peak RSS (VmHWM) of a process and its descendants."""
    total = 0
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += sum(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
        )
    return total


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def _ticks(pid: int) -> int:
    """CPU clock ticks (user + system, all threads) of one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a process and its descendants."""
    return sum(_ticks(p) for p in _tree(pid)) / os.sysconf("SC_CLK_TCK")


def _broker_cpu_s(service: int | None = None) -> float:
    """CPU seconds of this process's descendants but the service's: the private broker
    (0 with --bootstrap)."""
    own, skip = os.getpid(), set(_tree(service)) if service else set()
    ticks = sum(_ticks(p) for p in _tree(own) if p != own and p not in skip)
    return ticks / os.sysconf("SC_CLK_TCK")


def _kafka_threads_cpu_s(pid: int) -> float:
    """CPU seconds of librdkafka's threads (named rdk:...) in a process and its descendants:
    the part of the service's CPU that is the Kafka client's own."""
    ticks = 0
    for p in _tree(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                name, _, rest = (task / "stat").read_text().partition(" (")[2].rpartition(")")
            except OSError:
                continue
            if name.startswith("rdk:"):
                fields = rest.split()
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def _wait_ready(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"the service did not become ready at {url}")


async def _connection(
    port: int, requests: list[bytes], next_index: list[int], latencies: list[float]
) -> None:
    """One keep-alive HTTP/1.1 connection posting prebuilt requests until none are left.
    A bare client, so that the load generator leaves the cores to the service."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while next_index[0] < len(requests):
            request = requests[next_index[0]]
            next_index[0] += 1
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            if not status.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"ingest answered {status!r}: {answer[:300]!r}")
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


def http_requests(bodies: list[bytes], path: str = "/v1/kong") -> list[bytes]:
    return [
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
        for body in bodies
    ]


async def post_all(port: int, requests: list[bytes], concurrency: int) -> tuple[float, list[float]]:
    """Post every request over ``concurrency`` connections; (elapsed seconds, latencies)."""
    latencies: list[float] = []
    next_index = [0]
    started = time.perf_counter()
    await asyncio.gather(
        *(_connection(port, requests, next_index, latencies) for _ in range(concurrency))
    )
    return time.perf_counter() - started, latencies


def run_ingest(
    job: JobSettings,
    requests: list[bytes],
    events: int,
    workers: int,
    concurrency: int,
    compression: str,
    linger: float,
) -> dict[str, float]:
    topics = job.topics
    port = free_port()
    settings = IngestSettings.load(
        kafka=job.kafka.model_dump(),
        topics=topics.model_dump(),
        # The bench's bare client sends no token (a constant-time compare per request).
        ingest={
            "port": port,
            "workers": workers,
            "linger_ms": linger,
            "compression": compression,
            "insecure_no_auth": True,
        },
    )
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(settings,))
    server.start()
    try:
        asyncio.run(_wait_ready(f"http://127.0.0.1:{port}/readyz"))
        warm_up = requests[: max(1, len(requests) // 20)]
        asyncio.run(post_all(port, warm_up, concurrency))
        warm = topic_count(job.kafka.bootstrap_servers, topics.snapshots)
        warm_summaries = (
            topic_count(job.kafka.bootstrap_servers, topics.summaries) if topics.summaries else 0
        )
        assert server.pid is not None
        cpu, client_cpu, machine = _cpu_s(server.pid), time.process_time(), _machine_busy()
        kafka_cpu, broker_cpu = _kafka_threads_cpu_s(server.pid), _broker_cpu_s(server.pid)
        elapsed, latencies = asyncio.run(post_all(port, requests, concurrency))
        cpu = _cpu_s(server.pid) - cpu
        kafka_cpu = _kafka_threads_cpu_s(server.pid) - kafka_cpu
        broker_cpu = _broker_cpu_s(server.pid) - broker_cpu
        client_cpu = time.process_time() - client_cpu
        busy, total = (b - a for a, b in zip(machine, _machine_busy(), strict=True))
        rss_kib = _rss_peak_kib(server.pid)
        in_topic = topic_count(job.kafka.bootstrap_servers, topics.snapshots) - warm
        summaries = (
            topic_count(job.kafka.bootstrap_servers, topics.summaries) - warm_summaries
            if topics.summaries
            else events
        )
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGTERM)
        server.join(60)
    if in_topic != events:
        raise SystemExit(f"ingest: {in_topic} records in the topic for {events} events")
    if summaries != events:
        raise SystemExit(f"ingest: {summaries} summaries in their topic for {events} events")
    latencies.sort()
    return {
        "events_per_s": events / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "rss_mib": rss_kib / 1024,
        "cpu_us": cpu / events * 1e6,
        "kafka_cpu_us": kafka_cpu / events * 1e6,
        "client_cpu_us": client_cpu / events * 1e6,
        "broker_cpu_us": broker_cpu / events * 1e6,
        "machine_busy": busy / total,
    }


broker = private_kafka


def rejected_body(events: list[SnapshotEvent], mib: float, seed: int) -> tuple[bytes, int]:
    """A Kong batch of about ``mib`` MiB whose every entry is rejected; (body, entries)."""
    entries: list[dict[str, Any]] = []
    size, target = 2, int(mib * 1024 * 1024)
    while size < target:
        for e in events:
            entry = to_kong_entry(e)
            entry["started_at"] = f"yesterday-{seed}-{len(entries)}"
            size += len(orjson.dumps(entry)) + 1
            entries.append(entry)
            if size >= target:
                break
    return orjson.dumps(entries), len(entries)


def run_rejected(args: argparse.Namespace) -> None:
    """Peak RSS of one worker while several clients post large bodies of rejected entries."""
    events = make_events(2_000)
    bodies = [rejected_body(events, args.rejected_mib, c) for c in range(args.rejected_clients)]
    entries = sum(n for _, n in bodies) * args.rejected_requests
    print(
        f"{args.rejected_clients} clients x {args.rejected_requests} requests of "
        f"{len(bodies[0][0]) / 2**20:.1f} MiB ({bodies[0][1]} rejected Kong entries each)"
    )
    with broker(args.bootstrap) as bootstrap:
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        with private_topics(base) as job:
            port = free_port()
            settings = IngestSettings.load(
                kafka=job.kafka.model_dump(),
                topics=job.topics.model_dump(),
                ingest={"port": port, "ack_timeout_s": 60, "insecure_no_auth": True},
            )
            server = multiprocessing.get_context("spawn").Process(target=_serve, args=(settings,))
            server.start()
            try:
                asyncio.run(_wait_ready(f"http://127.0.0.1:{port}/readyz"))
                assert server.pid is not None
                idle_kib = _rss_peak_kib(server.pid)
                started = time.perf_counter()

                async def clients() -> None:
                    await asyncio.gather(
                        *(
                            post_all(port, http_requests([b] * args.rejected_requests), 1)
                            for b, _ in bodies
                        )
                    )

                asyncio.run(clients())
                elapsed = time.perf_counter() - started
                peak_kib = _rss_peak_kib(server.pid)
            finally:
                if server.pid is not None:
                    os.kill(server.pid, signal.SIGTERM)
                server.join(60)
            letters = topic_count(bootstrap, job.topics.dead_letter)
    if letters != entries:
        raise SystemExit(f"dead-letter topic holds {letters} records for {entries} entries")
    print(
        f"peak RSS of the service: {peak_kib / 1024:.0f} MiB (after start-up: "
        f"{idle_kib / 1024:.0f} MiB); {entries} dead letters in {elapsed:.1f}s, each once"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100, help="Kong entries per request")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[8, 32],
        help="client connections, each with one Kong batch in flight (as a Kong worker has)",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument(
        "--summaries",
        choices=("off", "on", "both"),
        default="off",
        help="the service also writes each event's summary (topics.summaries set); 'both' "
        "runs every setup with and without, in the same rounds",
    )
    defaults = IngestOptions()
    parser.add_argument(
        "--compression",
        default=defaults.compression,
        help="producer compression.type, for both sides [default: the service's]",
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=defaults.linger_ms,
        help="producer linger.ms, for both sides [default: the service's]",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of plain + every ingest setup, alternating; medians are reported",
    )
    parser.add_argument(
        "--warmup-events",
        type=int,
        default=500_000,
        help="records the plain producer writes first, to warm the broker up",
    )
    parser.add_argument(
        "--rejected-mib",
        type=float,
        help="measure peak RSS instead: bodies of this many MiB, every entry rejected",
    )
    parser.add_argument("--rejected-clients", type=int, default=3)
    parser.add_argument("--rejected-requests", type=int, default=4, help="per client")
    args = parser.parse_args()
    if args.rejected_mib:
        run_rejected(args)
        return
    print("load average (1, 5, 15 min) at the start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))

    t = time.perf_counter()
    events = make_events(args.events)
    records = [(e.doc_type.encode(), encode(e)) for e in events]
    bodies = [
        orjson.dumps([to_kong_entry(e) for e in events[i : i + args.batch]])
        for i in range(0, len(events), args.batch)
    ]
    requests = http_requests(bodies)
    entry_size = sum(map(len, bodies)) / len(events)
    record_size = sum(len(v) for _, v in records) / len(events)
    print(
        f"{len(events)} events, {len(bodies)} Kong batches of {args.batch} "
        f"({entry_size:,.0f} bytes/entry, {record_size:,.0f} bytes/record); "
        f"prepared in {time.perf_counter() - t:.1f}s"
    )
    compression, linger = args.compression, args.linger_ms
    summarised = {"off": [False], "on": [True], "both": [False, True]}[args.summaries]
    setups = [(w, c, s) for w in args.workers for c in args.concurrency for s in summarised]
    with broker(args.bootstrap) as bootstrap:
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        with_summaries = JobSettings.load(
            kafka={"bootstrap_servers": bootstrap}, topics={"summaries": "anchorwatch.summaries"}
        )
        warm_up_broker(base, records, args.warmup_events, compression, linger)
        plains: list[float] = []
        ingests: dict[tuple[int, int, bool], list[float]] = {s: [] for s in setups}
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}:")
            plain = run_plain(base, records, compression, linger)
            plains.append(plain)
            for workers, concurrency, summaries in setups:
                with private_topics(with_summaries if summaries else base) as job:
                    r = run_ingest(
                        job, requests, len(events), workers, concurrency, compression, linger
                    )
                ingests[workers, concurrency, summaries].append(r["events_per_s"])
                also = " + summaries" if summaries else ""
                print(
                    f"  ingest{also} over HTTP, {workers} worker(s), {concurrency} connections: "
                    f"{r['events_per_s']:>8,.0f} events/s ({r['events_per_s'] / plain:.0%} of "
                    f"plain), request p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                    f"peak RSS {r['rss_mib']:.0f} MiB, {r['cpu_us']:.1f} us CPU per event "
                    f"({r['kafka_cpu_us']:.1f} in librdkafka's threads; broker "
                    f"{r['broker_cpu_us']:.1f} us; load generator {r['client_cpu_us']:.1f} us; "
                    f"cores busy {r['machine_busy']:.0%}); topic holds exactly {len(events)} "
                    "records" + (" (and its summaries topic as many)" if summaries else "")
                )
        plain_median = statistics.median(plains)
        print(f"medians over {args.rounds} round(s): plain producer {plain_median:,.0f} events/s")
        for (workers, concurrency, summaries), rates in ingests.items():
            median = statistics.median(rates)
            per_round = ", ".join(f"{r / p:.0%}" for r, p in zip(rates, plains, strict=True))
            also = " + summaries" if summaries else ""
            print(
                f"  ingest{also}, {workers} worker(s), {concurrency} connections: {median:,.0f} "
                f"events/s, {median / plain_median:.0%} of plain (per round: {per_round})"
            )
        print(
            "load average (1, 5, 15 min) at the end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
        )


def warm_up_broker(
    base: JobSettings,
    records: list[tuple[bytes, bytes]],
    count: int,
    compression: str,
    linger: float,
) -> None:
    """The broker's JVM compiles its produce path under load: on a cold broker the same
    ingest run gets faster round after round (docs/benchmarks.md). Warm it before measuring
    anything."""
    if count <= 0:
        return
    t = time.perf_counter()
    cycled = (records * (count // len(records) + 1))[:count]
    with private_topics(base) as job:
        plain_producer(
            base.kafka.bootstrap_servers, job.topics.snapshots, cycled, compression, linger
        )
    print(f"broker warmed up with {count:,} records in {time.perf_counter() - t:.1f}s")


def run_plain(
    base: JobSettings, records: list[tuple[bytes, bytes]], compression: str, linger: float
) -> float:
    with private_topics(base) as job:
        plain, cpu, kafka_cpu, broker_cpu = plain_producer(
            base.kafka.bootstrap_servers, job.topics.snapshots, records, compression, linger
        )
    print(
        f"  plain confluent-kafka producer: {plain:>10,.0f} events/s, {cpu:.1f} us CPU per "
        f"event ({kafka_cpu:.1f} in librdkafka's threads; broker {broker_cpu:.1f} us; "
        f"compression {compression}, linger.ms {linger:g})"
    )
    return plain


if __name__ == "__main__":
    main()
