"""The fault campaign's operator trials (bench/faults.py, kinds ``silence-expiry`` and
``ack-crash``): what people do to an incident, while the alerting service crashes where it
applies it. The service runs as the process it is in production (`anchorwatch alerting
serve`, settings in its environment) on verdicts of the trial's own topics, posting to the
local Slack, Jira and PagerDuty; it is started again after each crash, as a supervisor does.

- a silence expiring during a restart: a silence of one doc type made over the service's
  HTTP API (``POST /api/v1/silences``); that type's incident opens, escalates and is held;
  the service is stopped, the silence ends while it is down, and the next runs crash at
  ``release_before_commit`` and then at one send of the post it releases;
- a crash between an acknowledgement and its Jira comment: Slack's Acknowledge clicked on
  the incident's parent (the local Slack posts the ``block_actions`` payload signed to
  ``/slack/interactions``, as Slack does); the run crashes at ``ack_before_commit``, the
  next one between the acknowledgement applied and its Jira comment marked done.

Another doc type nobody touches runs alongside. The trial then feeds the rest of the
verdicts (the incidents resolve) and counts, per incident, Slack parents and replies, Jira
tickets and comments and PagerDuty events against ``OPERATOR_EXPECTED``: lost and doubled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY, LocalPagerDuty
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.integrations.pagerduty import dedup_key
from anchorwatch.alerting.integrations.slack.render import ACK
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.store import Store, StoreError
from anchorwatch.contracts import Verdict
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.processes import free_port
from bench.fault_plan import (
    OPERATOR_EXPECTED,
    OPERATOR_SCENARIOS,
    OperatorCount,
    TrialSpec,
    count_operator,
    notification_kinds,
)
from tests.support.alerting import POLICY, SLACK_TOKEN, lifecycle
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    produce,
    ready,
    service_config,
    service_env,
)
from tests.support.waiting import wait_until

SIGNING_SECRET: Final = "faults-signing-secret-0123456789"  # noqa: S105 (the local Slack's)
API_TOKEN: Final = "faults-api-token-0123456789"  # noqa: S105 (a trial's own service)
#: The doc type of each incident role of OPERATOR_EXPECTED.
DOC_TYPES: Final = {
    "silenced": "op-silenced",
    "acknowledged": "op-acknowledged",
    "untouched": "op-untouched",
}
#: Per scenario: its incident roles, and how many verdicts of each type come before the
#: operator acts (held through its escalation and first critical windows; acknowledged once
#: escalated, so the progress update after it is not posted).
_ROLES: Final = {
    "silence-expiry": (("silenced", "untouched"), 5),
    "ack-crash": (("acknowledged", "untouched"), 4),
}
#: A run armed at a point is given this long to reach it (its work is all there).
CRASH_WAIT_S: Final = 45


@dataclass
class OperatorOutcome:
    scenario: str
    count: OperatorCount = field(default_factory=OperatorCount)
    crashed_at: list[str] = field(default_factory=list)  # the points reached, in order
    pagerduty_resends: int = 0  # events sent again, folded by their dedup key (absorbed)
    restarts: int = 0
    detail: str = ""
    problems: list[str] = field(default_factory=list)


class Supervised:
    """One trial's service process, started again after each crash, with the settings that
    turn on the silences API, Slack's buttons and PagerDuty."""

    def __init__(
        self,
        job: JobSettings,
        state: Path,
        log: Path,
        slack: LocalSlack,
        jira: LocalJira,
        pagerduty: LocalPagerDuty,
        port: int,
    ) -> None:
        config = service_config(job, state, slack, jira, api_token=API_TOKEN, metrics_port=port)
        config["policy"] = POLICY  # the lifecycle escalates on its first critical window
        config["slack"]["signing_secret"] = SIGNING_SECRET
        config["pagerduty"] = {
            "enabled": True,
            "url": pagerduty.enqueue_url,
            "routing_key": LOCAL_ROUTING_KEY,
        }
        # No drift job here: without its group, confluent-kafka 2.16.1's
        # list_consumer_group_offsets (the watchdog's stalled-consumer signal) segfaults.
        config["watchdog"] = {"job_group_id": ""}
        self.config, self.state, self.log = config, state, log
        self.env = service_env(config)
        self.url = f"http://127.0.0.1:{port}"
        self.process: ServiceProcess | None = None
        self.starts = 0

    def start(self, crash_at: str | None = None) -> None:
        self.process = ServiceProcess(self.env, self.log, crash_at=crash_at)
        self.starts += 1
        wait_until(lambda: self._dead() or ready(self.config), 60, "the service to be ready")

    def _dead(self) -> bool:
        return self.process is None or self.process.process.poll() is not None

    def crashed(self, point: str) -> bool:
        """Whether the run armed at ``point`` died there (SIGKILL) within CRASH_WAIT_S."""
        assert self.process is not None
        code = self.process.wait(CRASH_WAIT_S)
        if code is None:
            self.process.kill9()
            return False
        self.process.kill9()  # closes its log
        return code == -9

    def stop(self) -> None:
        if self.process is not None and not self._dead():
            code = self.process.stop()
            if code != 0:
                raise RuntimeError(f"the service exited {code} on SIGTERM: see {self.log}")
        elif self.process is not None:
            self.process.kill9()
        self.process = None

    def settle(self, produced: int, what: str) -> None:
        def done() -> bool:
            if self._dead():  # an unplanned death: say so now, not after the timeout
                code = self.process.process.poll() if self.process else None
                raise RuntimeError(f"the service died (exit {code}) before {what}: {self.log}")
            return delivered_everything(self.state, produced)

        wait_until(done, 90, what)

    def rows(self) -> dict[str, Any]:
        """The incidents of the state by doc type."""
        try:
            store = Store(self.state, create=False)
        except StoreError:
            return {}
        try:
            return {i.row.doc_type: i for i in store.list_incidents(open_only=False, limit=100)}
        finally:
            store.close()


@contextmanager
def local_servers(port: int) -> Iterator[tuple[LocalSlack, LocalJira, LocalPagerDuty]]:
    """The local Slack (its buttons posting to the service on ``port``), Jira, PagerDuty."""
    url = f"http://127.0.0.1:{port}/slack/interactions"
    with (
        LocalSlack(token=SLACK_TOKEN, interactivity_url=url, signing_secret=SIGNING_SECRET) as s,
        LocalJira() as j,
        LocalPagerDuty() as p,
    ):
        yield s, j, p


def _verdicts(roles: Sequence[str], part: slice) -> list[Verdict]:
    """Each role's lifecycle (``part`` of it), window by window as the drift job writes."""
    chosen = [v for r in roles for v in lifecycle(DOC_TYPES[r])[part]]
    return sorted(chosen, key=lambda v: v.window.window_start_ms)


def run_operator_trial(
    job: JobSettings, spec: TrialSpec, work_dir: Path, *, silence_s: int = 12
) -> OperatorOutcome:
    """The trial of ``spec`` (an OPERATOR_SCENARIOS kind) on ``job``'s topics, which must be
    its own (created, empty); ``silence_s``: how long the silence lasts."""
    out = OperatorOutcome(spec.fault)
    roles, before = _ROLES[spec.fault]
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with local_servers(port) as (slack, jira, pagerduty):
        service = Supervised(
            job, work_dir / "state", work_dir / "service.log", slack, jira, pagerduty, port
        )
        try:
            if spec.fault == "silence-expiry":
                _silence_expiry(service, job, spec, out, before, silence_s)
            else:
                _ack_crash(service, job, spec, out, slack, before)
            # The rest of the lifecycle: the incidents resolve.
            produced = len(_verdicts(roles, slice(None)))
            produce(job, _verdicts(roles, slice(before, None)))
            service.settle(produced, "the incidents to resolve everywhere")
        except Exception as exc:  # counted below all the same: what was lost shows
            out.problems.append(f"trial failed: {type(exc).__name__}: {exc}")
        try:
            service.stop()
        except RuntimeError as exc:  # a stop that failed is a finding, not the end
            out.problems.append(str(exc))
        out.restarts = service.starts - 1
        rows = service.rows()
        messages = slack.messages
        issues = _get(f"{jira.url}/_local/issues")["issues"]
        events = _get(f"{pagerduty.url}/_local/events")["events"]
        alerts = _get(f"{pagerduty.url}/_local/alerts")["alerts"]
    got = {}
    for role in roles:
        found = rows.get(DOC_TYPES[role])
        if found is None:
            out.problems.append(f"{role}: no incident of {DOC_TYPES[role]}")
            continue
        key = dedup_key(found.row.incident_id)
        got[role] = notification_kinds(
            incident_label(found.row.incident_id), key, messages, issues, alerts
        )
        changes = sum(k.startswith("pagerduty ") for k in got[role])
        out.pagerduty_resends += sum(e.get("dedup_key") == key for e in events) - changes
    out.count = count_operator({r: OPERATOR_EXPECTED[r] for r in roles}, got)
    out.problems += out.count.problems
    return out


def _silence_expiry(
    service: Supervised,
    job: JobSettings,
    spec: TrialSpec,
    out: OperatorOutcome,
    before: int,
    silence_s: int,
) -> None:
    roles = _ROLES[spec.fault][0]
    service.start()
    body = {
        "doc_type": DOC_TYPES["silenced"],
        "duration": f"{silence_s}s",
        "reason": "fault campaign: ends during a restart",
        "author": "bench",
    }
    answer = requests.post(
        f"{service.url}/api/v1/silences",
        json=body,
        headers={"Authorization": f"Bearer {API_TOKEN}"},
        timeout=10,
    )
    answer.raise_for_status()
    ends_s = answer.json()["ends_ms"] / 1000
    produced = produce(job, _verdicts(roles, slice(None, before)))
    service.settle(produced, "the first verdicts decided and delivered")
    wait_until(
        lambda: bool(service.rows()[DOC_TYPES["silenced"]].row.held_by),
        30,
        "the silenced incident, held",
    )
    service.stop()  # the restart begins; the silence ends meanwhile
    stopped_s = time.time()
    if stopped_s >= ends_s:
        raise RuntimeError(f"the silence ended before the restart: give it more than {silence_s}s")
    time.sleep(ends_s - stopped_s + 0.5)
    _crash_in_turn(service, spec.crash_points, out)
    service.start()
    wait_until(
        lambda: not service.rows()[DOC_TYPES["silenced"]].row.held_by,
        30,
        "the held incident, released",
    )
    service.settle(produced, "the released post delivered")
    out.detail = (
        f"silence of {silence_s}s ended {ends_s - stopped_s:.1f}s into the restart; crashed at "
        f"{', '.join(out.crashed_at) or 'no point'}"
    )


def _ack_crash(
    service: Supervised,
    job: JobSettings,
    spec: TrialSpec,
    out: OperatorOutcome,
    slack: LocalSlack,
    before: int,
) -> None:
    roles = _ROLES[spec.fault][0]
    first, *rest = spec.crash_points
    produced = produce(job, _verdicts(roles, slice(None, before)))
    service.start(crash_at=first)  # an acknowledgement is all that reaches it
    service.settle(produced, "the first verdicts decided and delivered")
    label = incident_label(service.rows()[DOC_TYPES["acknowledged"]].row.incident_id)
    (parent,) = [
        m
        for m in slack.messages
        if not m.get("thread_ts")
        and (m.get("params") or {})
        .get("metadata", {})
        .get("event_payload", {})
        .get("incident_label")
        == label
    ]
    click = {"channel": parent["channel"], "ts": parent["ts"], "action_id": ACK}
    answer = requests.post(f"{slack.url}/_local/click", json=click, timeout=10).json()
    if answer.get("status") != 200:
        raise RuntimeError(f"the signed click was refused: {answer}")
    _reached(service, first, out)
    _crash_in_turn(service, rest, out)
    service.start()
    wait_until(
        lambda: bool(service.rows()[DOC_TYPES["acknowledged"]].row.acked_by),
        30,
        "the acknowledgement, applied",
    )
    service.settle(produced, "the acknowledgement's notifications delivered")
    out.detail = (
        f"acknowledged by a signed click ({answer['answer'].get('text')}); crashed at "
        f"{', '.join(out.crashed_at) or 'no point'}"
    )


def _crash_in_turn(service: Supervised, points: Sequence[str], out: OperatorOutcome) -> None:
    """One run armed at each point, in turn, each left to die there."""
    for point in points:
        service.start(crash_at=point)
        _reached(service, point, out)


def _reached(service: Supervised, point: str, out: OperatorOutcome) -> None:
    if service.crashed(point):
        out.crashed_at.append(point)
    else:
        out.problems.append(f"crash point {point} never reached")
    service.process = None


def _get(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


# --------------------------------------------------------------------------- the output


def operator_line(spec: TrialSpec, out: OperatorOutcome, total: int, seconds: float) -> str:
    """The trial's line in the campaign's output."""
    c = out.count
    return (
        f"trial {spec.index + 1}/{total} {spec.describe()}: {out.detail or 'did not finish'}; "
        f"{c.expected} notifications expected for {c.incidents} incidents (Slack posts and "
        f"replies, Jira tickets and comments, PagerDuty events), lost {c.lost}, doubled "
        f"{c.doubled}; absorbed: {out.pagerduty_resends} PagerDuty events sent again (folded by "
        f"dedup key); restarts {out.restarts}; {seconds:.0f}s"
    )


def operator_summary(outcomes: Sequence[tuple[TrialSpec, OperatorOutcome]]) -> str:
    """One line over the operator trials, per scenario (printed before the final line)."""
    parts = []
    for fault, name in OPERATOR_SCENARIOS.items():
        mine = [o for s, o in outcomes if s.fault == fault]
        if mine:
            parts.append(
                f"{name}: {len(mine)} trials, {sum(o.count.expected for o in mine)} "
                f"notifications, lost {sum(o.count.lost for o in mine)}, doubled "
                f"{sum(o.count.doubled for o in mine)}"
            )
    return "operator paths: " + "; ".join(parts)
