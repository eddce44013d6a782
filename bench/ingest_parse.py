"""The ingest fast path alone: Kong bodies read, checked and encoded, per entry, by the
compiled reader (connectors/native) and, side by side in the same process, by the reference
path it stands in for (orjson + the pydantic contract). No HTTP, no Kafka.

Measured: microseconds per Kong entry for each path, the median of --repeat timed passes
over the same bodies, the two paths alternating pass by pass. Before them, --warmup
untimed passes of each path (default 1) over the same bodies, so that no timed pass pays
for first-use costs (imports, caches, allocator growth) the later ones do not.

    .venv/bin/python bench/ingest_parse.py --events 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson

from anchorwatch.connectors.records import kong_body
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Microseconds per Kong entry read, checked and encoded: the compiled "
        "reader and the reference path (orjson + pydantic), alternating over the same "
        "bodies, after untimed warm-up passes of each (medians of the timed passes)."
    )
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100, help="Kong entries per body")
    parser.add_argument("--repeat", type=int, default=5, help="alternating timed passes")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed passes of each path before the timed ones"
    )
    args = parser.parse_args()
    traffic = generate(TrafficConfig(seed=1, minutes=60, doc_types=12, rate_scale=4))
    events = [r.event for r in traffic.records() if r.event is not None][: args.events]
    bodies = [
        orjson.dumps([to_kong_entry(e) for e in events[i : i + args.batch]])
        for i in range(0, len(events), args.batch)
    ]
    size = sum(map(len, bodies)) / len(events)
    anchors = sum(len(e.anchors) for e in events) / len(events)
    print(f"{len(events)} entries of {size:,.0f} bytes, {anchors:.1f} anchors each")
    for _ in range(args.warmup):  # untimed: first use (caches, allocator) off the clock
        for fast in (True, False):
            accepted = sum(len(kong_body(b, source="kong", fast=fast).accepted) for b in bodies)
            assert accepted == len(events)
    timings: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.repeat):
        for fast in (True, False):
            started = time.perf_counter()
            accepted = sum(len(kong_body(b, source="kong", fast=fast).accepted) for b in bodies)
            timings[fast].append((time.perf_counter() - started) / len(events) * 1e6)
            assert accepted == len(events)
    compiled, reference = (statistics.median(timings[f]) for f in (True, False))
    print(
        f"compiled reader: {compiled:.1f} us per entry; reference path (orjson + pydantic): "
        f"{reference:.1f} us; {reference / compiled:.1f}x (medians of {args.repeat} timed "
        f"passes after {args.warmup} untimed)"
    )


if __name__ == "__main__":
    main()
