"""The alerting service's refit history: memory per window held, and the time to gather a
type's windows and fit them (the consumer thread's pause per refitted type).

    .venv/bin/python bench/refit.py              # one type-week of one-minute windows
    .venv/bin/python bench/refit.py --days 1 --types 20
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from anchorwatch.contracts import WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.refit import RefitHistory, RefitSchedule

T0 = 1_767_600_000_000
MINUTE = 60_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--types", type=int, default=5)
    args = parser.parse_args()
    n = int(args.days * 1440)
    history = RefitHistory(RefitSchedule(3_600_000, int(args.days * 86_400_000), 60))
    windows = [
        WindowAggregate(
            doc_type=f"type-{t}",
            window_start_ms=T0 + i * MINUTE,
            window_end_ms=T0 + (i + 1) * MINUTE,
            request_count=50 + i % 97,
            mean_drift=0.3 + (i % 13) / 100,
        )
        for t in range(args.types)
        for i in range(n)
    ]
    tracemalloc.start()
    for w in windows:
        history.add(w)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"windows held: {len(windows)} ({args.types} types x {n})")
    print(
        f"memory: {held / len(windows):.0f} bytes per window, "
        f"{held / args.types / 1e6:.2f} MB per type"
    )
    policy = PolicyConfig()
    gather = fit = 0.0
    for item in history.due(T0 + n * MINUTE, lambda _t: None):
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
        f"per type: gather {gather / args.types * 1000:.0f} ms, "
        f"fit {fit / args.types * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
