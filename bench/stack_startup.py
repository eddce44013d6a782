"""How long the local stack takes to become ready: Kafka alone and Kafka + Flink.

Each round starts a fresh stack on free ports in a new state directory (so the first
Kafka start includes formatting its storage), measures `up` until every component answers,
then restarts Kafka on the formatted storage, and stops everything.

    .venv/bin/python -m bench.stack_startup --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from anchorwatch.stack.jvm import fetch
from anchorwatch.stack.stack import StackSettings
from tests.support.stack import stack_on_free_ports


def one_round(root: Path) -> dict[str, float]:
    stack = stack_on_free_ports(root, flink=True)
    figures = {}
    try:
        t = time.perf_counter()
        stack.up(with_flink=False)
        figures["kafka_first_start_s"] = time.perf_counter() - t
        stack.kafka.stop()
        t = time.perf_counter()
        stack.up(with_flink=False)
        figures["kafka_restart_s"] = time.perf_counter() - t
        t = time.perf_counter()
        stack.up(with_flink=True)
        figures["flink_start_s"] = time.perf_counter() - t
        t = time.perf_counter()
    finally:
        stack.down()
    figures["down_s"] = time.perf_counter() - t
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = StackSettings.load()
    fetch(settings.jvm.cache_dir)  # warm cache: not part of the figures
    rounds = []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="aw-bench-") as tmp:
            rounds.append(one_round(Path(tmp)))
        print(f"round {i + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in rounds[-1].items()))
    print(f"median of {args.rounds} rounds:")
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(
            f"  {key:<22} {statistics.median(values):6.2f} s  (min {min(values):.2f}, "
            f"max {max(values):.2f})"
        )


if __name__ == "__main__":
    main()
