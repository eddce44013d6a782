"""The alerting service's CPU path without Kafka or HTTP: deciding verdicts (the engine,
its SQLite transaction per batch, no integrations but the drift events) and rendering Slack
messages. One JSON line per round; run it against two trees side by side with PYTHONPATH:

    .venv/bin/python bench/alerting_engine.py --types 300 --rounds 3
    (cd OLD && PYTHONPATH=$PWD /work/main/.venv/bin/python /work/main/bench/alerting_engine.py)

``--quiet-types N`` adds live traffic as the service sees it at N doc types: one verdict
per type per minute, none of them opening an incident, refits on (the windows written to
their SQLite file), the service's default gauge limit; the first minute untimed (the types
become known), then ``--minutes`` minutes in batches of 500 (``quiet_verdicts_per_s``);
``--gc-freeze`` freezes the heap before them, as the service does once started;
``--profile FILE`` runs that part alone under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path.cwd()))

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.integrations.slack.render import (
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.alerting.render import IncidentView
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import Reason, WindowAggregate, encode
from anchorwatch.policy.refit import RefitHistory, RefitSchedule
from tests.support.alerting import T0, lifecycle, verdict
from tests.support.alerting_harness import Harness, settings_for


def decide(types: int) -> float:
    """Verdicts decided per second: every type's full incident lifecycle, batches of 500."""
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(settings_for(Path(tmp), None, None), ManualClock(start=time.time()))
        for t in range(types):
            h.publish(lifecycle(f"type-{t}"))
        started = time.perf_counter()
        h.consume(batch_max=500)
        return types * 9 / (time.perf_counter() - started)


def quiet(
    types: int,
    minutes: int,
    partitions: int = 6,
    profile: cProfile.Profile | None = None,
    freeze: bool = False,
) -> float:
    """Verdicts decided per second in live traffic (see the module doc); ``profile``: on
    over the timed minutes; ``freeze``: what the process holds before them frozen out of the
    garbage collector's passes, as `anchorwatch alerting serve` does once started."""
    with tempfile.TemporaryDirectory() as tmp:
        s = settings_for(Path(tmp), None, None, refit=True)
        a = s.alerting
        store = Store(a.state_dir)
        schedule = RefitSchedule(
            a.refit_interval_s * 1000, a.refit_history_s * 1000, a.refit_min_windows
        )
        metrics = ServiceMetrics(CollectorRegistry(), doc_types_max=a.metrics_doc_types_max)
        engine = Engine(
            s,
            store,
            metrics,
            ["events"],
            refit=RefitHistory(schedule, StoredRows(store.location)),
        )
        names = [f"t{i:05d}" for i in range(types)]
        offsets = dict.fromkeys(range(partitions), 0)
        # Encoded beforehand (the drift job's work); the records are made per batch, as
        # the consumer makes them per poll.
        minutes_of_records = []
        for minute in range(minutes + 1):
            records = []
            for n, doc in enumerate(names):
                p = n % partitions
                records.append(
                    (p, offsets[p], encode(verdict(doc, minute, 0.4, job_version="bench")))
                )
                offsets[p] += 1
            minutes_of_records.append(records)
        if freeze:
            gc.collect()
            gc.freeze()
        elapsed = 0.0
        for minute, records in enumerate(minutes_of_records):
            if minute == 1 and profile is not None:
                profile.enable()
            started = time.perf_counter()
            for i in range(0, len(records), 500):
                stamp = int(time.time() * 1000)
                batch = [RawMessage("verdicts", p, o, v, stamp) for p, o, v in records[i : i + 500]]
                engine.process(batch, stamp)
            if minute > 0:
                elapsed += time.perf_counter() - started
        if profile is not None:
            profile.disable()
        engine.close()
        if freeze:
            gc.unfreeze()
        return types * minutes / elapsed


def render(messages: int) -> float:
    """Microseconds per Slack message (parent, update and resolution in turn)."""
    window = WindowAggregate(
        doc_type="invoice <!channel>",
        window_start_ms=T0,
        window_end_ms=T0 + 60_000,
        request_count=50,
        mean_drift=0.9,
    )
    view = IncidentView(
        incident_id="0123456789abcdef",
        doc_type="invoice <!channel>",
        severity="critical",
        state="open",
        opened_at_ms=T0,
        resolved_at_ms=None,
        window=window,
        threshold=0.85,
        baseline_version="b1",
        reasons=[Reason(code="above_threshold", message="mean drift above the threshold")] * 3,
        peak_mean_drift=0.95,
        dashboard_url="https://grafana.example/d/x",
    )
    started = time.perf_counter()
    for _ in range(messages // 3):
        slack_parent(view)
        slack_update(view)
        slack_resolved(view)
    return (time.perf_counter() - started) / (messages // 3 * 3) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", type=int, default=300, help="doc types, 9 verdicts each")
    parser.add_argument("--messages", type=int, default=9000, help="Slack messages rendered")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, one line each")
    parser.add_argument("--quiet-types", type=int, default=0, help="live traffic (module doc)")
    parser.add_argument("--minutes", type=int, default=3, help="timed minutes of it")
    parser.add_argument("--profile", help="cProfile the live traffic alone into this file")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="freeze the heap before the live traffic"
    )
    args = parser.parse_args()
    if args.profile:
        profile = cProfile.Profile()
        rate = quiet(args.quiet_types or 3000, args.minutes, profile=profile, freeze=args.gc_freeze)
        profile.dump_stats(args.profile)
        print(json.dumps({"quiet_verdicts_per_s": round(rate)}), flush=True)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)
        return
    for _ in range(args.rounds):
        figures: dict[str, float] = {
            "verdicts_per_s": round(decide(args.types)),
            "slack_render_us": round(render(args.messages), 1),
        }
        if args.quiet_types > 0:
            rate = quiet(args.quiet_types, args.minutes, freeze=args.gc_freeze)
            figures["quiet_verdicts_per_s"] = round(rate)
        print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
