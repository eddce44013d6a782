"""How long the local stack takes to start from nothing (Kafka, then Flink, each timed, and
the total), to stop, and to restart Kafka on its formatted storage.

Each round, in a new state directory on free ports, with nothing of the stack running:

1. `kafka_first_start_s`: Kafka from nothing until it answers on every node with the
   topics created and served (this includes formatting its storage);
2. `flink_start_s`: then the Flink session cluster from nothing (JobManager up,
   TaskManagers registered, slots free), Kafka already up from step 1;
3. `kafka_flink_total_s`: steps 1 and 2 together, the whole stack from nothing, as
   `stack up` starts it (Kafka, then Flink, one after the other);
4. `down_s`: `stack down` of both (Flink's graceful stop, Kafka's controlled shutdown);
5. `kafka_restart_s`: Kafka alone started again on the storage step 1 formatted (Flink
   not started), then stopped, untimed.

The pinned jars are fetched once before the first round (not timed).

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
    """One round's figures (see the module's docstring), in seconds."""
    stack = stack_on_free_ports(root, flink=True)
    figures: dict[str, float] = {}
    try:
        started = time.perf_counter()
        stack.up(with_flink=False)
        kafka_up = time.perf_counter()
        # Kafka runs now; this starts only Flink (its check of Kafka's topics takes ms).
        stack.up(with_flink=True)
        flink_up = time.perf_counter()
        figures["kafka_first_start_s"] = kafka_up - started
        figures["flink_start_s"] = flink_up - kafka_up
        figures["kafka_flink_total_s"] = flink_up - started
        t = time.perf_counter()
        stack.down()
        figures["down_s"] = time.perf_counter() - t
        t = time.perf_counter()
        stack.up(with_flink=False)
        figures["kafka_restart_s"] = time.perf_counter() - t
    finally:
        stack.down()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0].replace("\n", " "),
        epilog="Each round: Kafka started from nothing (kafka_first_start_s), then Flink "
        "from nothing (flink_start_s), the two together (kafka_flink_total_s), `stack down` "
        "(down_s), and Kafka restarted alone on its formatted storage (kafka_restart_s).",
    )
    parser.add_argument("--rounds", type=int, default=3, help="fresh stacks, one after another")
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
