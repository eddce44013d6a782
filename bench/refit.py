"""The alerting service's refit history: what each window held costs (memory in the process,
bytes on disk), adding it, and the time to gather a type's windows and fit them (the
consumer thread's pause per refitted type), for the rows in memory and on disk side by side.

    .venv/bin/python bench/refit.py              # 5 types, a week of one-minute windows
    .venv/bin/python bench/refit.py --days 1 --types 20
    .venv/bin/python bench/refit.py --rows disk --types 1000 --fit-types 3   # disk at scale
    .venv/bin/python bench/refit.py --rows memory --types 3 --shape realistic  # fit as live

``--shape``: ``steady`` (the default) repeats one saw-tooth pattern, with no incidents and
no daily rhythm, so the fit replays the history twice and finds nothing; ``realistic``
gives each type noise at its request count, a daily wave and two 20-minute incidents, as
live histories hold them (the fit then replays it, fits it again without the incidents
and replays it once more: the time a refit of such a type takes).
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.contracts import WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.refit import MemoryRows, RefitHistory, RefitSchedule, WindowRows

T0 = 1_767_600_000_000
MINUTE = 60_000
#: Rows written between two flushes: the engine flushes once per consumed batch.
BATCH = 500


def run(kind: str, rows: WindowRows, args: argparse.Namespace, disk: StoredRows | None) -> None:
    n = int(args.days * 1440)
    history = RefitHistory(RefitSchedule(3_600_000, int(args.days * 86_400_000), 60), rows)
    # One window of every type per minute, as live traffic brings them.
    template = WindowAggregate(
        doc_type="x", window_start_ms=T0, window_end_ms=T0 + MINUTE, request_count=1,
        mean_drift=0.3,
    )  # fmt: skip
    process = psutil.Process()
    rss_before = process.memory_info().rss
    started = time.perf_counter()
    added = 0
    rngs = [random.Random(t) for t in range(args.types)]
    for i in range(n):
        for t in range(args.types):
            count, mean = 50 + i % 97, 0.3 + (i % 13) / 100
            if args.shape == "realistic":
                mean = realistic_mean(rngs[t], i, count)
            history.add(template.model_copy(update={
                "doc_type": f"type-{t:05d}", "window_start_ms": T0 + i * MINUTE,
                "window_end_ms": T0 + (i + 1) * MINUTE, "request_count": count,
                "mean_drift": mean,
            }))  # fmt: skip
            added += 1
            if added % BATCH == 0:
                history.flush()
        if args.types >= 100 and i % 1440 == 1439:
            print(f"  {kind}: day {(i + 1) // 1440} written", flush=True)
    history.flush()
    took = time.perf_counter() - started
    held = max(0, process.memory_info().rss - rss_before)
    total = n * args.types
    line = (
        f"{kind:6} {total:,} windows ({args.types} types x {n}): add {took / total * 1e6:.1f} µs"
        f" per window; process RSS +{held / total:.0f} B per window"
        f" ({held / args.types / 1e6:.2f} MB per type)"
    )
    if disk is not None:
        size = disk.size_bytes()
        line += f"; on disk {size / total:.0f} B per window, {size / 2**20:,.0f} MiB in all"
    print(line, flush=True)
    policy = PolicyConfig()
    gather = fit = 0.0
    due = history.due(T0 + n * MINUTE, lambda _t: None, limit=args.fit_types)
    for item in due:
        started = time.perf_counter()
        ws = history.usable(item.doc_type)
        gathered = time.perf_counter()
        fit_baseline(
            item.doc_type,
            ws,
            policy,
            fitted_at_ms=T0 + n * MINUTE,
            history_start_ms=item.history_start_ms,
            history_end_ms=item.history_end_ms,
        )
        gather += gathered - started
        fit += time.perf_counter() - gathered
    print(
        f"{kind:6} per type ({len(due)} fitted): gather {gather / len(due) * 1000:.0f} ms, "
        f"fit {fit / len(due) * 1000:.0f} ms",
        flush=True,
    )


#: The minutes of the day at which a realistic history's incidents (20 minutes, +0.25)
#: start, on its second and fifth day.
INCIDENTS = (1440 + 600, 4 * 1440 + 900)


def realistic_mean(rng: random.Random, i: int, count: int) -> float:
    """Minute ``i``'s mean drift over ``count`` requests: a daily wave around 0.3, the
    requests' noise (sd 0.06 each), and the incidents."""
    level = 0.3 + 0.05 * math.sin(2 * math.pi * (i % 1440) / 1440)
    if any(start <= i < start + 20 for start in INCIDENTS):
        level += 0.25
    return min(1.0, max(0.0, rng.gauss(level, 0.06 / math.sqrt(count))))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--types", type=int, default=5)
    parser.add_argument("--fit-types", type=int, default=5, help="types gathered and fitted")
    parser.add_argument("--rows", choices=("memory", "disk", "both"), default="both")
    parser.add_argument(
        "--shape", choices=("steady", "realistic"), default="steady", help="see the doc"
    )
    args = parser.parse_args()
    if args.rows == "both":
        # Each in a process of its own: memory one run freed would be reused by the next.
        for kind in ("memory", "disk"):
            argv = ["--days", str(args.days), "--types", str(args.types)]
            argv += ["--fit-types", str(args.fit_types), "--rows", kind, "--shape", args.shape]
            subprocess.run([sys.executable, __file__, *argv], check=True)
        return
    if args.rows == "memory":
        run("memory", MemoryRows(), args, None)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = StoredRows(Path(tmp))
            run("disk", rows, args, rows)
            rows.close()


if __name__ == "__main__":
    main()
