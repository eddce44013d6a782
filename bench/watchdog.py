"""Watchdog: how long after the drift job stops does the blind notice reach Slack, with the
``[watchdog]`` defaults and the drift job's (one-minute windows, a 10 s watermark delay,
checkpoints every 30 s).

Starts a private Kafka on free ports (or uses --bootstrap), the local Slack in this process
and the alerting service in this process with its default watchdog; the stand-in for ingest
and the job (tests/support/watchdog_feed.py) writes --rate snapshots/s over --types doc
types to the job's input topic and, while the job is alive, a verdict per type and window
at each checkpoint and the job group's commits. After --healthy-s seconds of a healthy job
(the watchdog's warm-up is inside it) the job is killed at a random point of its checkpoint
cycle; the figure is the time from the kill to the notice's parent message in the local
Slack, and the same from the job's last checkpoint (the verdicts it last made visible).
Each round then revives the job and waits for the resolution before the next.

    .venv/bin/python -m bench.watchdog                 # 3 rounds, about 6 min each
    .venv/bin/python -m bench.watchdog --rounds 1 --types 200 --rate 2000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.service import AlertingService
from anchorwatch.demo.slice import private_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.stack import private_kafka
from tests.support.alerting import SLACK_TOKEN, slack_threads
from tests.support.alerting_kafka import load_settings, service_config
from tests.support.waiting import wait_until
from tests.support.watchdog_feed import FeedAndJob

BOUND_S = 180.0  # the notice must come within 3 minutes of the job's death


def _notices(slack: LocalSlack) -> list[dict[str, Any]]:
    return [
        m
        for m in slack.messages
        if not m.get("thread_ts") and m.get("subtype") is None and "cannot see" in m["text"]
    ]


def one_round(job: JobSettings, root: Path, args: argparse.Namespace, n: int) -> float:
    types = [f"doc_type_{i:03d}" for i in range(args.types)]
    group = f"anchorwatch-drift-bench-{n}"
    with LocalSlack(token=SLACK_TOKEN) as slack:
        config = service_config(job, root / f"state-{n}", slack, None)
        config["watchdog"] = {"job_group_id": group}
        feed = FeedAndJob(job, types, group_id=group, snapshots_per_s=args.rate).start()
        service = AlertingService(load_settings(config)).start()
        try:
            wait_until(lambda: service.readiness()[0], 60, "the service to be ready")
            time.sleep(args.healthy_s + random.uniform(0, 30))
            assert not _notices(slack), "a notice while the job was healthy"
            feed.kill()
            killed = time.monotonic()
            wait_until(lambda: bool(_notices(slack)), BOUND_S + 120, "the notice", interval_s=0.2)
            took = time.monotonic() - killed
            since_checkpoint = took + feed.since_last_checkpoint_s
            print(
                f"round {n}: notice {took:.1f} s after the kill, {since_checkpoint:.1f} s "
                f"after the job's last checkpoint ({len(types)} types, {args.rate:g} snapshots/s)"
            )
            feed.revive()
            ts = _notices(slack)[0]["ts"]
            wait_until(
                lambda: any(
                    r["text"].startswith("Resolved")
                    for r in slack_threads(slack.messages).get(ts, [])
                ),
                BOUND_S + 120,
                "the resolution",
            )
            print(f"round {n}: resolved {time.monotonic() - killed - took:.1f} s after revival")
            return took
        finally:
            service.stop()
            feed.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a running Kafka (default: a private one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--types", type=int, default=20, help="doc types arriving")
    parser.add_argument("--rate", type=float, default=200.0, help="snapshots/s")
    parser.add_argument(
        "--healthy-s", type=float, default=200.0, help="a healthy job for this long first"
    )
    args = parser.parse_args()
    figures = []
    with private_kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        for n in range(1, args.rounds + 1):
            with private_topics(base) as job:
                figures.append(one_round(job, Path(tmp), args, n))
    worst = max(figures)
    print(
        f"kill -> notice: min {min(figures):.1f} s, max {worst:.1f} s over {len(figures)} "
        f"round(s); bound {BOUND_S:.0f} s: {'met' if worst < BOUND_S else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
