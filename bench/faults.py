"""The fault campaign: the whole pipeline under one injected fault per trial, counted.

    .venv/bin/python bench/faults.py --trials 10 [--seed 17] [--only broker-kill,...]

Each trial is the demo's journey (anchorwatch/demo/journey.py) on a cluster of three Kafka nodes
(replication 3, min.insync 2) and two TaskManagers: three hours of history, then live Kong
batches over HTTP (retried as Kong does) through the ingest service (two worker processes),
the drift job on the session cluster and the alerting service posting to the local Slack
and Jira. At a random moment of the live span one fault from ``bench.fault_plan.FAULTS``
strikes; the ingest and alerting services are restarted when they die, as a supervisor
(Docker's restart policy) would. After the trial, counted from the outside against the
ground truth (every Kong entry the ingest service acknowledged):

- lost: acknowledged events missing from the snapshots topic or from their closed window
  (figures exact against an independent computation), broken entries not dead-lettered;
- doubled: events counted more often than acknowledged in a window;
- wrong windows: windows missing, unexpected, with a figure or a verdict id other than a
  fault-free run's;
- duplicate notifications: Slack parents or Jira tickets beyond one per incident, repeated
  resolutions or update replies, several ANCHOR_DRIFT_ALERT ids for an incident, a labelled
  incident alerted twice.

Two more kinds are the operator trials (bench/fault_operator.py), named in the output: "a
silence expiring during a restart" (``silence-expiry``) and "a crash between an
acknowledgement and its Jira comment" (``ack-crash``): the alerting service alone on
verdicts of their own topics, crashed at release_before_commit or ack_before_commit and at
a send after it; per incident, Slack posts and replies, Jira tickets and comments and
PagerDuty events counted lost and doubled (doubled ones are duplicate notifications), on a
line ``operator paths: ...`` before the last.

Two kinds run the alerting service as a leader and a standby on one PostgreSQL state
(bench/fault_alerting.py): ``alerting-takeover`` kills the leader with its state directory
deleted, ``alerting-pause`` stops it past its lease; a line ``alerting takeover: ...`` gives
the time to an instance leading again and to the next Slack post, median and max. Three
share the work instead (``alerting-scale``: a third joins; ``alerting-split-*``).

Anything else that went wrong (an incident missed, a batch never acknowledged, a thread out
of order) is printed and fails the campaign too. One line per trial; the last line is
``faults: N trials, lost L, doubled D, wrong windows W, duplicate notifications K``; exit 1
unless all are 0. A trial is reproducible from ``--seed`` and its index (``--from I``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
import requests

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.alerting.crash import CRASH_ENV
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.contracts import DeadLetter, decode, decode_drift_event
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import slice as flow
from anchorwatch.demo.journey import Journey, JourneyOptions
from anchorwatch.demo.journey_processes import Services
from anchorwatch.demo.journey_results import JourneyReport
from anchorwatch.jobs import cluster
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from anchorwatch.stack.processes import free_port_block
from anchorwatch.stack.stack import Stack, StackSettings
from bench import fault_alerting
from bench.fault_alerting import PAIR_FAULTS, SPLIT_FAULTS
from bench.fault_operator import OperatorOutcome, operator_line, operator_summary
from bench.fault_operator import run_operator_trial as _run_operator_trial
from bench.fault_plan import (
    FAULTS,
    OPERATOR_SCENARIOS,
    TrialSpec,
    count_notifications,
    count_windows,
    multiset_shortfall,
    plan_trials,
)

Echo = Callable[[str], None]


# --------------------------------------------------------------------------- processes


class SupervisedServices(Services):
    """The journey's service processes, each restartable with the command and environment
    it was started with (what a supervisor does after a crash)."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.launch: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.always: dict[str, dict[str, str]] = {}  # added to every start of a service
        self.first: dict[str, dict[str, str]] = {}  # added to its first start only
        self.restarts: Counter[str] = Counter()
        # A start and the supervisor's look at it must not interleave (it would see a
        # service launched but without its process yet, and start a second one).
        self._lock = threading.Lock()

    def start(self, name: str, argv: list[str], env: Any) -> int:
        env = {**env, **self.always.get(name, {})}
        with self._lock:
            pid = super().start(name, argv, {**env, **self.first.pop(name, {})})
            self.launch[name] = (list(argv), env)
        return pid

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def restart_dead(self, names: tuple[str, ...]) -> None:
        with self._lock:
            for name in names:
                if name in self.launch and not self.alive(name):
                    argv, env = self.launch[name]
                    self.restarts[name] += 1
                    super().start(name, argv, env)


class FaultJourney(Journey):
    """The demo's journey with one fault injected into its live span, and the ingest and
    alerting services restarted whenever they die."""

    def __init__(
        self,
        stack: Stack,
        job_base: JobSettings,
        alerting_base: AlertingSettings,
        options: JourneyOptions,
        echo: Echo,
        spec: TrialSpec,
        job_overrides: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(stack, job_base, alerting_base, options, echo)
        self.spec = spec
        # A partition whose leader is dead or paused is silent for the fault's length: the
        # journey's 5 s idle timeout would let the others move the watermark past its
        # records. Frequent checkpoints keep a TaskManager's replay short.
        job = self.job_settings.job.model_copy(
            update={"idle_timeout_s": 60, "checkpoint_interval_s": 5, **(job_overrides or {})}
        )
        self.job_settings = self.job_settings.model_copy(update={"job": job})
        self.supervised = SupervisedServices(self.run_dir)
        self.services = self.supervised
        # Two ingest processes share the port, so that one can die with requests in flight
        # (its parent then stops the other and exits; the supervisor starts it again).
        self.supervised.always["ingest"] = {"ANCHORWATCH_INGEST__WORKERS": "2"}
        self.injected: dict[str, Any] = {}
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []

    def _start_ingest(self, report: JourneyReport) -> str:
        url = super()._start_ingest(report)
        self._threads.append(threading.Thread(target=self._supervise, daemon=True))
        self._threads[-1].start()
        return url

    def _start_alerting(self, report: JourneyReport) -> None:
        if self.spec.fault == "alerting-kill" and self.spec.crash_point:
            self.supervised.first["alerting"] = {CRASH_ENV: self.spec.crash_point}
        super()._start_alerting(report)
        live_start = time.monotonic() + 1.0  # the journey's replay clock starts 1 s on
        live_wall_s = self.options.live_minutes * 60 / self.options.speed
        strike = live_start + self.spec.at * live_wall_s
        self._threads.append(threading.Thread(target=self._inject, args=(strike,), daemon=True))
        self._threads[-1].start()

    def _settled(self, report: JourneyReport, *, patience_over: bool) -> bool:
        if not all(self.supervised.alive(n) for n in self.supervised.launch if "alerting" in n):
            return False  # the supervisor starts it again
        return super()._settled(report, patience_over=patience_over)

    def finish(self) -> None:
        """Stop injecting and supervising (before the services are stopped)."""
        self._done.set()
        for t in self._threads:
            t.join(timeout=120)

    def _supervise(self) -> None:
        while not self._done.wait(0.3):
            self.supervised.restart_dead(("ingest", "alerting", "alerting-2", "alerting-3"))

    # ----------------------------------------------------------------- the faults

    def _inject(self, strike: float) -> None:
        if self._done.wait(max(0.0, strike - time.monotonic())):
            return
        spec, rng = self.spec, random.Random(self.spec.seed)
        t = time.monotonic()
        try:
            detail = self._strike(spec, rng)
        except Exception as exc:  # reported in the trial's line, and fails the trial
            detail = f"injection failed: {type(exc).__name__}: {exc}"
            self.injected["error"] = detail
        self.injected.update(detail=detail, took_s=round(time.monotonic() - t, 1))

    def _strike(self, spec: TrialSpec, rng: random.Random) -> str:
        kafka = self.stack.kafka
        if spec.fault in ("broker-kill", "broker-pause"):
            topic = self.job_settings.topics.snapshots
            node = kafka.node(kafka.leader_of(topic, spec.partition))
            if spec.fault == "broker-kill":
                node.send_signal(signal.SIGKILL)
                self._done.wait(spec.duration_s)
                t = time.monotonic()
                self.stack.up(with_flink=True)
                return f"killed {node.name}; `stack up` restarted it in {time.monotonic() - t:.1f}s"
            node.send_signal(signal.SIGSTOP)
            try:
                self._done.wait(spec.duration_s)
            finally:
                node.send_signal(signal.SIGCONT)
            return f"paused {node.name} for {spec.duration_s:.0f}s"
        if spec.fault == "taskmanager-kill":
            rest = cluster.FlinkRest(self.stack.flink.address)
            used = rest.task_managers_of(self.job_id or "")
            pids = [tm.pid for tm in self.stack.flink.task_managers() if tm.resource_id in used]
            victim = self.stack.flink.kill_taskmanager(pids[0] if pids else None)
            killed = time.monotonic()
            self._done.wait(spec.duration_s)
            self.stack.up(with_flink=True)
            deadline = time.monotonic() + 180
            while not rest.running(self.job_id or "") and time.monotonic() < deadline:
                time.sleep(0.5)
            return (
                f"killed TaskManager {victim}; job running again after "
                f"{time.monotonic() - killed:.1f}s"
            )
        if spec.fault == "ingest-kill":
            parent = psutil.Process(self.services.pids["ingest"])
            workers = [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]
            worker = rng.choice(sorted(workers, key=lambda p: p.pid))
            worker.send_signal(signal.SIGKILL)
            return f"killed ingest worker {worker.pid}"
        if spec.fault == "alerting-kill":
            if spec.crash_point:
                return f"the service kills itself at {spec.crash_point}"
            pid = self.services.pids["alerting"]
            os.kill(pid, signal.SIGKILL)
            return f"killed the alerting service ({pid})"
        if spec.fault in PAIR_FAULTS:
            assert self.pair is not None
            return fault_alerting.strike(self.pair, self.services.pids, self.state_dir,
                                         self.slack_url, spec.fault, spec.duration_s,
                                         self._done, self.injected)  # fmt: skip
        if spec.fault == "slack-down":
            half = spec.duration_s / 2
            _fault(self.slack_url, {"method": "*", "status": 503, "times": -1}, half, self._done)
            _fault(
                self.slack_url,
                {"method": "*", "status": 429, "retry_after": 1, "times": -1},
                half,
                self._done,
            )
            return f"Slack 503 for {half:.0f}s, then 429 for {half:.0f}s"
        if spec.fault == "jira-down":
            _fault(self.jira_url, {"method": "*", "status": 503, "times": -1}, spec.duration_s,
                   self._done)  # fmt: skip
            return f"Jira 503 for {spec.duration_s:.0f}s"
        raise ValueError(f"unknown fault {spec.fault!r}")


def _fault(url: str, fault: dict[str, Any], seconds: float, done: threading.Event) -> None:
    """A local Slack or Jira answers ``fault`` to every call for ``seconds``."""
    requests.post(f"{url}/_local/faults", json=fault, timeout=10).raise_for_status()
    try:
        done.wait(seconds)
    finally:
        requests.delete(f"{url}/_local/faults", timeout=10).raise_for_status()


# --------------------------------------------------------------------------- counting


@dataclass
class TrialResult:
    spec: TrialSpec
    acked: int = 0
    lost: int = 0
    doubled: int = 0
    wrong_windows: int = 0
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    operator: OperatorOutcome | None = None  # an operator trial's own counts
    lost_notifications: int = 0

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.doubled
            or self.wrong_windows
            or self.duplicates
            or self.lost_notifications
        )


def reconcile(j: FaultJourney, report: JourneyReport) -> TrialResult:
    """The trial's counts, from the topics, the alerting store and what the local Slack and
    Jira received, against the traffic the trial sent."""
    out = TrialResult(j.spec)
    s, plan, o = j.job_settings, report.plan, j.options
    history, live = plan.split()
    entries = jp.kong_entries(history, broken_every=o.broken_every)
    entries += jp.kong_entries(live, broken_every=o.broken_every)
    if report.failed_batches:
        # Kong gives a batch up after its retries: not acknowledged, so not promised. The
        # counts below would then blame the pipeline for it.
        out.problems.append(f"{report.failed_batches} batches never acknowledged")
    acked = [e.event for e in entries if e.event is not None]
    out.acked = len(acked)

    window_ms = s.job.window_size_s * 1000
    closed_by = plan.end_ms - s.job.watermark_delay_ms - window_ms
    windows = count_windows(
        flow.reference_windows(acked, window_ms),
        flow.read_verdicts(s),
        closed_by_ms=closed_by,
        holders=flow.anchor_holders(acked, window_ms),
    )
    in_kafka = Counter(
        str(orjson.loads(m.value)["event_id"])
        for m in read_topic(s.kafka, s.topics.snapshots)
        if m.value
    )
    missing = sum(1 for e in acked if e.event_id not in in_kafka)
    letters = [
        decode(DeadLetter, m.value) for m in read_topic(s.kafka, s.topics.dead_letter) if m.value
    ]
    letters_missing, letter_copies = multiset_shortfall(
        (e.broken for e in entries if e.broken),
        ((dl.field or "").split("[", 1)[0] for dl in letters),
    )
    out.lost = max(windows.lost, missing) + letters_missing
    out.doubled = windows.doubled
    out.wrong_windows = len(windows.wrong)
    out.problems += windows.wrong[:5]

    incidents = list_incidents(j.state, open_only=False, limit=1000)
    alerts: dict[str, dict[str, str]] = {}
    for m in read_topic(s.kafka, s.topics.drift_events):
        if m.value:
            ev = decode_drift_event(m.value)
            if ev.event_type == "ANCHOR_DRIFT_ALERT":
                alerts.setdefault(ev.incident_id, {})[ev.event_id] = ev.severity
    notes = count_notifications(
        [(i.row.incident_id, i.refs.slack_ts, i.refs.jira_key) for i in incidents],
        _get(f"{j.slack_url}/_local/messages")["messages"],
        _get(f"{j.jira_url}/_local/issues")["issues"],
        alerts,
    )
    outcome = report.outcome
    repeated = 0
    if outcome is not None:
        repeated = sum(len(f.alerts) + sum(a.reopened for a in f.alerts) - 1
                       for f in outcome.repeated)  # fmt: skip
        out.problems += [f"missed: {lab.kind} {lab.doc_type}" for lab in outcome.missed]
        out.problems += [f"unlabelled alert: {a.doc_type}" for a in outcome.unlabelled]
        out.problems += [f"undiagnosed: {lab.doc_type}" for lab in outcome.undiagnosed]
    out.duplicates = notes.duplicates + repeated
    out.problems += notes.problems
    if "error" in j.injected:
        out.problems.append(str(j.injected["error"]))
    latencies = [x.slack_latency_s for x in report.seen.values() if x.slack_latency_s is not None]
    out.figures = {
        "windows": windows.compared,
        "kafka_copies": sum(c - 1 for c in in_kafka.values()),
        "dead_letter_copies": letter_copies,
        "repeated_verdicts": windows.repeated_verdicts,
        "late": report.late_events,
        "incidents": notes.incidents,
        "labels": len(plan.labels),
        "max_alert_latency_s": round(max(latencies), 1) if latencies else None,
        "restarts": dict(j.supervised.restarts),
    }
    return out


def _get(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


# --------------------------------------------------------------------------- the campaign


@contextlib.contextmanager
def campaign_stack(
    state_dir: Path | None = None, *, brokers: int = 3, taskmanagers: int = 2
) -> Iterator[Stack]:
    """A cluster of its own on free ports (``state_dir``, else a temporary directory),
    stopped at the end."""
    own = state_dir is None
    root = Path(tempfile.mkdtemp(prefix="anchorwatch-faults-")) if own else state_dir
    assert root is not None
    # One block for all: ports drawn one by one could land inside the brokers' block.
    base = free_port_block(2 * brokers + 2)
    stack = Stack(StackSettings.load(None, stack={
        "state_dir": root, "kafka_port": base, "controller_port": base + 1,
        "flink_rest_port": base + 2 * brokers, "flink_rpc_port": base + 2 * brokers + 1,
        "brokers": brokers,
        "flink_taskmanagers": taskmanagers}))  # fmt: skip
    try:
        stack.up(with_flink=True)
        yield stack
    finally:
        stack.down()
        if own:
            shutil.rmtree(root, ignore_errors=True)


def run_trial(
    stack: Stack,
    spec: TrialSpec,
    work_dir: Path,
    options: dict[str, Any],
    job_overrides: dict[str, Any] | None = None,
) -> TrialResult:
    # A trial starts from a whole cluster, every replica in sync.
    stack.up(with_flink=True)
    stack.kafka.wait_in_sync(timeout_s=180)
    job = JobSettings.load(None, kafka={"bootstrap_servers": stack.kafka.bootstrap})
    if spec.fault in OPERATOR_SCENARIOS:
        return run_operator_trial(job, spec, work_dir)
    job = job.model_copy(update={"topics": stack.topics})
    alerting = AlertingSettings.load(None, slack={"mode": "off"}, jira={"enabled": False})
    opts = JourneyOptions(
        seed=spec.seed,
        state_dir=work_dir,
        ports={"ingest": 0, "alerting": 0, "slack": 0, "jira": 0},
        # One Kong worker queue: with two, a retried batch of one queue falls behind the
        # other's by the retry backoff times the replay speed (minutes of event time).
        kong_workers=1,
        # The demo's operator drills (a silence, a click, a data-quality minute, a killed
        # job) are not part of a fault trial: its checks count the labelled incidents.
        operator=False,
        # One alerting instance on its SQLite file, but for the kinds that strike a leader
        # and its standby on PostgreSQL (and only the fault strikes: no journey kill).
        alerting_instances=2 if spec.fault in PAIR_FAULTS else 1,
        kill_alerting_leader=False,
        alerting_work_split=spec.fault in SPLIT_FAULTS,  # the two share the partitions
        **options,
    )
    journey = FaultJourney(stack, job, alerting, opts, lambda line: None, spec, job_overrides)
    plan = jp.make_plan(int(time.time() * 1000), seed=spec.seed, doc_types=opts.doc_types,
                        history_minutes=opts.history_minutes,
                        live_minutes=opts.live_minutes)  # fmt: skip
    t = time.monotonic()
    try:
        report = journey.run(plan)
        journey.finish()
        result = reconcile(journey, report)
    except Exception as exc:
        journey.finish()
        result = TrialResult(spec, problems=[f"trial failed: {type(exc).__name__}: {exc}"])
    finally:
        journey.stop()
    result.figures["injected"] = journey.injected.get("detail", "not injected")
    result.figures["timings"] = {
        k: v for k, v in journey.injected.items() if k in fault_alerting.TIMINGS
    }
    result.figures["seconds"] = round(time.monotonic() - t)
    if "detail" not in journey.injected:
        result.problems.append("the fault was never injected")
    return result


def run_operator_trial(job: JobSettings, spec: TrialSpec, work_dir: Path) -> TrialResult:
    """An operator trial on topics of its own (the journey's are the stack's)."""
    t = time.monotonic()
    with flow.private_topics(job) as own:
        out = _run_operator_trial(own, spec, work_dir / f"operator-{spec.index}")
    return TrialResult(
        spec,
        duplicates=out.count.doubled,
        problems=out.problems,
        figures={"seconds": round(time.monotonic() - t)},
        operator=out,
        lost_notifications=out.count.lost,
    )


def trial_line(r: TrialResult, total: int) -> str:
    f = r.figures
    if r.operator is not None:
        return operator_line(r.spec, r.operator, total, f["seconds"])
    if "windows" not in f:
        return (
            f"trial {r.spec.index + 1}/{total} seed {r.spec.seed} {r.spec.describe()}: "
            f"did not finish ({f.get('seconds')}s)"
        )
    return (
        f"trial {r.spec.index + 1}/{total} seed {r.spec.seed} {r.spec.describe()}: "
        f"{f.get('injected')}; {r.acked} events acked, lost {r.lost}, doubled {r.doubled}, "
        f"wrong windows {r.wrong_windows} of {f.get('windows')}, duplicate notifications "
        f"{r.duplicates}; {f.get('incidents')} incidents for {f.get('labels')} labels, max "
        f"alert latency {f.get('max_alert_latency_s')}s; absorbed: {f.get('kafka_copies')} "
        f"event copies in Kafka, {f.get('repeated_verdicts')} repeated verdicts, "
        f"{f.get('dead_letter_copies')} dead-letter copies; restarts {f.get('restarts')}; "
        f"{f.get('seconds')}s"
    )


def final_line(results: list[TrialResult]) -> str:
    return (
        f"faults: {len(results)} trials, lost {sum(r.lost for r in results)}, doubled "
        f"{sum(r.doubled for r in results)}, wrong windows "
        f"{sum(r.wrong_windows for r in results)}, duplicate notifications "
        f"{sum(r.duplicates for r in results)}"
    )


def campaign(
    stack: Stack,
    specs: list[TrialSpec],
    work_dir: Path,
    echo: Echo = print,
    options: dict[str, Any] | None = None,
    job_overrides: dict[str, Any] | None = None,
) -> list[TrialResult]:
    results = []
    for spec in specs:
        echo(f"trial {spec.index + 1}/{len(specs)} seed {spec.seed}: {spec.describe()} ...")
        result = run_trial(stack, spec, work_dir, options or {}, job_overrides)
        results.append(result)
        echo(trial_line(result, len(specs)))
        for p in result.problems:
            echo(f"  problem: {p}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=len(FAULTS))
    p.add_argument("--seed", type=int, default=17)
    p.add_argument("--from", dest="first", type=int, default=0, help="first trial index")
    p.add_argument("--indices", default="", help="only these trial indices (e.g. 3,5)")
    p.add_argument("--only", default="", help=f"fault kinds, comma-separated: {','.join(FAULTS)}")
    p.add_argument("--state-dir", type=Path, default=None, help="the cluster's state directory")
    p.add_argument("--work-dir", type=Path, default=None, help="where runs keep their logs")
    p.add_argument("--history-minutes", type=int, default=180)
    p.add_argument("--live-minutes", type=int, default=34)
    p.add_argument("--speed", type=float, default=30.0, help="replay speed of the live span")
    p.add_argument(
        "--no-dedup",
        action="store_true",
        help="the job without deduplication by event_id (shows that the count sees copies)",
    )
    a = p.parse_args(argv)
    only = tuple(k for k in a.only.split(",") if k)
    unknown = set(only) - set(FAULTS)
    if unknown:
        p.error(f"unknown fault kinds {sorted(unknown)}; known: {FAULTS}")
    specs = plan_trials(a.first + a.trials, a.seed, only=only)[a.first :]
    if a.indices:
        wanted = {int(i) for i in a.indices.split(",")}
        specs = [s for s in plan_trials(max(wanted) + 1, a.seed, only=only) if s.index in wanted]
    work = a.work_dir or Path(tempfile.mkdtemp(prefix="anchorwatch-fault-runs-"))
    print(f"faults: {len(specs)} trials, seed {a.seed}; run logs under {work}", flush=True)
    t = time.monotonic()
    with campaign_stack(a.state_dir) as stack:
        print(f"cluster: 3 Kafka nodes at {stack.kafka.bootstrap}, 2 TaskManagers "
              f"({time.monotonic() - t:.0f}s)", flush=True)  # fmt: skip
        options = {"history_minutes": a.history_minutes, "live_minutes": a.live_minutes,
                   "speed": a.speed}  # fmt: skip
        job = {"deduplicate": False} if a.no_dedup else None
        results = campaign(stack, specs, work, lambda line: print(line, flush=True), options, job)
    others = sum(len(r.problems) for r in results if r.clean)
    if others:
        print(f"other problems: {others} (listed above)")
    operator = [(r.spec, r.operator) for r in results if r.operator is not None]
    if operator:
        print(operator_summary(operator))
    for line in fault_alerting.summary_lines([r.figures.get("timings", {}) for r in results]):
        print(line)
    print(final_line(results))
    return 0 if all(r.clean and not r.problems for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
