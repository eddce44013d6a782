"""`anchorwatch demo`: the whole pipeline as it is deployed, end to end, on this machine.

Kafka and a Flink session cluster; the drift job submitted to it (`job submit`); the ingest
service receiving Kong http-log batches over HTTP; the alerting service posting to Slack
and Jira (the local servers unless real ones are configured). A few hours of generated
history go in first and baselines are fitted from the windows the job made of them; then
live traffic with labelled incidents is sent on a compressed replay clock (the job works in
event time, and the ingest service keeps each entry's own `started_at`), and every incident
is printed as Slack and Jira get it. The run ends with its figures and a verdict: every
labelled incident alerted exactly once, nothing else alerted, every window figure equal to
an independent computation, every broken entry dead-lettered naming its field.

The services run as their own processes (`anchorwatch ingest serve`, `alerting serve`,
`alerting local-slack`/`local-jira`), so `--keep` can leave them running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import requests

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.baseline_publish import publish_baselines
from anchorwatch.contracts import DeadLetter, Verdict, decode
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import slice as flow
from anchorwatch.errors import AnchorwatchError
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.baseline_fit import windows_from_topic
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from anchorwatch.policy.fitting import fit_baselines
from anchorwatch.stack.processes import port_in_use
from anchorwatch.stack.stack import Stack

Echo = Callable[[str], None]

#: The bot token the local Slack is started with.
LOCAL_SLACK_TOKEN = "xoxb-local-demo"  # noqa: S105 (a local test server's token)


class JourneyError(AnchorwatchError):
    """A part of the pipeline did not come up or did not answer in time."""


@dataclass(frozen=True)
class JourneyOptions:
    seed: int = 7
    doc_types: int = 6
    history_minutes: int = 180
    live_minutes: int = 34
    speed: float = 30.0  # live event time runs this many times faster than the wall clock
    kong_workers: int = 2  # Kong worker processes, each with its own http-log queue
    batch_size: int = 100  # Kong's queue.max_batch_size
    broken_every: int = 100  # one entry in this many is broken
    #: Allowed out-of-orderness of the job (event time): Kong's workers send concurrently,
    #: so entries reach Kafka up to a coalescing delay plus a request apart, stretched by
    #: ``speed`` on the replay clock.
    watermark_delay_ms: int = 30_000
    #: Event time between two progress updates (Slack reply with the chart, Jira comment).
    update_interval_s: int = 120
    state_dir: Path = Path(".anchorwatch/demo")
    ports: Mapping[str, int] = field(
        default_factory=lambda: {"ingest": 8686, "alerting": 9465, "slack": 8089, "jira": 8090}
    )
    timeout_s: float = 180.0  # longest wait for any one step


@dataclass
class Seen:
    """What the run observed of one incident."""

    incident_id: str
    doc_type: str
    severity: str
    opened_at_ms: int
    reopened: int = 0
    announced: bool = False
    resolved: bool = False
    slack_latency_s: float | None = None
    reasons: tuple[str, ...] = ()


@dataclass
class JourneyReport:
    plan: jp.Plan
    events_sent: int = 0
    events_accepted: int = 0
    entries_rejected: int = 0
    dead_letters: int = 0
    dead_letter_problems: list[str] = field(default_factory=list)
    failed_batches: int = 0
    verdicts: int = 0
    late_events: int = 0
    comparison: flow.Comparison | None = None
    outcome: jp.Outcome | None = None
    seen: dict[str, Seen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(
            self.outcome is not None
            and self.outcome.ok
            and self.comparison is not None
            and self.comparison.ok
            and not self.dead_letter_problems
            and not self.failed_batches
        )


# --------------------------------------------------------------------------- processes


class Services:
    """The service processes of one run: started in their own sessions (so they can
    outlive the command with --keep), logs and pids under the run's directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: Mapping[str, str]) -> int:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # A process that ran a local Flink job carries PyFlink's worker flags.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")}
        with (self.run_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "anchorwatch", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**inherited, **env},
            )
        (self.run_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.procs[name] = proc
        return proc.pid

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def check(self, name: str) -> None:
        code = self.procs[name].poll()
        if code is not None:
            log = (self.run_dir / f"{name}.log").read_text(errors="replace")[-3000:]
            raise JourneyError(f"{name} exited with status {code}; its log ends:\n{log}")

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def env_of(config: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Settings as ANCHORWATCH_<SECTION>__<FIELD> variables."""
    out = {}
    for section, fields in config.items():
        for name, value in fields.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            out[f"ANCHORWATCH_{section.upper()}__{name.upper()}"] = text
    return out


def pick_port(preferred: int) -> int:
    from anchorwatch.stack.processes import free_port

    return preferred if preferred and not port_in_use("127.0.0.1", preferred) else free_port()


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise JourneyError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


# --------------------------------------------------------------------------- Kong


@dataclass
class SendStats:
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    failed_batches: int = 0
    request_s: list[float] = field(default_factory=list)


async def send_batches(
    url: str,
    batches: list[jp.Batch],
    *,
    workers: int,
    clock: Callable[[int], float] | None = None,
    attempts: int = 8,
) -> SendStats:
    """POST each batch as Kong's http-log plugin does: one batch at a time per worker,
    retried with backoff on a failed status or connection error. With ``clock`` (event time
    to wall time), a batch waits until it is due."""
    stats = SendStats()
    queues: list[list[jp.Batch]] = [[b for b in batches if b.worker == w] for w in range(workers)]

    async def worker(session: aiohttp.ClientSession, mine: list[jp.Batch]) -> None:
        for batch in mine:
            if clock is not None:
                delay = clock(batch.send_at_ms) - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            body = batch.body()
            for attempt in range(attempts):
                started = time.perf_counter()
                try:
                    async with session.post(
                        url, data=body, headers={"Content-Type": "application/json"}
                    ) as r:
                        answer = await r.json() if r.status == 200 else None
                except (aiohttp.ClientError, TimeoutError):
                    answer = None
                stats.request_s.append(time.perf_counter() - started)
                if answer is not None:
                    stats.sent += len(batch.entries)
                    stats.accepted += int(answer["accepted"]) + int(answer["already_written"])
                    stats.rejected += int(answer["rejected"])
                    break
                await asyncio.sleep(min(0.2 * 2**attempt, 5))
            else:
                stats.failed_batches += 1

    timeout = aiohttp.ClientTimeout(total=15)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session, q) for q in queues))
    return stats


# --------------------------------------------------------------------------- the run


class Journey:
    def __init__(
        self,
        stack: Stack,
        job_base: JobSettings,
        alerting_base: AlertingSettings,
        options: JourneyOptions,
        echo: Echo,
    ) -> None:
        self.stack = stack
        self.options = options
        self.echo = echo
        self.run_id = flow.new_run_id()
        self.run_dir = (options.state_dir / self.run_id).resolve()
        topics = flow.run_scoped_topics(job_base.topics, self.run_id)
        job = job_base.job.model_copy(
            update={
                "watermark_delay_ms": options.watermark_delay_ms,
                # Every partition is fed on the same replay clock, so one quiet for a few
                # seconds holds nothing back that could still arrive behind the others.
                "idle_timeout_s": 5,
                "late_report_s": 2,
                "startup_mode": "earliest-offset",
                "group_id": f"anchorwatch-demo-{self.run_id}",
            }
        )
        self.job_settings = job_base.model_copy(
            update={
                "topics": topics,
                "job": job,
                "kafka": job_base.kafka.model_copy(
                    update={"bootstrap_servers": stack.kafka.bootstrap}
                ),
            }
        )
        self.alerting_base = alerting_base
        self.local_slack = alerting_base.slack.mode == "off"
        self.local_jira = not alerting_base.jira.enabled
        self.services = Services(self.run_dir)
        self.job_id: str | None = None
        self.slack_url = ""
        self.jira_url = alerting_base.jira.url
        self.slack_web = ""  # where permalinks point
        self.state_dir = self.run_dir / "alerting"

    # ----------------------------------------------------------------- steps

    def run(self, plan: jp.Plan) -> JourneyReport:
        o = self.options
        report = JourneyReport(plan)
        t0 = time.monotonic()
        flow.create_topics(self.job_settings)
        history, live = plan.split()
        entries_h = jp.kong_entries(history, broken_every=o.broken_every)
        entries_l = jp.kong_entries(live, broken_every=o.broken_every)
        entries = entries_h + entries_l
        # History is a backlog: full batches, one sender, in order. Live traffic: a Kong
        # node's worker queues, each flushed at 100 entries or after 1 s of replay time.
        batches_h = jp.kong_batches(
            entries_h, workers=1, batch_size=o.batch_size, coalesce_ms=10**12
        )
        batches_l = jp.kong_batches(entries_l, workers=o.kong_workers, batch_size=o.batch_size)

        submitted: dict[str, Any] = {}
        submitter = threading.Thread(target=self._submit, args=(submitted,), daemon=True)
        submitter.start()
        ingest_url = self._start_ingest(report)
        self._start_local_servers(report)
        submitter.join()
        if "error" in submitted:
            raise submitted["error"]
        self.job_id = submitted["job_id"]
        report.addresses["flink"] = self.stack.flink.rest_url
        rest = cluster.FlinkRest(self.stack.flink.address)
        wait_for(lambda: rest.state(self.job_id or "") == "RUNNING", o.timeout_s, "the job")
        self.echo(
            f"[2/6] drift job {self.job_id} running on the session cluster "
            f"{self.stack.flink.rest_url} ({time.monotonic() - t0:.0f}s)"
        )

        t = time.monotonic()
        stats = asyncio.run(send_batches(f"{ingest_url}/v1/kong", batches_h, workers=1))
        self._add(report, stats)
        self.echo(
            f"[3/6] history: {o.history_minutes} min of traffic for {len(plan.doc_types)} doc "
            f"types, {stats.sent} Kong entries in {len(batches_h)} batches of up to "
            f"{o.batch_size} ({stats.accepted} accepted, {stats.rejected} dead-lettered) in "
            f"{time.monotonic() - t:.1f}s"
        )
        t = time.monotonic()
        fitted = self._fit_baselines(plan)
        self.echo(
            f"[4/6] baselines fitted on the history's windows: {fitted} "
            f"({time.monotonic() - t:.1f}s)"
        )

        self._start_alerting(report)
        self.echo(
            f"[5/6] live: {o.live_minutes} min of traffic at {o.speed:g}x "
            f"({len(batches_l)} batches from {o.kong_workers} Kong workers), "
            f"{len(plan.labels)} labelled incidents:"
        )
        for lab in plan.labels:
            minute = (lab.start_ms - plan.live_start_ms) // jp.MINUTE_MS
            length = (lab.end_ms - lab.start_ms) // jp.MINUTE_MS
            self.echo(
                f"        {lab.kind:<9} {lab.doc_type:<20} +{lab.magnitude:.2f} from "
                f"minute {minute} for {length} min"
            )
        origin_wall = time.time() + 1.0
        report.timings["origin_wall"] = origin_wall

        def clock(event_ms: int) -> float:
            return jp.replay_wall_s(
                event_ms, origin_ms=plan.live_start_ms, origin_wall_s=origin_wall, speed=o.speed
            )

        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(report, clock, stop), daemon=True, name="watch"
        )
        watcher.start()
        try:
            stats = asyncio.run(
                send_batches(
                    f"{ingest_url}/v1/kong", batches_l, workers=o.kong_workers, clock=clock
                )
            )
            self._add(report, stats)
            report.timings["live_request_p99_s"] = jp.quantile(stats.request_s, 0.99)
            # Verdicts still in flight may open or resolve incidents: wait until every
            # incident is resolved and delivered (a false one that never resolves is reported).
            deadline = time.monotonic() + o.timeout_s
            patience = time.monotonic() + 20  # for a label still without its alert
            while time.monotonic() < deadline and not self._settled(
                report, patience_over=time.monotonic() > patience
            ):
                time.sleep(0.5)
        finally:
            stop.set()
            watcher.join(timeout=5)
        self._watch_once(report, clock)

        self._check(report, entries)
        report.timings["total_s"] = time.monotonic() - t0
        return report

    def _submit(self, out: dict[str, Any]) -> None:
        try:
            jar = flow.fetch_artifacts(self.job_settings).flink_jobs_jar()
            out["job_id"] = cluster.submit(
                self.stack.flink.address,
                jar,
                env={drift_job.SETTINGS_ENV: self.job_settings.model_dump_json()},
                parallelism=self.job_settings.job.parallelism,
            )
        except Exception as exc:  # reported by the main thread
            out["error"] = exc

    def _kafka_env(self) -> dict[str, Any]:
        return {
            "kafka": {"bootstrap_servers": self.job_settings.kafka.bootstrap_servers},
            "topics": {
                k: v for k, v in self.job_settings.topics.model_dump().items() if isinstance(v, str)
            },
        }

    def _start_ingest(self, report: JourneyReport) -> str:
        port = pick_port(self.options.ports["ingest"])
        self.services.start(
            "ingest",
            ["ingest", "serve"],
            env_of({**self._kafka_env(), "ingest": {"port": port}}),
        )
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: answers(f"{url}/readyz") or self._dead("ingest"), 60, "ingest /readyz")
        self.services.check("ingest")
        report.addresses["ingest"] = f"{url}/v1/kong (metrics {url}/metrics)"
        self.echo(f"[1/6] ingest service on {url}")
        return url

    def _dead(self, name: str) -> bool:
        self.services.check(name)
        return False

    def _start_local_servers(self, report: JourneyReport) -> None:
        if self.local_slack:
            port = pick_port(self.options.ports["slack"])
            self.services.start(
                "local-slack",
                ["alerting", "local-slack", "--port", str(port), "--token", LOCAL_SLACK_TOKEN],
                {},
            )
            self.slack_url = f"http://127.0.0.1:{port}"
            wait_for(
                lambda: answers(f"{self.slack_url}/_local/messages") or self._dead("local-slack"),
                30,
                "the local Slack",
            )
            self.slack_web = f"{self.slack_url}/"
            report.addresses["slack"] = f"{self.slack_url}/ (local Slack)"
        elif self.alerting_base.slack.mode == "bot":
            self.slack_web = _slack_workspace_url(self.alerting_base)
            report.addresses["slack"] = self.slack_web or "Slack"
        if self.local_jira:
            port = pick_port(self.options.ports["jira"])
            self.services.start("local-jira", ["alerting", "local-jira", "--port", str(port)], {})
            self.jira_url = f"http://127.0.0.1:{port}"
            wait_for(
                lambda: answers(f"{self.jira_url}/_local/issues") or self._dead("local-jira"),
                30,
                "the local Jira",
            )
            report.addresses["jira"] = f"{self.jira_url}/ (local Jira)"
        elif self.alerting_base.jira.enabled:
            report.addresses["jira"] = self.jira_url

    def _fit_baselines(self, plan: jp.Plan) -> str:
        """Wait for the job's windows of the history, fit each type on them and publish the
        baselines to the compacted topic (the job and the alerting service read them)."""
        s = self.job_settings
        # The watermark stays watermark_delay behind the newest event: the history's last
        # windows close once live traffic moves it on.
        cut = plan.live_start_ms - s.job.watermark_delay_ms - s.job.window_size_s * 1000
        cut -= cut % jp.MINUTE_MS
        history: list[Any] = []

        def ready() -> bool:
            # The job fires every type's windows on the same watermark: one window that
            # ends after the cut means all windows up to it are out.
            nonlocal history
            history = windows_from_topic(s.kafka, s.topics.verdicts)
            return bool(history) and max(w.window_end_ms for w in history) > cut

        wait_for(ready, self.options.timeout_s, "the history's windows", every=1.0)
        windows = [w for w in history if w.window_end_ms <= cut]
        now = int(time.time() * 1000)
        fits = fit_baselines(windows, s.policy, fitted_at_ms=now, history_end_ms=cut)
        publish_baselines(s.kafka, s.topics.baselines, [f.baseline for f in fits.values()])
        fitted = sum(f.baseline.status == "fitted" for f in fits.values())
        return f"{fitted} of {len(fits)} types, {len(windows)} windows"

    def _start_alerting(self, report: JourneyReport) -> None:
        port = pick_port(self.options.ports["alerting"])
        config: dict[str, dict[str, Any]] = {
            **self._kafka_env(),
            "alerting": {
                "state_dir": self.state_dir,
                "group_id": f"anchorwatch-demo-{self.run_id}",
                # The history's verdicts made the baselines; they are not news.
                "start_offset": "latest",
                "metrics_port": port,
                "update_interval_s": self.options.update_interval_s,
                "poll_timeout_s": 0.2,
            },
        }
        if self.local_slack:
            config["slack"] = {
                "mode": "bot",
                "api_url": f"{self.slack_url}/api/",
                "bot_token": LOCAL_SLACK_TOKEN,
            }
        if self.local_jira:
            config["jira"] = {"enabled": True, "url": self.jira_url}
        self.services.start("alerting", ["alerting", "serve"], env_of(config))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: answers(f"{url}/readyz") or self._dead("alerting"), 60, "alerting /readyz")
        report.addresses["alerting"] = f"{url}/metrics"

    # ----------------------------------------------------------------- watching

    def _watch(
        self, report: JourneyReport, clock: Callable[[int], float], stop: threading.Event
    ) -> None:
        while not stop.wait(0.3):
            with contextlib.suppress(Exception):  # the state may be mid-creation
                self._watch_once(report, clock)

    def _watch_once(self, report: JourneyReport, clock: Callable[[int], float]) -> None:
        from anchorwatch.alerting.store import FILENAME, Store

        if not (self.state_dir / FILENAME).exists():
            return
        store = Store(self.state_dir, create=False)
        try:
            # One view of the state: a delivery seen done has its references (Slack ts,
            # Jira key) in the same view, or the line would print without them.
            with store.reading():
                listings = store.list_incidents(open_only=False, limit=1000)
                outbox: dict[str, list[dict[str, Any]]] = {}
                for r in store.outbox_rows():
                    outbox.setdefault(r["incident_id"], []).append(r)
            for item in sorted(listings, key=lambda x: x.row.opened_at_ms):
                row, refs = item.row, item.refs
                seen = report.seen.setdefault(
                    row.incident_id,
                    Seen(row.incident_id, row.doc_type, row.severity, row.opened_at_ms),
                )
                seen.severity = row.severity
                seen.reopened = int(row.record.get("reopened", 0))
                rows = outbox.get(row.incident_id, [])
                done = {(r["integration"], r["kind"]) for r in rows if r["status"] == "done"}
                codes = set(seen.reasons)
                for r in rows:
                    payload = orjson.loads(r["payload"]) if isinstance(r["payload"], str) else {}
                    codes |= set(_reason_codes(payload))
                seen.reasons = tuple(sorted(codes))
                opened_done = [
                    r
                    for r in rows
                    if r["integration"] == "slack"
                    and r["kind"] in ("opened", "reopened")
                    and r["status"] == "done"
                ]
                if opened_done and seen.slack_latency_s is None:
                    delivered = min(r["finished_ms"] for r in opened_done) / 1000
                    seen.slack_latency_s = delivered - clock(row.opened_at_ms)
                want = [
                    i for i, on in (("slack", self._slack_on()), ("jira", self._jira_on())) if on
                ]
                if not seen.announced and all((i, "opened") in done for i in want):
                    # Marked once printed: a pass that fails midway (the watcher ignores
                    # it) must not lose the incident's line.
                    self._announce(seen, refs, row, clock)
                    seen.announced = True
                resolved = all((i, "resolved") in done for i in want)
                if row.state == "resolved" and resolved and not seen.resolved and seen.announced:
                    windows = ((row.resolved_at_ms or 0) - row.opened_at_ms) // jp.MINUTE_MS
                    how = row.record.get("resolution") or "clean"
                    self.echo(f"  RESOLVED {row.doc_type:<20} after {windows} more windows ({how})")
                    seen.resolved = True
        finally:
            store.close()

    def _slack_on(self) -> bool:
        return self.local_slack or self.alerting_base.slack.mode != "off"

    def _jira_on(self) -> bool:
        return self.local_jira or self.alerting_base.jira.enabled

    def _announce(self, seen: Seen, refs: Any, row: Any, clock: Callable[[int], float]) -> None:
        parts = [f"  ALERT    {row.doc_type:<20} {row.severity:<8}"]
        start = row.opened_at_ms - jp.MINUTE_MS
        parts.append(f"window {time.strftime('%H:%M', time.gmtime(start / 1000))} UTC")
        if refs.slack_ts and self.slack_web:
            parts.append(
                f"slack {slack_permalink(self.slack_web, refs.slack_channel, refs.slack_ts)}"
            )
        if refs.jira_key:
            summary = self._jira_summary(refs.jira_key)
            link = f"{self.jira_url.rstrip('/')}/browse/{refs.jira_key}"
            parts.append(f"jira {link}" + (f" {summary!r}" if summary else ""))
        if seen.slack_latency_s is not None:
            parts.append(f"({seen.slack_latency_s:.1f}s after the window's end)")
        self.echo("  ".join(parts))

    def _jira_summary(self, key: str) -> str | None:
        j = self.alerting_base.jira
        auth: Any = None
        headers = {}
        if not self.local_jira:
            token = j.api_token.get_secret_value() if j.api_token else None
            if j.user and token:
                auth = (j.user, token)
            elif token:
                headers["Authorization"] = f"Bearer {token}"
        try:
            r = requests.get(
                f"{self.jira_url.rstrip('/')}/rest/api/2/issue/{key}",
                params={"fields": "summary"},
                auth=auth,
                headers=headers,
                timeout=5,
            )
            return str(r.json()["fields"]["summary"]) if r.status_code == 200 else None
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return None

    def _settled(self, report: JourneyReport, *, patience_over: bool) -> bool:
        """Every incident seen is resolved and delivered, and each label has one (or no
        longer can be expected to get one)."""
        self.services.check("alerting")
        labels_done = all(
            any(
                s.doc_type == lab.doc_type and s.opened_at_ms > lab.start_ms
                for s in report.seen.values()
            )
            for lab in report.plan.labels
        )
        return (labels_done or patience_over) and all(s.resolved for s in report.seen.values())

    # ----------------------------------------------------------------- the figures

    def _add(self, report: JourneyReport, stats: SendStats) -> None:
        report.events_sent += stats.sent
        report.events_accepted += stats.accepted
        report.entries_rejected += stats.rejected
        report.failed_batches += stats.failed_batches

    def _check(self, report: JourneyReport, entries: list[jp.Entry]) -> None:
        s = self.job_settings
        plan = report.plan
        # Windows that must have closed: the watermark is watermark_delay behind the newest
        # event, and a window closes once it passes the end.
        closed_by = plan.end_ms - s.job.watermark_delay_ms - s.job.window_size_s * 1000
        expected_all = flow.reference_windows(
            [e.event for e in entries if e.event is not None], s.job.window_size_s * 1000
        )
        expected = {k: w for k, w in expected_all.items() if w.window_end_ms <= closed_by}
        verdicts: list[Verdict] = []

        def closed() -> bool:
            nonlocal verdicts
            verdicts = flow.read_verdicts(s)
            have = {(v.window.doc_type, v.window.window_start_ms) for v in verdicts}
            return set(expected) <= have

        # Once traffic stops, a partition whose newest event is older than the others' holds
        # the watermark back until it counts as idle (``idle_timeout_s``): the last windows
        # may close only then.
        with contextlib.suppress(JourneyError):
            wait_for(closed, s.job.idle_timeout_s + 30, "the closed windows", every=1.0)
        # Windows still open at the end (later than closed_by) are compared when present.
        shown = [v.window for v in verdicts]
        comparable = {
            k: w
            for k, w in expected_all.items()
            if k in expected or any((x.doc_type, x.window_start_ms) == k for x in shown)
        }
        report.comparison = flow.compare(comparable, shown)
        report.verdicts = len(verdicts)
        report.late_events = sum(v.window.late_count or 0 for v in verdicts)

        letters = [
            decode(DeadLetter, m.value or b"")
            for m in read_topic(s.kafka, s.topics.dead_letter)
            if m.value
        ]
        report.dead_letters = len(letters)
        want = sorted(e.broken for e in entries if e.broken)
        got = sorted(_field_root(dl.field) for dl in letters)
        if got != want:
            report.dead_letter_problems.append(
                f"dead letters name {got[:5]}... ({len(got)}), broken entries {want[:5]}... "
                f"({len(want)})"
            )
        raised = [
            jp.Raised(x.incident_id, x.doc_type, x.severity, x.opened_at_ms, x.reopened, x.reasons)
            for x in report.seen.values()
        ]
        report.outcome = jp.match_alerts(plan.labels, raised)

    # ----------------------------------------------------------------- teardown

    def stop(self, *, keep_topics: bool = False) -> None:
        if self.job_id is not None:
            with contextlib.suppress(Exception):
                cluster.FlinkRest(self.stack.flink.address).cancel(self.job_id)
        self.services.stop()
        if not keep_topics:
            flow.delete_topics(self.job_settings)


def _field_root(name: str | None) -> str:
    """The header a dead letter names, without the snapshot log's inner path."""
    text = name or ""
    return text.split("[", 1)[0]


def _reason_codes(payload: Any) -> list[str]:
    reasons = payload.get("reasons") if isinstance(payload, dict) else None
    if not isinstance(reasons, list):
        view = payload.get("view") if isinstance(payload, dict) else None
        reasons = view.get("reasons") if isinstance(view, dict) else []
    return [str(r["code"]) for r in reasons or [] if isinstance(r, dict) and "code" in r]


def slack_permalink(workspace_url: str, channel: str | None, ts: str) -> str:
    """Slack's permalink form: <workspace>/archives/<channel>/p<ts without the dot>."""
    return f"{workspace_url.rstrip('/')}/archives/{channel or ''}/p{ts.replace('.', '')}"


def _slack_workspace_url(settings: AlertingSettings) -> str:
    """The workspace URL from auth.test (the bot's own token), for permalinks."""
    from slack_sdk import WebClient

    token = settings.slack.bot_token.get_secret_value() if settings.slack.bot_token else None
    if not token:
        return ""
    try:
        answer = WebClient(token=token, base_url=settings.slack.api_url).auth_test()
        return str(answer.get("url") or "")
    except Exception:  # permalinks are a convenience; the run goes on without them
        return ""


@contextlib.contextmanager
def running(journey: Journey, *, keep: bool) -> Iterator[Journey]:
    try:
        yield journey
    finally:
        if not keep:
            journey.stop()


def summary_lines(report: JourneyReport, window_ms: int = jp.MINUTE_MS) -> list[str]:
    """The end-of-run figures, for people."""
    lines = [
        f"events in: {report.events_accepted} accepted of {report.events_sent} Kong entries; "
        f"{report.entries_rejected} rejected, {report.dead_letters} dead letters"
        + (f"; {report.failed_batches} batches failed" if report.failed_batches else ""),
    ]
    for problem in report.dead_letter_problems:
        lines.append(f"  dead letters do not match the broken entries: {problem}")
    c = report.comparison
    if c is not None:
        lines.append(
            f"windows: {report.verdicts} verdicts from Flink, {c.matched} exact against an "
            f"independent computation, {len(c.missing)} missing, {len(c.unexpected)} "
            f"unexpected, {len(c.wrong)} wrong; {report.late_events} late events"
        )
        for key, what in c.wrong[:5]:
            lines.append(f"  wrong {key}: {what}")
    o = report.outcome
    if o is not None:
        lines.append(
            f"incidents: {len(o.found)} labelled, {len(o.found) - len(o.missed)} "
            f"alerted, {len(o.unlabelled)} unlabelled alerts"
        )
        for f in o.found:
            state = (
                "MISSED"
                if not f.alerts
                else (
                    f"alerted {len(f.alerts)}x"
                    + (" (re-opened)" if any(a.reopened for a in f.alerts) else "")
                )
            )
            delay = f.delay_windows(window_ms)
            lines.append(
                f"  {f.label.kind:<9} {f.label.doc_type:<20} {state}"
                + (f", after {delay} windows" if delay is not None else "")
            )
            if (
                f.label.diagnosis
                and f.alerts
                and not any(f.label.diagnosis in a.reasons for a in f.alerts)
            ):
                lines.append(f"    (the alert does not name {f.label.diagnosis})")
        for a in o.unlabelled:
            start = time.strftime("%H:%M", time.gmtime((a.opened_at_ms - window_ms) / 1000))
            lines.append(f"  UNLABELLED {a.doc_type} {a.severity} opened by the {start} window")
    latencies = [s.slack_latency_s for s in report.seen.values() if s.slack_latency_s is not None]
    if latencies:
        lines.append(
            "window end to Slack message (replay clock): "
            f"median {jp.quantile(latencies, 0.5):.1f}s, max {max(latencies):.1f}s "
            f"over {len(latencies)} incidents"
        )
    return lines
