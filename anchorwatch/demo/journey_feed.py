"""Feeding the run's traffic to the ingest service as a Kong node would: the plan's entries
in http-log batches (``KongTraffic``), POSTed one batch at a time per worker with Kong's
retries and the bearer token of connectors/kong-http-log.yaml, each worker as its own
gateway (``send_batches``), live
batches each when it is due on the replay clock (``ReplayClock``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from anchorwatch.demo import journey_plan as jp


@dataclass(frozen=True)
class KongTraffic:
    """The plan's history and live traffic as Kong entries and batches."""

    history: list[jp.Entry]
    live: list[jp.Entry]
    history_batches: list[jp.Batch]
    live_batches: list[jp.Batch]

    @classmethod
    def of(cls, plan: jp.Plan, *, broken_every: int, batch_size: int, workers: int) -> KongTraffic:
        history, live = plan.split()
        entries_h = jp.kong_entries(history, broken_every=broken_every)
        entries_l = jp.kong_entries(live, broken_every=broken_every, intact=plan.intact)
        # History is a backlog: full batches, one sender, in order. Live traffic: a Kong
        # node's worker queues, each flushed at 100 entries or after 1 s of replay time.
        batches_h = jp.kong_batches(entries_h, workers=1, batch_size=batch_size, coalesce_ms=10**12)
        batches_l = jp.kong_batches(entries_l, workers=workers, batch_size=batch_size)
        return cls(entries_h, entries_l, batches_h, batches_l)

    @property
    def entries(self) -> list[jp.Entry]:
        return self.history + self.live


@dataclass(frozen=True)
class ReplayClock:
    """Event time to wall time: the live span's start at ``origin_wall_s``, then ``speed``
    times faster than it happened."""

    origin_ms: int
    origin_wall_s: float
    speed: float

    def __call__(self, event_ms: int) -> float:
        return jp.replay_wall_s(
            event_ms, origin_ms=self.origin_ms, origin_wall_s=self.origin_wall_s, speed=self.speed
        )


@dataclass
class SendStats:
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    failed_batches: int = 0
    request_s: list[float] = field(default_factory=list)


async def send_batches(
    url: str,
    batches: list[jp.Batch],
    *,
    workers: int,
    token: str | Sequence[str],
    clock: Callable[[int], float] | None = None,
    attempts: int = 8,
) -> SendStats:
    """POST each batch as Kong's http-log plugin does: one batch at a time per worker,
    retried with backoff on a failed status or connection error. ``token``: one for all,
    or one per worker (worker ``w`` sends ``token[w % len(token)]``: each its own gateway).
    With ``clock`` (event time to wall time), a batch waits until it is due."""
    tokens = [token] if isinstance(token, str) else list(token)
    stats = SendStats()
    queues: list[list[jp.Batch]] = [[b for b in batches if b.worker == w] for w in range(workers)]

    async def worker(session: aiohttp.ClientSession, w: int, mine: list[jp.Batch]) -> None:
        # What the plugin sends with config.content_type and config.headers (the sample
        # configuration's Authorization: Bearer, from Kong's vault).
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {tokens[w % len(tokens)]}",
        }
        for batch in mine:
            if clock is not None:
                delay = clock(batch.send_at_ms) - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            body = batch.body()
            for attempt in range(attempts):
                started = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as r:
                        answer = await r.json() if r.status == 200 else None
                except (aiohttp.ClientError, TimeoutError):
                    answer = None
                stats.request_s.append(time.perf_counter() - started)
                if answer is not None:
                    stats.sent += len(batch.entries)
                    stats.accepted += int(answer["accepted"]) + int(answer["already_written"])
                    stats.rejected += int(answer["rejected"])
                    break
                await asyncio.sleep(min(0.2 * 2**attempt, 5))
            else:
                stats.failed_batches += 1

    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session, w, q) for w, q in enumerate(queues)))
    return stats
