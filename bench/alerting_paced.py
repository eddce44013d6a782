"""The alerting service at many doc types in live time, refits on: one verdict per type per
minute, as the drift job writes them, for --minutes minutes.

    .venv/bin/python -m bench.alerting_paced --types 10000 --minutes 6
    .venv/bin/python -m bench.alerting_paced --types 10000 --minutes 6 --arrival spread

1. Starts a private Kafka, the local Slack and Jira, and `anchorwatch alerting serve` (as
   bench/alerting.py does) with refits on: `alerting.refit_min_windows` --history windows,
   `alerting.refit_interval_s` --refit-interval.
2. History: --history windows per type produced beforehand, ending at the current minute,
   and waited for until every one is decided: every type is then due for its first fit.
3. Live: each wall-clock minute, the verdicts of the minute just ended, one per type. With
   `--arrival burst` (the default) all of them at once, as the job writes them when the
   watermark passes the minute's end on every partition; `spread` evenly over the minute.
4. Prints, over the live minutes only: verdict -> decision (from the verdict's Kafka
   timestamp to the commit of the batch that decided it, the service's
   `anchorwatch_alerting_verdict_decision_seconds` histogram: a quantile is given as the
   bucket bound it falls under), peak RSS, refits published, and the refit backlog at the
   end (`anchorwatch_alerting_refit_behind_doc_types` / `_seconds`): whether the refit keeps
   up with --types types at --refit-interval.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

import requests
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.contracts import encode
from anchorwatch.demo.slice import private_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.stack.stack import private_kafka
from bench.alerting import TimedSlack, decided, service, state_bytes
from tests.support.alerting import SLACK_TOKEN, T0, verdict

MINUTE_S = 60
DECISION = "anchorwatch_alerting_verdict_decision_seconds"


def metrics(url: str) -> dict[str, float]:
    """The service's unlabelled samples and the decision histogram's buckets by bound."""
    out: dict[str, float] = {}
    text = requests.get(f"{url}/metrics", timeout=60).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{DECISION}_bucket":
                out[f"le {sample.labels['le']}"] = sample.value
            elif sample.name == "anchorwatch_alerting_baseline_refits_total":
                if sample.labels.get("outcome") == "published":
                    out["refits published"] = sample.value
            elif sample.name.startswith("anchorwatch_alerting_") and not sample.labels:
                out[sample.name] = sample.value
    return out


def bucket_quantile(before: dict[str, float], after: dict[str, float], q: float) -> float:
    """The upper bound of the histogram bucket holding the q quantile of the observations
    made between two scrapes (+inf past the last finite bound; NaN for none)."""
    counts = sorted(
        ((float(k[3:]), after[k] - before.get(k, 0.0)) for k in after if k.startswith("le ")),
    )
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return math.nan
    for bound, cumulative in counts:
        if cumulative >= q * total:
            return bound
    return math.inf


def produce(producer: Producer, topic: str, minute: int, names: list[str], spread_s: float) -> None:
    """One verdict per type for window ``minute`` (verdict()'s minutes from the tests' T0),
    all at once or evenly over ``spread_s`` seconds."""
    started = time.monotonic()
    for n, doc in enumerate(names):
        if spread_s > 0:
            lag = started + spread_s * n / len(names) - time.monotonic()
            if lag > 0:
                time.sleep(lag)
        value = encode(verdict(doc, minute, 0.4, job_version="bench"))
        while True:
            try:
                producer.produce(topic, value, doc.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush(60)


def status(minutes: int, before: dict[str, float], now: dict[str, float], peak: int) -> None:
    fits = now.get("refits published", 0) - before.get("refits published", 0)
    behind = now.get("anchorwatch_alerting_refit_behind_doc_types", 0)
    unfitted = now.get("anchorwatch_alerting_refit_unfitted_doc_types", 0)
    print(
        f"after {minutes} live minute(s): verdict -> decision p99 <= "
        f"{bucket_quantile(before, now, 0.99):g} s, peak RSS {peak / 2**20:.0f} MiB, refits "
        f"published {fits:.0f}, refit behind {behind:.0f} types, never fitted {unfitted:.0f}",
        flush=True,
    )


def run(job: JobSettings, root: Path, args: argparse.Namespace) -> None:
    names = [f"t{i:05d}" for i in range(args.types)]
    # verdict() counts minutes from the tests' T0: minute m of this run is T0's minute
    # offset to now, so that window ends are wall time.
    now_minute = int(time.time() // MINUTE_S)
    first = now_minute - (T0 // 1000) // MINUTE_S - args.history
    producer = Producer(
        client_config(job.kafka, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    )
    state = root / "paced"
    settings = {
        "refit": True,
        "refit_min_windows": args.history,
        "refit_interval_s": args.refit_interval,
    }
    with (
        TimedSlack(token=SLACK_TOKEN) as slack,
        LocalJira() as jira,
        service(job, state, slack, jira, "FULL", alerting=settings) as (proc, url),
    ):
        for m in range(args.history):
            produce(producer, job.topics.verdicts, first + m, names, 0)
        total = args.types * args.history
        started = time.monotonic()
        while decided(url) < total:
            time.sleep(1)
        print(
            f"history: {total:,} verdicts ({args.history} windows x {args.types:,} types) "
            f"decided in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        before = metrics(url)
        peak = proc.memory_info().rss
        for live in range(args.minutes):
            # The next wall-clock minute's start: the window that just ended is written then.
            time.sleep(max(0.0, MINUTE_S - time.time() % MINUTE_S))
            if live > 0:
                status(live, before, metrics(url), peak)
            spread = MINUTE_S * 0.9 if args.arrival == "spread" else 0.0
            produce(producer, job.topics.verdicts, first + args.history + live, names, spread)
            peak = max(peak, proc.memory_info().rss)
        live_total = total + args.types * args.minutes
        deadline = time.monotonic() + 120
        while decided(url) < live_total and time.monotonic() < deadline:
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.5)
        after = metrics(url)
        peak = max(peak, proc.memory_info().rss)
    count = after.get(f"{DECISION}_count", 0) - before.get(f"{DECISION}_count", 0)
    q = {p: bucket_quantile(before, after, p) for p in (0.5, 0.99)}
    fits = after.get("refits published", 0) - before.get("refits published", 0)
    behind = after.get("anchorwatch_alerting_refit_behind_doc_types", 0)
    behind_s = after.get("anchorwatch_alerting_refit_behind_seconds", 0)
    unfitted = after.get("anchorwatch_alerting_refit_unfitted_doc_types", 0)
    print(
        f"{args.types:,} types, {args.minutes} live minutes ({args.arrival}), refit interval "
        f"{args.refit_interval} s: verdict -> decision p50 <= {q[0.5]:g} s, p99 <= {q[0.99]:g} s "
        f"({count:,.0f} verdicts); peak RSS {peak / 2**20:.0f} MiB; state "
        f"{state_bytes(state) / 2**20:.1f} MiB; refits published during the live minutes "
        f"{fits:.0f}, behind at the end {behind:.0f} types (the longest {behind_s:.0f} s since "
        f"its last fit), never fitted {unfitted:.0f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--types", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=6, help="live minutes measured")
    parser.add_argument("--history", type=int, default=10, help="windows per type before")
    parser.add_argument("--refit-interval", type=int, default=3600, help="refit_interval_s")
    parser.add_argument("--arrival", choices=("burst", "spread"), default="burst")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    print(f"commit {head}; load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
    with private_kafka(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        with private_topics(base) as job:
            run(job, Path(tmp), args)


if __name__ == "__main__":
    main()
