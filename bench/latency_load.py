"""The load of bench/latency.py: live Kong http-log batches posted to the ingest service,
paced to a rate, with event time = the wall clock when each batch is built.

Run by bench/latency.py as its own process(es) (so that the measuring process is not slowed
by it), one per ``--senders``:

    .venv/bin/python -m bench.latency_load SPEC.json OUT.json

``SPEC.json`` says where to post (host, port, token), the rate of this sender, the doc types
and which of them drift from when (wall-clock ms), the batch size, the connections and when
to start and stop. Entries are cheap: per doc type a pool of ``POOL`` Kong entries (the
generator's events at the type's level, ``anchorwatch.demo.kong_entry``) is serialised once
with markers for the request id and ``started_at``; a batch is those bytes with the markers
replaced. Each connection (a bare keep-alive HTTP/1.1 client, one batch in flight, as a Kong
worker) takes the next batch of the schedule (batch k is due at start + k x batch / rate),
waits until it is due (not when behind: then it is sent at once), and posts it. ``OUT.json``
gets, per wall-clock minute, the entries offered (due), sent, accepted (200 answers:
accepted + already written), rejected and failed (no 200), and every request's (start,
seconds, status).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.contracts.models import RESAMPLE, SnapshotEvent
from anchorwatch.demo.generator import RESAMPLE_ABOVE, TrafficConfig, answered_event, generate
from anchorwatch.demo.kong_entry import to_kong_entry

#: Kong entries per doc type and drift state, used in turn.
POOL: Final = 16
#: Drift added to every anchor of a drifting type (clipped at 1).
JUMP: Final = 0.25
#: Pinned thresholds, above the pool's own mean drift (JUMP clears the critical one).
WARN_MARGIN: Final = 0.10
CRITICAL_MARGIN: Final = 0.18
_ID: Final = b"@@REQUEST-ID@@"
_TIME: Final = b"1111111111111"  # a started_at no real entry has
MINUTE_S: Final = 60
MIN: Final = 60_000
ROOT: Final = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DocTypePool:
    name: str
    normal: tuple[tuple[bytes, ...], ...]  # entry templates: parts around the markers
    drifted: tuple[tuple[bytes, ...], ...]
    normal_mean: float  # mean request drift of the templates (what a window's mean is)
    drifted_mean: float


def doc_type_names(seed: int, count: int) -> list[str]:
    return [p.name for p in generate(TrafficConfig(seed=seed, doc_types=count)).profiles]


def _shifted(event: SnapshotEvent, jump: float) -> SnapshotEvent:
    anchors = []
    for a in event.anchors:
        drift = round(min(1.0, a.drift_score + jump), 4)
        rec = RESAMPLE if drift > RESAMPLE_ABOVE else a.recommendation
        anchors.append(a.model_copy(update={"drift_score": drift, "recommendation": rec}))
    return event.model_copy(update={"anchors": anchors})


def template(event: SnapshotEvent) -> tuple[bytes, ...]:
    """The entry of ``event`` serialised once, cut around its request id and start time
    (the markers ``fill`` replaces). No ``tries``: it would carry the time once more."""
    entry = to_kong_entry(event.model_copy(update={"event_time_ms": int(_TIME)}))
    entry.pop("tries", None)
    raw = orjson.dumps(entry).replace(b'"%s"' % event.event_id.encode(), b'"%s"' % _ID)
    return tuple(p for p in re.split(b"(%s|%s)" % (_ID, _TIME), raw) if p)


def fill(parts: Sequence[bytes], event_id: bytes, started_at: bytes) -> bytes:
    """A template's entry with its request id and ``started_at`` (epoch ms) put in."""
    return b"".join(event_id if p == _ID else started_at if p == _TIME else p for p in parts)


def build_pools(seed: int, names: Sequence[str], pool: int = POOL) -> list[DocTypePool]:
    """Per doc type: ``pool`` requests at its level (drawn like the generator's: a level per
    request around the type's base, anchors around it) and the same requests ``JUMP``
    higher. Bases from 0.15 to 0.35, so a drifted type stays below the re-sample line
    (no data-quality diagnosis, which would wait for its group)."""
    profiles = generate(TrafficConfig(seed=seed, doc_types=len(names))).profiles
    out = []
    for i, (name, prof) in enumerate(zip(names, profiles, strict=True)):
        rng = random.Random(f"latency:{seed}:{i}")
        base = rng.uniform(0.15, 0.35)
        model = prof.models[0][0] if prof.models else None
        events = [
            answered_event(
                rng,
                event_id=f"tpl-{i}-{k}",
                event_time_ms=int(_TIME),
                doc_type=name,
                level=base + rng.gauss(0.0, prof.spread * 0.6),
                noise=prof.spread * 0.8,
                anchors_mean=prof.anchors_mean,
                model=model,
            )
            for k in range(pool)
        ]
        drifted = [_shifted(e, JUMP) for e in events]
        out.append(
            DocTypePool(
                name=name,
                normal=tuple(template(e) for e in events),
                drifted=tuple(template(e) for e in drifted),
                normal_mean=sum(e.mean_drift for e in events) / pool,
                drifted_mean=sum(e.mean_drift for e in drifted) / pool,
            )
        )
    return out


# --------------------------------------------------------------------------- pacing


def due_s(k: int, *, start_s: float, batch: int, rate: float) -> float:
    """When batch ``k`` (from 0) of a sender offering ``rate`` entries/s is due."""
    return start_s + k * batch / rate


def batches_due(start_s: float, stop_s: float, *, batch: int, rate: float) -> int:
    """How many batches are due in [start, stop)."""
    if rate <= 0 or stop_s <= start_s:
        return 0
    return math.ceil((stop_s - start_s) * rate / batch)


def drifting(onset_ms: int | None, drift_ms: int, t_ms: int) -> bool:
    return onset_ms is not None and onset_ms <= t_ms < onset_ms + drift_ms


@dataclass
class Stats:
    offered: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    sent: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    accepted: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    rejected: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    failed: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    requests: list[tuple[float, float, int]] = field(default_factory=list)

    def to_json(self) -> bytes:
        keys = ("offered", "sent", "accepted", "rejected", "failed")
        data: dict[str, Any] = {k: {str(m): n for m, n in getattr(self, k).items()} for k in keys}
        data["requests"] = self.requests
        return orjson.dumps(data)


class Sender:
    def __init__(self, spec: dict[str, Any], pools: list[DocTypePool]) -> None:
        self.spec, self.pools = spec, pools
        self.onsets: dict[int, int] = {int(k): int(v) for k, v in spec["onsets"].items()}
        self.rate = float(spec["rate"])
        self.batch = int(spec["batch"])
        self.start_s, self.stop_s = float(spec["start_s"]), float(spec["stop_s"])
        self.total = batches_due(self.start_s, self.stop_s, batch=self.batch, rate=self.rate)
        self.next_k = 0
        self.seq = 0
        self.stats = Stats()
        self.head = (
            b"POST /v1/kong HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: "
            % (spec["host"].encode(), spec["token"].encode())
        )

    def body(self, now_ms: int) -> bytes:
        n, drift_ms, prefix = len(self.pools), int(self.spec["drift_ms"]), self.spec["id_prefix"]
        t = str(now_ms).encode()
        entries = []
        for _ in range(self.batch):
            j = self.seq
            self.seq += 1
            i = (j + int(self.spec["offset"])) % n
            p = self.pools[i]
            pool = p.drifted if drifting(self.onsets.get(i), drift_ms, now_ms) else p.normal
            entries.append(fill(pool[(j // n) % len(pool)], f"{prefix}-{j}".encode(), t))
        return b"[" + b",".join(entries) + b"]"

    async def connection(self) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while self.next_k < self.total:
            k = self.next_k
            self.next_k += 1
            due = due_s(k, start_s=self.start_s, batch=self.batch, rate=self.rate)
            self.stats.offered[int(due // MINUTE_S) * MINUTE_S] += self.batch
            if (wait := due - time.time()) > 0:
                await asyncio.sleep(wait)
            now = time.time()
            if now >= self.stop_s + 5:  # too far behind: what is left is not sent
                continue
            minute = int(now // MINUTE_S) * MINUTE_S
            body = self.body(int(now * 1000))
            started = time.perf_counter()
            status, answer = 0, b""
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(
                        self.spec["host"], int(self.spec["port"])
                    )
                assert reader is not None
                writer.write(self.head + b"%d\r\n\r\n" % len(body) + body)
                await writer.drain()
                status, answer = await _answer(reader)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                if writer is not None:
                    writer.close()
                reader = writer = None
            self.stats.sent[minute] += self.batch
            self.stats.requests.append((now, time.perf_counter() - started, status))
            if status == 200:
                got = orjson.loads(answer)
                self.stats.accepted[minute] += int(got["accepted"]) + int(got["already_written"])
                self.stats.rejected[minute] += int(got["rejected"])
            else:
                self.stats.failed[minute] += self.batch
        if writer is not None:
            writer.close()

    async def run(self) -> None:
        await asyncio.gather(*(self.connection() for _ in range(int(self.spec["concurrency"]))))


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    line = await reader.readline()
    if not line:
        raise ValueError("connection closed")
    status = int(line.split(b" ", 2)[1])
    length = 0
    while (header := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Schedule:
    """Wall-clock ms (= event time): traffic from ``start_ms`` to ``stop_ms``; the measured
    windows end in (measure_start_ms, measure_end_ms]; drifting type index -> its onset."""

    start_ms: int
    measure_start_ms: int
    measure_end_ms: int
    stop_ms: int
    onsets: dict[int, int]
    drift_ms: int
    open_after: int

    def opening_end_ms(self, index: int) -> int:
        """The end of the window expected to open drifting type ``index``'s incident."""
        return self.onsets[index] + self.open_after * MIN

    def measured_ends(self) -> list[int]:
        return list(range(self.measure_start_ms + MIN, self.measure_end_ms + 1, MIN))


def drifting_types(doc_types: int, drifting: int) -> list[int]:
    """The indexes of the drifting types: spread evenly over the doc types."""
    return [(i * doc_types) // drifting for i in range(drifting)]


def plan(
    now_ms: int,
    *,
    warmup_s: float,
    minutes: int,
    doc_types: int,
    drifting: int,
    open_after: int,
    tail_ms: int,
) -> Schedule:
    """The run's schedule: measured windows from the first minute boundary after the
    warm-up; the drifting types spread evenly over the doc types, their onsets cycled over
    the measured windows whose incident still opens inside the measured span."""
    if not 0 <= drifting <= doc_types:
        raise ValueError(f"--drifting: 0 to {doc_types} (the doc types), got {drifting}")
    if minutes < open_after:
        raise ValueError(f"--minutes: at least {open_after} (windows that open an incident)")
    measure_start = -(-(now_ms + int(warmup_s * 1000)) // MIN) * MIN
    measure_end = measure_start + minutes * MIN
    slots = minutes - open_after + 1
    onsets = {
        t: measure_start + (i % slots) * MIN
        for i, t in enumerate(drifting_types(doc_types, drifting))
    }
    return Schedule(
        start_ms=now_ms,
        measure_start_ms=measure_start,
        measure_end_ms=measure_end,
        stop_ms=measure_end + tail_ms,
        onsets=onsets,
        drift_ms=(open_after + 1) * MIN,
        open_after=open_after,
    )


def sender_specs(
    schedule: Schedule,
    *,
    url: str,
    tokens: Sequence[str],
    rate: float,
    batch: int,
    concurrency: int,
    names: Sequence[str],
    seed: int,
    run_id: str,
) -> list[dict[str, Any]]:
    """One spec per sender: each offers its share of ``rate`` over every doc type."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return [
        {
            "host": host,
            "port": int(port),
            "token": token,
            "rate": rate / len(tokens),
            "batch": batch,
            "concurrency": concurrency,
            "doc_types": list(names),
            "seed": seed,
            "onsets": {str(k): v for k, v in schedule.onsets.items()},
            "drift_ms": schedule.drift_ms,
            "start_s": schedule.start_ms / 1000,
            "stop_s": schedule.stop_ms / 1000,
            "id_prefix": f"{run_id}-{s}",
            "offset": s * batch,
        }
        for s, token in enumerate(tokens)
    ]


@contextlib.contextmanager
def senders(specs: list[dict[str, Any]], run_dir: Path) -> Iterator[list[Path]]:
    """The load processes, running; killed on the way out if still there."""
    procs, outs = [], []
    try:
        for i, spec in enumerate(specs):
            path, out = run_dir / f"sender-{i}.json", run_dir / f"sender-{i}.out.json"
            path.write_bytes(orjson.dumps(spec))
            with (run_dir / f"sender-{i}.log").open("ab") as log:
                argv = [sys.executable, "-m", "bench.latency_load", str(path), str(out)]
                procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=log,
                                              stderr=subprocess.STDOUT,
                                              start_new_session=True))  # fmt: skip
            outs.append(out)
        yield outs
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def load_stats(outs: Sequence[Path]) -> dict[str, Any]:
    """The senders' figures, summed per minute; every request of all of them."""
    total: dict[str, Any] = {k: {} for k in ("offered", "sent", "accepted", "rejected", "failed")}
    reqs: list[list[float]] = []
    for out in outs:
        if not out.exists():
            continue
        data = orjson.loads(out.read_bytes())
        for k, per in total.items():
            for m, n in data[k].items():
                per[int(m)] = per.get(int(m), 0) + n
        reqs += data["requests"]
    total["requests"] = reqs
    return total


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec_path, out_path = Path(args[0]), Path(args[1])
    spec = orjson.loads(spec_path.read_bytes())
    pools = build_pools(int(spec["seed"]), spec["doc_types"])
    sender = Sender(spec, pools)
    stop = asyncio.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        task = asyncio.ensure_future(sender.run())
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        waiter.cancel()

    print(f"sender ready: {len(pools)} doc types, {sender.total} batches", flush=True)
    asyncio.run(run())
    out_path.write_bytes(sender.stats.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
