"""The alerting service driven by hand, without Kafka, shared by the unit tests of the service,
its exactly-once delivery and its endpoint: an engine and its senders on one state directory,
an in-memory verdict log, a manual clock and crashes at chosen points (Harness), the settings
it runs with (settings_for), and the check that one incident went through its whole
lifecycle once in Slack, Jira and the drift events (assert_one_clean_lifecycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

import orjson
import requests
from prometheus_client import CollectorRegistry
from slack_sdk.web import WebClient

from anchorwatch.alerting.crash import CrashPoints
from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.integrations import registry
from anchorwatch.alerting.integrations.base import BatchSender, Delivered, Sender
from anchorwatch.alerting.integrations.dry_run import DryRunSender
from anchorwatch.alerting.integrations.jira.sender import JiraSender
from anchorwatch.alerting.integrations.slack.notifier import SlackNotifier, SlackWebhookNotifier
from anchorwatch.alerting.integrations.slack.sender import SlackSender, SlackWebhookSender
from anchorwatch.alerting.notify import ManualClock, NotifyError, OneAttempt
from anchorwatch.alerting.outbox import Drainer
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import OutboxEntry, Store
from anchorwatch.contracts import encode
from tests.support.alerting import POLICY, SLACK_TOKEN, slack_threads

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
TOPIC = "verdicts"
#: The paging receivers: in the run when their settings turn them on, with their real senders.
PAGING = ("pagerduty", "webhook")


class Crash(BaseException):
    """The process dying: nothing after the hook runs, nothing catches it."""


@dataclass
class RecordingEvents:
    """The events integration without Kafka (the integration tests use the real topic)."""

    integration: str = "events"
    sent: list[dict[str, Any]] = field(default_factory=list)

    def bind(self, store: Store) -> None:
        pass

    def close(self) -> None:
        pass

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]:
        self.sent += [e.payload["event"] for e in entries]
        return {e.id: Delivered("sent") for e in entries}


def settings_for(
    tmp_path: Path, slack: LocalSlack | None, jira: LocalJira | None, **alerting: Any
) -> AlertingSettings:
    return AlertingSettings.load(
        alerting={"state_dir": tmp_path / "state", "update_interval_s": 120, **alerting},
        policy=POLICY,
        slack=(
            {"mode": "bot", "api_url": slack.api_url, "bot_token": SLACK_TOKEN}
            if slack
            else {"mode": "off"}
        ),
        jira={"enabled": True, "url": jira.url, "comment_interval_s": 0}
        if jira
        else {"enabled": False},
        retry={"max_attempts": 3, "max_elapsed_s": 30, "base_delay_s": 1, "max_delay_s": 60},
    )


class Harness:
    """Engine and senders on one state directory, a partitioned in-memory verdict log, and
    a manual clock. ``restart`` is what a process restart does."""

    def __init__(
        self,
        settings: AlertingSettings,
        clock: ManualClock,
        *,
        crash: str | None = None,
        dry_run: bool = False,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.log: dict[int, list[bytes]] = {}
        self.events = RecordingEvents()
        self.dry_run = dry_run
        self.crashes = 0
        self._start(crash)

    def _raise(self) -> None:
        self.crashes += 1
        raise Crash

    def _start(self, crash: str | None) -> None:
        s = self.settings
        self.registry = CollectorRegistry()
        self.metrics = ServiceMetrics(self.registry)
        hook = CrashPoints(crash, action=self._raise)
        integrations: list[str] = []
        if s.slack.mode != "off":
            integrations.append("slack")
        if s.jira.enabled:
            integrations.append("jira")
        integrations += [n for n in PAGING if registry.BY_NAME[n].enabled(s)]
        integrations.append("events")
        self.store = Store(s.alerting.state_dir)
        self.engine = Engine(
            s, self.store, self.metrics, integrations, clock=self.clock, crash=hook
        )
        self.drainers: list[Drainer] = []
        for integration in integrations:
            self.drainers.append(
                Drainer(
                    self._delivery(integration),
                    Store(s.alerting.state_dir),
                    self._retry(),
                    self.metrics,
                    clock=self.clock,
                    crash=hook,
                )
            )

    def _retry(self) -> Any:
        return self.settings.retry.policy(sleep=self.clock.sleep, clock=self.clock)

    def _delivery(self, integration: str) -> Sender | BatchSender:
        s = self.settings
        if self.dry_run:
            return DryRunSender(registry.BY_NAME[integration], s)
        if integration == "events":
            return self.events
        # As the service does: one attempt per call, the drainer retries.
        caller = OneAttempt(clock=self.clock)
        if integration == "jira":
            return JiraSender.from_settings(
                s.jira, caller, clock_ms=self.clock.ms, routing=s.routing
            )
        if integration in PAGING:
            return registry.BY_NAME[integration].sender(s, caller)
        if s.slack.mode == "webhook":
            return SlackWebhookSender(SlackWebhookNotifier.from_settings(s.slack, caller))
        client = WebClient(token=SLACK_TOKEN, base_url=s.slack.api_url, retry_handlers=[])
        notifier = SlackNotifier(
            client, s.routing, caller, chart_renderer=lambda p, t: PNG, buttons=s.slack.buttons
        )
        return SlackSender(notifier, s.routing)

    def restart(self) -> None:
        self.engine.close()  # its store and silence book
        for d in self.drainers:
            d._store.close()
        self._start(None)

    @staticmethod
    def partition_of(doc_type: str) -> int:
        return sum(doc_type.encode()) % 2

    def publish(self, verdicts: Sequence[Any]) -> None:
        """Append to the log, a doc type always to the same partition (keyed)."""
        for v in verdicts:
            raw = v if isinstance(v, bytes) else encode(v)
            key = 0 if isinstance(v, bytes) else self.partition_of(v.window.doc_type)
            self.log.setdefault(key, []).append(raw)

    def consume(self, batch_max: int = 500) -> None:
        """Everything not yet committed, in batches, from the stored offsets, the
        partitions interleaved as a consumer fetching them together sees them."""
        while True:
            pending = []
            for p, records in sorted(self.log.items()):
                start = self.engine.offsets.get((TOPIC, p), 0)
                pending.append(
                    [RawMessage(TOPIC, p, start + i, raw) for i, raw in enumerate(records[start:])]
                )
            messages = [m for group in zip_longest(*pending) for m in group if m is not None]
            if not messages:
                return
            self.engine.process(messages[:batch_max], self.clock.ms())

    def drain(self) -> None:
        for drainer in self.drainers:
            for _ in range(1000):
                wait = drainer.drain_once()
                if wait is None or wait > 0:
                    break

    def run(self, rounds: int = 20) -> None:
        """Consume and drain until done, restarting after a crash; the clock moves on."""
        for _ in range(rounds):
            try:
                self.consume()
                self.drain()
            except Crash:
                self.restart()
                continue
            if all(r["status"] in ("done", "failed") for r in self.store.outbox_rows()):
                return
            self.clock.now += 70
        raise AssertionError("the outbox did not drain")

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def issues(server: LocalJira) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = requests.get(f"{server.url}/_local/issues", timeout=5).json()[
        "issues"
    ]
    return found


def posted(server: LocalSlack) -> list[dict[str, Any]]:
    """Messages the bot posted (not file shares)."""
    return [m for m in server.messages if m.get("subtype") is None]


def assert_one_clean_lifecycle(
    h: Harness, slack: LocalSlack, jira: LocalJira, doc: str, first_minute: int = 0
) -> None:
    """The incident of ``lifecycle(doc, first_minute)``: one thread, replies in order, one
    ticket with its comments in order and Done, three distinct drift events."""
    escalated, progressed = f"14:{first_minute + 3:02d}", f"14:{first_minute + 5:02d}"
    rows = [r for r in h.store.list_incidents(open_only=False, limit=1000) if r.row.doc_type == doc]
    assert len(rows) == 1
    incident_id = rows[0].row.incident_id
    label = incident_label(incident_id)
    messages = posted(slack)
    parents = [m for m in messages if not m["thread_ts"] and doc in _doc(m)]
    assert len(parents) == 1, parents
    parent = parents[0]
    assert parent["params"]["metadata"]["event_payload"]["incident_label"] == label
    replies = [m["text"] for m in slack_threads(messages).get(parent["ts"], [])]
    assert len(replies) == 3, replies
    assert replies[0].startswith("Update")
    assert escalated in replies[0]
    assert replies[1].startswith("Update")
    assert progressed in replies[1]
    assert replies[2].startswith("Resolved")
    assert parent["text"].startswith("[CRITICAL] Drift resolved")  # edited in place
    if h.settings.slack.charts:
        # Each update's chart once, right after its reply, whatever cut the two apart.
        thread = slack_threads(slack.messages)[parent["ts"]]
        shape = ["chart" if m.get("files") else m["text"].split(" ")[0] for m in thread]
        assert shape == ["Update", "chart", "Update", "chart", "Resolved:"], shape
        names = [slack.files[f]["name"] for m in thread for f in m.get("files", [])]
        assert len(set(names)) == 2, names
    tickets = [i for i in issues(jira) if label in i["fields"]["labels"]]
    assert len(tickets) == 1
    comments = tickets[0]["comments"]
    assert [c.split(",")[0].split(" ")[0] for c in comments] == ["Update", "Update", "Resolved"]
    assert escalated in comments[0]
    assert progressed in comments[1]
    assert tickets[0]["fields"]["status"]["name"] == "Done"
    # Drift events may repeat after a crash: consumers deduplicate by event id.
    events = {e["event_id"]: e for e in h.events.sent if e["incident_id"] == incident_id}
    assert [e["event_type"] for e in events.values()] == [
        "ANCHOR_DRIFT_ALERT",
        "ANCHOR_DRIFT_ALERT",
        "ANCHOR_DRIFT_RESOLVED",
    ]


def _doc(message: dict[str, Any]) -> str:
    return orjson.dumps(message["blocks"]).decode() + str(message["text"])
