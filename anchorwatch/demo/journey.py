"""`anchorwatch demo`: the whole pipeline as it is deployed, end to end, on this machine.

Kafka and a Flink session cluster; the drift job submitted to it (`job submit`); the ingest
service receiving Kong http-log batches over HTTP; the alerting service posting to Slack
and Jira (the local servers unless real ones are configured). A few hours of generated
history go in first and baselines are fitted from the windows the job made of them; then
live traffic with labelled incidents is sent on a compressed replay clock (the job works in
event time, and the ingest service keeps each entry's own `started_at`), and every incident
is printed as Slack and Jira get it. The run ends with its figures and a verdict: every
labelled incident alerted exactly once, nothing else alerted, every window figure (its
breakdown too) equal to an independent computation, every broken entry dead-lettered naming
its field, and the alerts of the incidents that lived in one model version or one anchor
kind naming it (with the local Slack and Jira).

The services run as their own processes (`anchorwatch ingest serve`, `alerting serve`,
`alerting local-slack`/`local-jira`), so `--keep` can leave them running.

``Journey`` walks the steps; the parts it composes have their own modules: the service
processes (``journey_processes``, ``journey_services``), the drift job (``journey_job``),
the Kong traffic (``journey_feed``), the watch on the alerting service (``journey_watch``)
and the figures with their checks (``journey_results``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import slice as flow
from anchorwatch.demo.journey_alerting_pair import AlertingPair
from anchorwatch.demo.journey_checks import breakdown_checks, operator_checks
from anchorwatch.demo.journey_feed import KongTraffic, ReplayClock, send_batches
from anchorwatch.demo.journey_job import (
    Submission,
    cancel,
    fit_history_baselines,
    run_settings,
    wait_running,
)
from anchorwatch.demo.journey_operator import Operator, label_lines
from anchorwatch.demo.journey_processes import JourneyError, Services, pick_port
from anchorwatch.demo.journey_results import JourneyReport, check_results
from anchorwatch.demo.journey_services import (
    Destinations,
    new_ingest_credentials,
    start_alerting,
    start_ingest,
)
from anchorwatch.demo.journey_watch import IncidentWatcher, settled, watchdog_notice
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.stack import Stack

Echo = Callable[[str], None]


#: When the alerting leader is killed, as a share of the live span (two instances).
KILL_AT = 0.72


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
        default_factory=lambda: {
            "ingest": 8686,
            "alerting": 9465,
            "slack": 8089,
            "jira": 8090,
            "pagerduty": 8091,
        }
    )
    timeout_s: float = 180.0  # longest wait for any one step
    #: The operator features (journey_operator): a silence, an acknowledgement clicked in
    #: Slack, a gateway-wide data-quality fault grouped into one incident, PagerDuty, and
    #: the watchdog's notice once the job is killed at the end. With the local Slack and
    #: Jira only.
    operator: bool = True
    #: Alerting instances: 2 run a leader and a standby on a private PostgreSQL, and the
    #: leader is killed -9 partway through the live traffic (journey_alerting_pair); 1, the
    #: service alone on its SQLite file.
    alerting_instances: int = 2
    #: With two: kill the leader at KILL_AT (the fault campaign strikes on its own instead).
    kill_alerting_leader: bool = True
    #: With two: they share the verdict partitions (``alerting.work_split``) instead of a
    #: leader and a standby, and the kill strikes the owner of partition 0. Without the
    #: operator features (the fault campaign's split kinds), grouping, the watchdog and the
    #: refits are off, as those trials were measured.
    alerting_work_split: bool = False


class Journey:
    """One run of the demo on ``stack``: ``run(plan)`` starts the run's services and its
    drift job, sends the plan's history, fits baselines on it, sends the live traffic while
    watching what alerting posts, and returns the report; ``stop()`` takes down what the run
    started. The ``_start_ingest``, ``_start_alerting`` and ``_settled`` steps are where a
    subclass (bench/faults.py) hooks in."""

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
        self.job_settings = run_settings(
            job_base,
            run_id=self.run_id,
            bootstrap=stack.kafka.bootstrap,
            watermark_delay_ms=options.watermark_delay_ms,
        )
        self.alerting_base = alerting_base
        self.destinations = Destinations(alerting_base, operator=options.operator)
        self.services = Services(self.run_dir)
        self.job_id: str | None = None
        self.state_dir = self.run_dir / "alerting"
        self.ingest_tokens: list[str] = []  # one per Kong worker, made when ingest starts
        self.operator: Operator | None = None  # with the operator features, once run
        self.alerting_port = 0
        self.alerting_url = ""
        self.state: Path | StateLocation = self.state_dir  # where the alerting state is
        self.pair: AlertingPair | None = None  # with two alerting instances
        self.watcher: IncidentWatcher | None = None  # while and after the live traffic

    @property
    def slack_url(self) -> str:
        """The local Slack's address, once started ("" when the run posts to a real one)."""
        return self.destinations.slack_url

    @property
    def jira_url(self) -> str:
        return self.destinations.jira_url

    # ----------------------------------------------------------------- steps

    def run(self, plan: jp.Plan) -> JourneyReport:
        o = self.options
        if self.destinations.operator:
            try:
                plan = jp.with_gateway_fault(plan)
            except ValueError as exc:
                # A short run has no room for the drills: it runs without them, and says so.
                self.echo(f"operator features skipped: {exc}")
            else:
                self.operator = Operator(plan, self.echo)
        report = JourneyReport(plan)
        t0 = time.monotonic()
        flow.create_topics(self.job_settings)
        traffic = KongTraffic.of(
            plan, broken_every=o.broken_every, batch_size=o.batch_size, workers=o.kong_workers
        )
        ingest_url = self._start_pipeline(report, t0)
        self._send_history(report, f"{ingest_url}/v1/kong", traffic)
        self._start_alerting(report)
        self._send_live(report, f"{ingest_url}/v1/kong", traffic)
        check_results(report, self.job_settings, traffic.entries)
        d = self.destinations
        if d.local_slack and d.local_jira:  # what the local ones received can be read
            report.checks += breakdown_checks(report, slack_url=d.slack_url, jira_url=d.jira_url)
        if self.operator is not None:
            self._go_blind(report, f"{ingest_url}/v1/kong")
        report.timings["total_s"] = time.monotonic() - t0
        return report

    def _start_pipeline(self, report: JourneyReport, t0: float) -> str:
        """The ingest service, the local Slack and Jira, and the drift job (submitted
        meanwhile) up and running; the ingest service's URL."""
        o = self.options
        submission = Submission(self.stack.flink.address, self.job_settings)
        submission.start()
        ingest_url = self._start_ingest(report)
        # The local Slack posts clicks to the alerting service: its port, chosen now.
        self.alerting_port = pick_port(o.ports["alerting"])
        report.addresses.update(
            self.destinations.start_local(
                self.services,
                slack_port=o.ports["slack"],
                jira_port=o.ports["jira"],
                pagerduty_port=o.ports.get("pagerduty", 0),
                interactivity_url=f"http://127.0.0.1:{self.alerting_port}/slack/interactions",
            )
        )
        self.job_id = submission.job_id()
        report.addresses["flink"] = self.stack.flink.rest_url
        wait_running(self.stack.flink.address, self.job_id, o.timeout_s)
        self.echo(
            f"[2/6] drift job {self.job_id} running on the session cluster "
            f"{self.stack.flink.rest_url} ({time.monotonic() - t0:.0f}s)"
        )
        return ingest_url

    def _start_ingest(self, report: JourneyReport) -> str:
        # Each Kong worker presents its own gateway's token (no anonymous writers).
        self.ingest_tokens, credentials = new_ingest_credentials(
            self.run_dir, self.options.kong_workers
        )
        url = start_ingest(
            self.services, self.job_settings, self.options.ports["ingest"], credentials
        )
        report.addresses["ingest"] = (
            f"{url}/v1/kong (metrics {url}/metrics), gateway credentials in {credentials}"
        )
        self.echo(f"[1/6] ingest service on {url}")
        return url

    def _send_history(self, report: JourneyReport, url: str, traffic: KongTraffic) -> None:
        """The history as one backlog, then baselines fitted on the job's windows of it."""
        o, plan = self.options, report.plan
        t = time.monotonic()
        stats = asyncio.run(
            send_batches(url, traffic.history_batches, workers=1, token=self.ingest_tokens)
        )
        report.count(stats)
        self.echo(
            f"[3/6] history: {o.history_minutes} min of traffic for {len(plan.doc_types)} doc "
            f"types, {stats.sent} Kong entries in {len(traffic.history_batches)} batches of up "
            f"to {o.batch_size} ({stats.accepted} accepted, {stats.rejected} dead-lettered) in "
            f"{time.monotonic() - t:.1f}s"
        )
        t = time.monotonic()
        fitted = fit_history_baselines(self.job_settings, plan.live_start_ms, o.timeout_s)
        self.echo(
            f"[4/6] baselines fitted on the history's windows: {fitted} "
            f"({time.monotonic() - t:.1f}s)"
        )

    def _start_alerting(self, report: JourneyReport) -> None:
        extra = None
        if self.operator is not None:
            extra = self.operator.alerting_settings(
                self.alerting_base.policy.rules, self.job_settings.job.group_id
            )
        common: dict[str, Any] = {
            "services": self.services,
            "job": self.job_settings,
            "destinations": self.destinations,
            "group_id": f"anchorwatch-demo-{self.run_id}",
            "update_interval_s": self.options.update_interval_s,
        }
        port = self.alerting_port or self.options.ports["alerting"]
        if self.options.alerting_instances < 2:
            url = start_alerting(**common, port=port, state_dir=self.state_dir, extra=extra)
        else:
            # The leader first, on a port of its own; then the standby on the demo's
            # alerting port, which takes clicks and silences whoever leads (sharing the
            # work: two alike, each owning some verdict partitions).
            split = self.options.alerting_work_split
            self.pair = AlertingPair(self.services, self.run_dir, self.echo, work_split=split,
                                     every_feature=self.operator is not None)  # fmt: skip
            self.state, shared = self.pair.start_database(self.state_dir)
            both = {**(extra or {})}
            for section, fields in shared.items():
                both[section] = {**both.get(section, {}), **fields}

            def start(name: str, at: int, standby: bool) -> str:
                return start_alerting(**common, port=at, state_dir=self.state_dir / name,
                                      extra=both, name=name, standby=standby)  # fmt: skip

            partitions = self.job_settings.topics.partitions
            url = self.pair.start_instances(start, port, partitions)
            server = self.pair.server
            assert server is not None
            report.addresses["postgres"] = (
                f"{self.state.describe()} (the alerting state; pid {server.pid}, data "
                f"{server.data_dir})"
            )
        self.alerting_url = url
        report.addresses["alerting"] = f"{url}/metrics"

    def _send_live(self, report: JourneyReport, url: str, traffic: KongTraffic) -> None:
        """The live span on the replay clock, each incident printed as alerting posts it,
        until every incident is resolved and delivered (or the wait is over)."""
        o, plan = self.options, report.plan
        self.echo(
            f"[5/6] live: {o.live_minutes} min of traffic at {o.speed:g}x "
            f"({len(traffic.live_batches)} batches from {o.kong_workers} Kong workers), "
            f"{len(plan.labels)} labelled incidents:"
        )
        for line in label_lines(plan, self.operator):
            self.echo(line)
        clock = ReplayClock(plan.live_start_ms, time.time() + 1.0, o.speed)
        report.timings["origin_wall"] = clock.origin_wall_s
        on_posted = None
        if self.operator is not None:
            self.operator.add_silence(self.alerting_url, clock)
            operator, slack = self.operator, self.destinations.slack_url
            on_posted = lambda iid, doc, refs: operator.maybe_ack(slack, iid, doc, refs)  # noqa: E731
        watcher = IncidentWatcher(self.state, self.destinations, clock, self.echo, on_posted)
        if self.pair is not None and o.kill_alerting_leader:
            # Late in the live span (minute 24 of 34 by default): among the resolutions,
            # before the gateway fault. Earlier, the takeover's few seconds (minutes of
            # event time at 30x) would swallow a data-quality incident's whole breach while
            # it waits for its group, and the end check wants progress updates to count.
            self.pair.kill_leader_after(KILL_AT * o.live_minutes * 60 / o.speed)
        self.watcher = watcher
        with watcher.watching(report):
            stats = asyncio.run(
                send_batches(
                    url,
                    traffic.live_batches,
                    workers=o.kong_workers,
                    token=self.ingest_tokens,
                    clock=clock,
                )
            )
            report.count(stats)
            report.timings["live_request_p99_s"] = jp.quantile(stats.request_s, 0.99)
            # Verdicts still in flight may open or resolve incidents: wait until every
            # incident is resolved and delivered (a false one that never resolves is reported).
            deadline = time.monotonic() + o.timeout_s
            patience = time.monotonic() + 20  # for a label still without its alert
            while time.monotonic() < deadline and not self._settled(
                report, patience_over=time.monotonic() > patience
            ):
                time.sleep(0.5)
        watcher.look(report)

    def _go_blind(self, report: JourneyReport, url: str) -> None:
        """The drift job killed while Kong keeps sending, until the watchdog's notice is
        in Slack; then every operator feature's check."""
        assert self.operator is not None
        assert self.watcher is not None
        d, watcher = self.destinations, self.watcher

        def kill() -> None:
            if self.job_id is not None:
                cancel(self.stack.flink.address, self.job_id)

        self.echo("        blindness: the drift job is killed; Kong keeps sending")
        self.operator.go_blind(
            kill,
            report.plan,
            url,
            self.ingest_tokens,
            lambda: watchdog_notice(watcher, report, d.slack_url),
            workers=self.options.kong_workers,
            batch_size=self.options.batch_size,
        )
        watcher.look(report)
        report.checks += operator_checks(
            report,
            self.operator,
            slack_url=d.slack_url,
            jira_url=d.jira_url,
            pagerduty_url=d.pagerduty_url,
            outbox=self._outbox,
        )

    def _outbox(self, incident_id: str) -> list[dict[str, Any]]:
        from anchorwatch.alerting.store import Store

        store = Store(self.state, create=False)
        try:
            with store.reading():
                return store.outbox_rows(incident_id)
        finally:
            store.close()

    def _settled(self, report: JourneyReport, *, patience_over: bool) -> bool:
        if self.pair is None:
            self.services.check("alerting")
        else:
            if self.pair.failure:
                raise JourneyError(self.pair.failure)
            if not self.pair.killing.is_set():  # one is down between its kill and restart
                for name in list(self.pair.urls):  # a third may be joining
                    self.services.check(name)
            if self.pair.takeover_s is not None:
                report.timings["alerting_takeover_s"] = self.pair.takeover_s
        return settled(report, patience_over=patience_over)

    # ----------------------------------------------------------------- teardown

    def stop(self, *, keep_topics: bool = False) -> None:
        if self.job_id is not None:
            cancel(self.stack.flink.address, self.job_id)
        self.services.stop()
        if self.pair is not None:
            self.pair.stop()
        if not keep_topics:
            flow.delete_topics(self.job_settings)
