"""Latency under load: a window's end to its incident's Slack parent, with live Kong traffic
at a given rate across many doc types, on the single-broker stack and the three-broker one.

    .venv/bin/python -m bench.latency                       # 100k events/s, 500 types, 1 broker
    .venv/bin/python -m bench.latency --brokers both --minutes 4 --drifting 40
    .venv/bin/python -m bench.latency --rate 2000 --doc-types 20 --minutes 2 --drifting 4

Per broker setup (1: the `stack up --flink` cluster, one TaskManager; 3: the fault
campaign's, three Kafka nodes with replication 3 and two TaskManagers), on free ports:

1. Topics of the run; a pinned baseline per doc type (``latency_load``: the threshold 0.10
   above the type's own mean drift, critical 0.18 above, as `baseline pin` writes it), so
   that quiet types stay quiet and the drifting ones open an incident, without a history;
2. the drift job submitted to the session cluster (``--parallelism``, 2 by default as in
   the job benches; the rest the job's defaults unless an option says otherwise), the
   ingest service (`ingest serve`, ``--ingest-workers``, fresh gateway credentials), the
   local Slack and Jira and the alerting service posting to them, each its own process as
   in the demo; each drifting type posts to a Slack channel of its own (``--channels``: fewer,
   round-robin; Slack takes one message a second per channel, and that pacing then shows);
3. ``--senders`` load processes (bench/latency_load.py) post Kong http-log batches of
   ``--batch`` entries over ``--concurrency`` connections each, paced to ``--rate`` entries/s
   in all, round-robin over ``--doc-types`` types, event time = the wall clock: a warm-up
   (``--warmup-s``, to the next minute), ``--minutes`` measured one-minute windows, then a
   tail that closes the last one (the watermark delay and 15 s). ``--drifting`` types jump
   0.25 at a minute boundary, staggered over the measured windows (each one's incident
   opens ``open_after`` windows later, inside them), for ``open_after`` + 1 windows;
4. the run waits for every drifting type's Slack parent (at most ``--cap-s`` after its
   window's end), reads the verdicts topic, the alerting service's store and what the local
   Slack received, and stops everything it started (on errors and Ctrl-C too).

Figures (quantiles count a miss as +inf, ``bench/quantiles.py``):

- window end -> Slack: per drifting type's incident, the end of the window that opened it
  (``opened_at_ms``: event time, which is the wall clock here) to the local Slack's receive
  time of its parent (the time of its ``chat.postMessage`` in ``/_local/requests``); a
  drifting type without a parent within ``--cap-s`` is a miss. Incidents of other types are
  counted apart (false incidents);
- where the time goes, per incident: window end -> the verdict's Kafka timestamp (the
  job's producer's CreateTime: the watermark delay, then the job), verdict -> consumed by
  the alerting service (the outbox entry's ``consumed_ms``: the verdicts topic and its
  poll), consumed -> Slack (deciding, committing, sending). The job's watermark settings
  (out-of-orderness delay, idle timeout) are printed beside them: the delay is a floor
  of window end -> verdict that configuration sets (``--watermark-delay-ms``);
- window end -> verdict over every (doc type, measured window), a window without a
  verdict a miss;
- ingest: entries accepted per minute (200 answers), the rate accepted over the measured
  minutes, request p50/p99, failed requests; the machine's load average; the commit, the
  date and the command line.

The last line per setup: ``N broker(s), R events/s offered (A accepted), T types: window end
-> Slack p50 X s, p99 Y s (K incidents, M missed); window end -> verdict p50 .., p99 ..``.
Exit status 1 when an incident was missed or a quiet type opened one.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import requests

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.baseline_publish import publish_baselines
from anchorwatch.contracts import BaselinePin, decode_verdict
from anchorwatch.demo import slice as flow
from anchorwatch.demo.journey_job import Submission, cancel, wait_running
from anchorwatch.demo.journey_processes import Services
from anchorwatch.demo.journey_services import (
    Destinations,
    new_ingest_credentials,
    start_alerting,
    start_ingest,
)
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from anchorwatch.policy.fitting import pinned_baseline
from bench.faults import campaign_stack
from bench.latency_load import (
    CRITICAL_MARGIN,
    MIN,
    WARN_MARGIN,
    Schedule,
    build_pools,
    doc_type_names,
    drifting_types,
    load_stats,
    plan,
    sender_specs,
    senders,
)
from bench.quantiles import MISS, misses, quantile

ROOT: Final = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class IncidentTimes:
    """What was observed of one incident (wall-clock seconds / ms; None: not seen)."""

    doc_type: str
    window_end_ms: int
    verdict_ms: int | None  # the verdict's Kafka timestamp
    consumed_ms: int | None  # when the alerting service consumed it
    slack_s: float | None  # when the local Slack received the parent


@dataclass(frozen=True)
class Split:
    total: float  # window end -> Slack (MISS when not within the cap)
    job: float  # window end -> verdict timestamp
    topic: float  # verdict timestamp -> consumed by alerting
    alerting: float  # consumed -> Slack


def split(t: IncidentTimes, cap_s: float) -> Split:
    """The incident's latency and its parts, seconds; a part not observed is a miss."""
    end = t.window_end_ms / 1000
    total = MISS if t.slack_s is None or t.slack_s - end > cap_s else t.slack_s - end
    verdict = None if t.verdict_ms is None else t.verdict_ms / 1000
    consumed = None if t.consumed_ms is None else t.consumed_ms / 1000
    return Split(
        total=total,
        job=MISS if verdict is None else verdict - end,
        topic=MISS if verdict is None or consumed is None else consumed - verdict,
        alerting=MISS if consumed is None or t.slack_s is None else t.slack_s - consumed,
    )


def window_latencies(
    verdict_ms: Mapping[tuple[str, int], int], names: Sequence[str], ends: Sequence[int]
) -> list[float]:
    """Window end -> verdict timestamp (s) of every (doc type, window end); none: a miss."""
    out = []
    for name in names:
        for end in ends:
            ts = verdict_ms.get((name, end))
            out.append(MISS if ts is None else (ts - end) / 1000)
    return out


def slack_receive_times(
    messages: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """Per message ts, when the local Slack received its ``chat.postMessage``: the n-th
    message it made from one is paired with the n-th successful call it recorded (both in
    the order it handled them). A message's ts carries whole seconds only: a pairing that
    contradicts them falls back to the middle of its second."""
    posted = [
        float(c["at"])
        for c in calls
        if c.get("method") == "chat.postMessage" and c.get("status") == 200 and not c.get("error")
    ]
    made = [m for m in messages if not m.get("subtype")]
    out = {}
    for i, m in enumerate(made):
        whole = int(str(m["ts"]).split(".")[0])
        at = posted[i] if i < len(posted) else None
        out[str(m["ts"])] = at if at is not None and whole <= at < whole + 1.5 else whole + 0.5
    return out


def seconds(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.2f} s"


def figures(values: Sequence[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"p50 {seconds(quantile(values, 0.5))}, p99 {seconds(quantile(values, 0.99))}, max "
        f"{seconds(max(values))} ({len(values)} samples, {misses(values)} missed)"
    )


def accepted_rate(accepted: Mapping[int, int], start_s: int, end_s: int) -> float:
    """Entries/s accepted by ingest in the whole minutes [start, end) (keys: minute starts)."""
    got = sum(n for m, n in accepted.items() if start_s <= m < end_s)
    return got / max(end_s - start_s, 1)


# --------------------------------------------------------------------------- one setup


class _Services(Services):
    """The demo's service processes, the ingest service with ``workers`` processes."""

    def __init__(self, run_dir: Path, workers: int) -> None:
        super().__init__(run_dir)
        self.workers = workers

    def start(self, name: str, argv: list[str], env: Mapping[str, str]) -> int:
        if name == "ingest":
            env = {**env, "ANCHORWATCH_INGEST__WORKERS": str(self.workers)}
        return super().start(name, argv, env)


@dataclass
class Outcome:
    brokers: int
    splits: list[Split] = field(default_factory=list)
    windows: list[float] = field(default_factory=list)
    false_incidents: list[str] = field(default_factory=list)
    accepted_per_s: float = 0.0
    lines: list[str] = field(default_factory=list)


def job_settings(bootstrap: str, topics: Any, a: argparse.Namespace, run_id: str) -> JobSettings:
    base = JobSettings.load(None, kafka={"bootstrap_servers": bootstrap})
    if a.summaries:
        topics = topics.model_copy(update={"summaries": "anchorwatch.summaries"})
    update: dict[str, Any] = {
        "parallelism": a.parallelism,
        "startup_mode": "earliest-offset",
        "group_id": f"anchorwatch-latency-{run_id}",
    }
    if a.watermark_delay_ms is not None:
        update["watermark_delay_ms"] = a.watermark_delay_ms
    if a.idle_timeout_s is not None:
        update["idle_timeout_s"] = a.idle_timeout_s
    return base.model_copy(
        update={
            "topics": flow.run_scoped_topics(topics, run_id),
            "job": base.job.model_copy(update=update),
        }
    )


def channels_of(names: Sequence[str], drifting: int, channels: int) -> dict[str, str]:
    """The drifting types' Slack channels (as ``plan`` picks them): round-robin over
    ``channels``, or one each for 0."""
    picked = [names[t] for t in drifting_types(len(names), drifting)]
    n = channels or len(picked) or 1
    return {doc: f"#latency-{k % n:03d}" for k, doc in enumerate(picked)}


def publish_pins(s: JobSettings, names: Sequence[str], seed: int) -> None:
    now = int(time.time() * 1000)
    pins = []
    for pool in build_pools(seed, names, pool=16):
        pin = BaselinePin(
            threshold=round(pool.normal_mean + WARN_MARGIN, 3),
            critical_threshold=round(pool.normal_mean + CRITICAL_MARGIN, 3),
            min_requests=5,
            author="bench",
            reason="bench/latency.py",
            pinned_at_ms=now,
        )
        pins.append(pinned_baseline(None, pool.name, pin, s.policy, now_ms=now))
    publish_baselines(s.kafka, s.topics.baselines, pins)


def verdict_times(s: JobSettings) -> dict[tuple[str, int], int]:
    """(doc type, window end) -> the earliest Kafka timestamp of its verdict."""
    out: dict[tuple[str, int], int] = {}
    for m in read_topic(s.kafka, s.topics.verdicts):
        if m.value is None:
            continue
        w = decode_verdict(m.value).window
        key, ts = (w.doc_type, w.window_end_ms), m.timestamp_ms
        out[key] = min(out.get(key, ts), ts)
    return out


def run_setup(brokers: int, a: argparse.Namespace, work: Path, echo: Any) -> Outcome:
    out = Outcome(brokers)
    names = doc_type_names(a.seed, a.doc_types)
    tms = a.taskmanagers or (2 if brokers == 3 else 1)
    with campaign_stack(None, brokers=brokers, taskmanagers=tms) as stack:
        run_id = flow.new_run_id()
        run_dir = work / f"{brokers}-broker-{run_id}"
        s = job_settings(stack.kafka.bootstrap, stack.topics, a, run_id)
        echo(f"{brokers} broker(s) at {stack.kafka.bootstrap}, {tms} TaskManager(s); run "
             f"{run_id}, logs in {run_dir}")  # fmt: skip
        flow.create_topics(s)
        services = _Services(run_dir, a.ingest_workers)
        job_id = None
        try:
            publish_pins(s, names, a.seed)
            submission = Submission(stack.flink.address, s)
            submission.start()
            tokens, creds = new_ingest_credentials(run_dir, a.senders)
            url = start_ingest(services, s, 0, creds)
            alerting_base = AlertingSettings.load(None, slack={"mode": "off"},
                                                  jira={"enabled": False})  # fmt: skip
            dest = Destinations(alerting_base)
            dest.start_local(services, slack_port=0, jira_port=0)
            job_id = submission.job_id()
            wait_running(stack.flink.address, job_id, 300)
            state = run_dir / "alerting"
            start_alerting(services, s, dest, port=0, state_dir=state,
                           group_id=f"anchorwatch-latency-{run_id}",
                           update_interval_s=120,
                           extra={"routing": {"doc_type_channels": channels_of(
                               names, a.drifting, a.channels)}})  # fmt: skip
            open_after = s.policy.rules[0].open_after
            sched = plan(int(time.time() * 1000) + 2000, warmup_s=a.warmup_s,
                         minutes=a.minutes, doc_types=a.doc_types, drifting=a.drifting,
                         open_after=open_after,
                         tail_ms=s.job.watermark_delay_ms + 15_000)  # fmt: skip
            specs = sender_specs(sched, url=url, tokens=tokens, rate=a.rate, batch=a.batch,
                                 concurrency=a.concurrency, names=names, seed=a.seed,
                                 run_id=run_id)  # fmt: skip
            echo(f"ingest {url} ({a.ingest_workers} workers), drift job {job_id} (parallelism "
                 f"{s.job.parallelism}), local Slack {dest.slack_url}; traffic until "
                 f"{_hms(sched.stop_ms)}, measured windows ending "
                 f"{_hms(sched.measure_start_ms + MIN)}-{_hms(sched.measure_end_ms)}"
                 " UTC")  # fmt: skip
            loads: list[float] = []
            with senders(specs, run_dir) as outs:
                _wait(sched.stop_ms / 1000 + 5, loads, echo)
            deadline = max(sched.opening_end_ms(i) for i in sched.onsets) / 1000 + a.cap_s
            _wait_parents(state, [names[i] for i in sched.onsets], deadline)
            stats = load_stats(outs)
            verdicts = verdict_times(s)
            slack_calls = _get(f"{dest.slack_url}/_local/requests")["requests"]
            slack_msgs = _get(f"{dest.slack_url}/_local/messages")["messages"]
            received = slack_receive_times(slack_msgs, slack_calls)
            times, out.false_incidents = incident_times(
                state, [names[i] for i in sorted(sched.onsets)], verdicts, received
            )
            out.splits = [split(t, a.cap_s) for t in times]
            out.windows = window_latencies(verdicts, names, sched.measured_ends())
            out.lines += report(a, s, sched, stats, out, loads, run_dir)
            out.accepted_per_s = accepted_rate(
                stats["accepted"], sched.measure_start_ms // 1000, sched.measure_end_ms // 1000
            )
        finally:
            if job_id is not None:
                cancel(stack.flink.address, job_id)
            services.stop()
            with contextlib.suppress(Exception):
                flow.delete_topics(s)
    return out


def incident_times(
    state: Path,
    expected: Sequence[str],
    verdicts: Mapping[tuple[str, int], int],
    received: Mapping[str, float],
) -> tuple[list[IncidentTimes], list[str]]:
    """Per drifting type, its first incident's times (no incident: nothing seen, a miss);
    and the incidents no drift caused (a quiet type's, a drifting type's second)."""
    store = Store(state, create=False)
    try:
        listed = store.list_incidents(open_only=False, limit=100_000)
        with store.reading():
            rows = {i.row.incident_id: store.outbox_rows(i.row.incident_id) for i in listed}
    finally:
        store.close()
    first: dict[str, Any] = {}
    for i in sorted(listed, key=lambda i: i.row.opened_at_ms):
        first.setdefault(i.row.doc_type, i)
    out = []
    for doc_type in expected:
        inc = first.get(doc_type)
        if inc is None:
            out.append(IncidentTimes(doc_type, 0, None, None, None))
            continue
        end = inc.row.opened_at_ms
        opened = [r for r in rows[inc.row.incident_id]
                  if r["integration"] == "slack" and r["kind"] == "opened"]  # fmt: skip
        ts = inc.refs.slack_ts
        out.append(IncidentTimes(doc_type, end, verdicts.get((doc_type, end)),
                                 opened[0]["consumed_ms"] if opened else None,
                                 received.get(ts) if ts else None))  # fmt: skip
    false = sorted(i.row.doc_type for i in listed if i.row.doc_type not in expected)
    false += [f"{d} (a second incident)" for d in expected
              if sum(i.row.doc_type == d for i in listed) > 1]  # fmt: skip
    return out, false


def _get(url: str) -> Any:
    r = requests.get(url, timeout=30)
    r.raise_for_status()
    return r.json()


def _hms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def _wait(until_s: float, loads: list[float], echo: Any) -> None:
    """Sleep until ``until_s`` (wall clock), noting the 1-minute load average each minute."""
    while (left := until_s - time.time()) > 0:
        time.sleep(min(left, 60.0))
        loads.append(os.getloadavg()[0])
        echo(f"  {_hms(int(time.time() * 1000))} load average {loads[-1]:.1f}")


def _wait_parents(state: Path, doc_types: Sequence[str], deadline_s: float) -> None:
    """Until every one of ``doc_types`` has an incident with a Slack parent, or the cap."""
    want = set(doc_types)
    while time.time() < deadline_s:
        with contextlib.suppress(Exception):
            store = Store(state, create=False)
            try:
                listed = store.list_incidents(open_only=False, limit=100_000)
            finally:
                store.close()
            if want <= {i.row.doc_type for i in listed if i.refs.slack_ts}:
                return
        time.sleep(1.0)


def report(
    a: argparse.Namespace,
    s: JobSettings,
    sched: Schedule,
    stats: Mapping[str, Any],
    out: Outcome,
    loads: Sequence[float],
    run_dir: Path,
) -> list[str]:
    """The setup's figures, one line each (the summary line comes apart)."""
    lo, hi = sched.measure_start_ms / 1000, sched.measure_end_ms / 1000
    lines = [f"ingest, entries per minute (offered {a.rate * 60:,.0f}):"]
    for m in sorted(stats["offered"]):
        if m + 60 > sched.start_ms / 1000:
            tag = "measured" if lo <= m < hi else "warm-up" if m < lo else "tail"
            lines.append(
                f"  {_hms(m * 1000)} {tag:>8}: sent {stats['sent'].get(m, 0):,}, accepted "
                f"{stats['accepted'].get(m, 0):,} ({stats['accepted'].get(m, 0) / 60:,.0f}/s), "
                f"rejected {stats['rejected'].get(m, 0):,}, failed {stats['failed'].get(m, 0):,}"
            )
    measured = [r for r in stats["requests"] if lo <= r[0] < hi]
    ok = [r[1] for r in measured if r[2] == 200]
    rate = accepted_rate(stats["accepted"], int(lo), int(hi))
    lines.append(
        f"ingest over the measured minutes: {rate:,.0f} events/s accepted of {a.rate:,.0f} "
        f"offered; requests p50 {quantile(ok, 0.5) * 1000:.0f} ms, p99 "
        f"{quantile(ok, 0.99) * 1000:.0f} ms ({len(ok):,} answered 200, "
        f"{len(measured) - len(ok):,} not)"
        if ok
        else "ingest over the measured minutes: no request answered 200"
    )
    j = s.job
    sp = out.splits
    lines += [
        f"job watermark: out-of-orderness delay {j.watermark_delay_ms / 1000:g} s (a floor of "
        f"window end -> verdict set by configuration), idle timeout {j.idle_timeout_s} s (every "
        f"partition is fed here: it does not apply), window {j.window_size_s} s",
        f"window end -> Slack parent: {figures([x.total for x in sp])}",
        f"  window end -> verdict timestamp (watermark delay + job): "
        f"{figures([x.job for x in sp])}",
        f"  of which after the watermark delay: "
        f"{figures([x.job - j.watermark_delay_ms / 1000 for x in sp])}",
        f"  verdict -> consumed by alerting (verdicts topic): {figures([x.topic for x in sp])}",
        f"  consumed -> Slack received (alerting): {figures([x.alerting for x in sp])}",
        f"window end -> verdict, every (doc type, measured window): {figures(out.windows)}",
        f"false incidents: {len(out.false_incidents)} {out.false_incidents[:10]}",
        f"load average per minute: {', '.join(f'{x:.1f}' for x in loads)}; run files in {run_dir}",
    ]
    return lines


def summary_line(a: argparse.Namespace, o: Outcome) -> str:
    totals = [x.total for x in o.splits]
    return (
        f"{o.brokers} broker{'s' if o.brokers > 1 else ''}, {a.rate:,.0f} events/s offered "
        f"({o.accepted_per_s:,.0f} accepted), {a.doc_types} types: window end -> Slack p50 "
        f"{seconds(quantile(totals, 0.5))}, p99 {seconds(quantile(totals, 0.99))} "
        f"({len(totals) - misses(totals)} incidents, {misses(totals)} missed); window end -> "
        f"verdict p50 {seconds(quantile(o.windows, 0.5))}, p99 "
        f"{seconds(quantile(o.windows, 0.99))}"
    )


def _commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "-uno") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def _terminate(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM: stop what was started, as on Ctrl-C


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=100_000, help="Kong entries/s offered")
    p.add_argument("--doc-types", type=int, default=500)
    p.add_argument("--minutes", type=int, default=4, help="measured one-minute windows")
    p.add_argument("--brokers", choices=("1", "3", "both"), default="1")
    p.add_argument("--drifting", type=int, default=40, help="doc types that open an incident")
    p.add_argument(
        "--channels", type=int, default=0,
        help="Slack channels the drifting types are routed to, round-robin (Slack takes one "
        "message a second per channel: with fewer channels than incidents of one window, "
        "that pacing is in the figures); 0: one channel each",
    )  # fmt: skip
    p.add_argument("--ingest-workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=100, help="Kong entries per request")
    p.add_argument("--concurrency", type=int, default=16, help="connections per sender")
    p.add_argument("--senders", type=int, default=1, help="load processes")
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--cap-s", type=float, default=90.0, help="a Slack parent later is a miss")
    p.add_argument("--parallelism", type=int, default=2, help="the drift job's")
    p.add_argument("--taskmanagers", type=int, default=0, help="0: 1 (1 broker), 2 (3)")
    p.add_argument("--watermark-delay-ms", type=int, default=None, help="default: the job's")
    p.add_argument("--idle-timeout-s", type=int, default=None, help="default: the job's")
    p.add_argument("--summaries", action="store_true", help="the job reads the summaries")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--work-dir", type=Path, default=None, help="where runs keep their logs")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="anchorwatch-latency-"))
    command = " ".join(shlex.quote(x) for x in getattr(sys, "orig_argv", sys.argv))
    head = [
        f"command: {command}",
        f"commit {_commit()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the start",
    ]
    print("\n".join(head), flush=True)
    summaries = []
    bad = False
    for brokers in (1, 3) if a.brokers == "both" else (int(a.brokers),):
        t = time.monotonic()
        out = run_setup(brokers, a, work, lambda line: print(line, flush=True))
        print("\n".join(out.lines), flush=True)
        summaries.append(summary_line(a, out))
        print(f"{summaries[-1]} ({time.monotonic() - t:.0f} s)", flush=True)
        bad = bad or bool(misses([x.total for x in out.splits]) or out.false_incidents)
    if len(summaries) > 1:
        print("\n".join(summaries))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
