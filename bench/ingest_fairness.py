"""Fairness between gateways: does one gateway's flood slow another's requests?

Starts a private Kafka on free ports (or uses --bootstrap) and `anchorwatch ingest serve`
in its own process with a credentials file of two gateways: ``flood`` (rate limited:
``--flood-rate`` requests/s, burst twice that) and ``quiet`` (no limit). In one run, side by
side:

1. quiet alone: ``quiet`` posts one Kong batch (``--batch`` entries) every
   ``--quiet-interval-ms`` for ``--seconds``, as a Kong worker does;
2. quiet during the flood: the same, while ``flood`` posts the same batches from
   ``--flood-concurrency`` connections as fast as it is answered (retrying 429s at once,
   which is harsher than Kong, which waits ``Retry-After``).

Prints the quiet gateway's p50/p99 request latency in both phases and their ratio, and the
flood's answers by status (200 within its rate, 429 past it).

    .venv/bin/python -m bench.ingest_fairness --seconds 10 --flood-concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import orjson

from anchorwatch.connectors import credentials as creds
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.demo.slice import private_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import private_kafka
from bench.ingest import _serve, _wait_ready, make_events
from bench.quantiles import MISS, quantile


def credentials_file(directory: Path, flood_rate: float) -> tuple[Path, dict[str, str]]:
    """Two gateways, every doc type each; their tokens by name."""
    tokens = {"flood": creds.new_token(), "quiet": creds.new_token()}
    now = datetime.now(UTC).replace(microsecond=0)
    rate = creds.RateLimit(per_s=flood_rate, burst=max(1, round(flood_rate * 2)))
    gateways = {
        name: creds.GatewayEntry(
            doc_types=["*"],
            rate=rate if name == "flood" else None,
            secrets=[creds.SecretEntry(id="bench", sha256=creds.digest_hex(t), created=now)],
        )
        for name, t in tokens.items()
    }
    path = directory / "credentials.json"
    creds.write(path, creds.CredentialsFile(gateways=gateways))
    return path, tokens


async def quiet_sender(
    url: str, token: str, body: bytes, interval_s: float, until: float
) -> list[float]:
    """One request every ``interval_s`` until ``until``: each one's latency (MISS: failed)."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    ok = r.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            elapsed = time.perf_counter() - started
            latencies.append(elapsed if ok else MISS)
            await asyncio.sleep(max(0.0, interval_s - elapsed))
    return latencies


async def flooder(
    url: str, token: str, body: bytes, concurrency: int, stop: asyncio.Event
) -> Counter[int]:
    statuses: Counter[int] = Counter()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def one(http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    statuses[r.status] += 1
            except (aiohttp.ClientError, TimeoutError):
                statuses[0] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(one(http) for _ in range(concurrency)))
    return statuses


async def measure(
    url: str, tokens: dict[str, str], body: bytes, args: argparse.Namespace
) -> tuple[list[float], list[float], Counter[int]]:
    interval = args.quiet_interval_ms / 1000
    alone = await quiet_sender(
        url, tokens["quiet"], body, interval, time.monotonic() + args.seconds
    )
    stop = asyncio.Event()
    flood = asyncio.create_task(flooder(url, tokens["flood"], body, args.flood_concurrency, stop))
    await asyncio.sleep(1.0)  # the flood under way, its burst spent
    during = await quiet_sender(
        url, tokens["quiet"], body, interval, time.monotonic() + args.seconds
    )
    stop.set()
    return alone, during, await flood


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="Kafka to use instead of a private one.")
    parser.add_argument("--seconds", type=float, default=10, help="Length of each phase.")
    parser.add_argument("--batch", type=int, default=100, help="Kong entries per request.")
    parser.add_argument("--quiet-interval-ms", type=float, default=50)
    parser.add_argument("--flood-concurrency", type=int, default=32)
    parser.add_argument("--flood-rate", type=float, default=20, help="flood's requests/s.")
    args = parser.parse_args()
    events = make_events(args.batch)
    body = orjson.dumps([to_kong_entry(e) for e in events])
    with private_kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        with private_topics(base) as job:
            path, tokens = credentials_file(Path(tmp), args.flood_rate)
            port = free_port()
            settings = IngestSettings.load(
                kafka=job.kafka.model_dump(),
                topics=job.topics.model_dump(),
                ingest={"port": port, "credentials_file": path},
            )
            server = multiprocessing.get_context("spawn").Process(target=_serve, args=(settings,))
            server.start()
            try:
                asyncio.run(_wait_ready(f"http://127.0.0.1:{port}/readyz"))
                alone, during, statuses = asyncio.run(
                    measure(f"http://127.0.0.1:{port}/v1/kong", tokens, body, args)
                )
            finally:
                if server.pid is not None:
                    os.kill(server.pid, signal.SIGTERM)
                server.join(60)
    report(alone, during, statuses, args)


def report(
    alone: list[float], during: list[float], statuses: Counter[int], args: argparse.Namespace
) -> None:
    def ms(values: list[float], p: float) -> float:
        return quantile(values, p) * 1000

    print(
        f"quiet gateway: one {args.batch}-entry Kong batch every {args.quiet_interval_ms:g} ms; "
        f"flood: {args.flood_concurrency} connections, limited to {args.flood_rate:g} req/s"
    )
    print(f"{'quiet gateway':<22}{'requests':>9}{'misses':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for label, values in (("alone", alone), ("during the flood", during)):
        misses = sum(v == MISS for v in values)
        print(
            f"{label:<22}{len(values):>9}{misses:>8}{ms(values, 0.5):>9.2f}{ms(values, 0.99):>9.2f}"
        )
    print(
        f"{'ratio (flood / alone)':<22}{'':>17}{ms(during, 0.5) / ms(alone, 0.5):>9.2f}"
        f"{ms(during, 0.99) / ms(alone, 0.99):>9.2f}"
    )
    answers = ", ".join(f"{code or 'error'}: {n}" for code, n in sorted(statuses.items()))
    print(f"flood's answers by status: {answers}")


if __name__ == "__main__":
    main()
