"""Alerting service: notification latency (verdict produced, and consumed, -> local Slack
received) and verdict throughput, for each SQLite sync mode side by side in one run.

Starts a private Kafka on free ports (or uses --bootstrap) and the local Slack and Jira in
this process, and runs `anchorwatch alerting serve` as its own process per configuration:

1. latency: --incidents doc types each open one incident (a critical window opens at
   once), one every --spacing seconds: above Slack's per-channel rate, so nothing waits
   behind the rate limit. For each, from producing the verdict, and from the service
   consuming it (its outbox row), to the local Slack receiving the parent message (the
   server's clock; same machine). Jira and drift events are on too.
2. throughput: --types doc types x --windows windows produced beforehand (2% of the types
   drift: incidents, notifications), then verdicts/s from the service being ready to the
   last one decided and committed; peak RSS of the service.

    .venv/bin/python bench/alerting.py --incidents 40 --types 1000 --windows 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import requests
from confluent_kafka import Producer

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import Verdict, WindowAggregate, encode
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.policy.window import judge_window, verdict_for
from anchorwatch.slice import private_topics
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import private_kafka

T0 = 1_767_621_600_000
MINUTE = 60_000
TOKEN = "xoxb-bench"  # noqa: S105 - the local Slack takes any token


def verdict(doc_type: str, minute: int, mean: float, requests: int = 50) -> Verdict:
    start = T0 + minute * MINUTE
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=requests,
        mean_drift=mean,
    )
    return verdict_for(window, judge_window(window, None), "bench")


class TimedSlack(LocalSlack):
    """The local Slack, noting when each message arrived (by its ts)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: dict[str, float] = {}

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        result = super()._post_message(params)
        if result.get("ok"):
            self.received[str(result["ts"])] = time.time()
        return result


broker = private_kafka


@contextmanager
def service(
    job: JobSettings, state: Path, slack: LocalSlack, jira: LocalJira, sync: str
) -> Iterator[tuple[psutil.Process, str]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANCHORWATCH_")}
    env.update(
        {
            "ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS": job.kafka.bootstrap_servers,
            **{f"ANCHORWATCH_TOPICS__{k.upper()}": str(v) for k, v in job.topics},
            "ANCHORWATCH_ALERTING__STATE_DIR": str(state),
            "ANCHORWATCH_ALERTING__START_OFFSET": "earliest",
            "ANCHORWATCH_ALERTING__METRICS_PORT": str(port),
            "ANCHORWATCH_ALERTING__SQLITE_SYNCHRONOUS": sync,
            "ANCHORWATCH_SLACK__MODE": "bot",
            "ANCHORWATCH_SLACK__API_URL": slack.api_url,
            "ANCHORWATCH_SLACK__BOT_TOKEN": TOKEN,
            "ANCHORWATCH_JIRA__ENABLED": "true",
            "ANCHORWATCH_JIRA__URL": jira.url,
            "ANCHORWATCH_LOG_LEVEL": "WARNING",
            # One critical window opens an incident (the default policy waits for two): the
            # latency timed is the service's, from the verdict that opens it.
            "ANCHORWATCH_POLICY__RULES": json.dumps([{"name": "drift", "open_after_critical": 1}]),
        }
    )
    url = f"http://127.0.0.1:{port}"
    log = (state.parent / f"service-{state.name}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "anchorwatch", "alerting", "serve"], env=env, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit(f"the service did not get ready; see {log.name}")
            time.sleep(0.05)
        yield psutil.Process(process.pid), url
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def decided(url: str) -> float:
    total = 0.0
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("anchorwatch_alerting_verdicts_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return (
        f"p50 {q(0.5) * 1000:6.1f} ms  p99 {q(0.99) * 1000:6.1f} ms  "
        f"max {ordered[-1] * 1000:6.1f} ms"
    )


def latency(job: JobSettings, root: Path, sync: str, incidents: int, spacing: float) -> None:
    with TimedSlack(token=TOKEN) as slack, LocalJira() as jira:
        state = root / f"latency-{sync}"
        producer = Producer(client_config(job.kafka, **{"enable.idempotence": True, "acks": "all"}))
        with service(job, state, slack, jira, sync):
            produced: dict[str, float] = {}
            for i in range(incidents):
                doc = f"{sync.lower()}-latency-{i:03d}"
                produced[doc] = time.time()
                producer.produce(job.topics.verdicts, encode(verdict(doc, 0, 0.95)), doc.encode())
                producer.flush(10)
                time.sleep(spacing)
            deadline = time.monotonic() + 60
            while len(slack.received) < incidents and time.monotonic() < deadline:
                time.sleep(0.05)
        store = Store(state, create=False)
        consumed = {
            r["incident_id"]: r["consumed_ms"] / 1000
            for r in store.outbox_rows()
            if r["integration"] == "slack" and r["action"] == "open"
        }
        doc_of = {
            i.row.incident_id: (i.row.doc_type, i.refs.slack_ts)
            for i in store.list_incidents(open_only=False, limit=100_000)
        }
        store.close()
    from_produced, from_consumed = [], []
    for incident_id, (doc, ts) in doc_of.items():
        if ts is None or ts not in slack.received:
            continue
        arrived = slack.received[ts]
        from_produced.append(arrived - produced[doc])
        from_consumed.append(arrived - consumed[incident_id])
    print(f"  latency, {sync:6} {len(from_produced)} incidents:")
    print(f"    verdict produced -> Slack received   {quantiles(from_produced)}")
    print(f"    verdict consumed -> Slack received   {quantiles(from_consumed)}")


def throughput(job: JobSettings, root: Path, sync: str, types: int, windows: int) -> None:
    drifting = {f"t{i:05d}" for i in range(0, types, 50)}
    names = [f"t{i:05d}" for i in range(types)]
    records = [
        (doc.encode(), encode(verdict(doc, m, 0.95 if doc in drifting and 3 <= m < 8 else 0.4)))
        for m in range(windows)
        for doc in names
    ]
    producer = Producer(
        client_config(job.kafka, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20})
    )
    state = root / f"throughput-{sync}"
    with (
        TimedSlack(token=TOKEN) as slack,
        LocalJira() as jira,
        service(job, state, slack, jira, sync) as (proc, url),
    ):
        # From the first verdict produced to the last one decided and committed.
        started = time.monotonic()
        for key, value in records:
            while True:
                try:
                    producer.produce(job.topics.verdicts, value, key)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(60) == 0
        peak = proc.memory_info().rss
        while decided(url) < len(records):
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.05)
        took = time.monotonic() - started
        peak = max(peak, proc.memory_info().rss)
    n = len(records)
    print(
        f"  throughput, {sync:6} {n:,} verdicts of {types:,} types in {took:5.2f} s: "
        f"{n / took:8,.0f} verdicts/s, peak RSS {peak / 2**20:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--incidents", type=int, default=40, help="incidents timed (latency)")
    parser.add_argument("--spacing", type=float, default=1.2, help="seconds between incidents")
    parser.add_argument("--types", type=int, default=1000, help="doc types (throughput)")
    parser.add_argument("--windows", type=int, default=20, help="windows per type (throughput)")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args()
    print("load average (1, 5, 15 min) at the start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = JobSettings.load(kafka={"bootstrap_servers": bootstrap})
        for sync in ("FULL", "NORMAL"):
            # Each measurement on topics of its own: nothing earlier to skip.
            with private_topics(base) as job:
                latency(job, root, sync, args.incidents, args.spacing)
            with private_topics(base) as job:
                throughput(job, root, sync, args.types, args.windows)


if __name__ == "__main__":
    main()
