"""The watchdog's notice through the service's outbox (without Kafka: the harness of
tests/support/alerting_harness.py with the real Slack and Jira clients against the local
servers, and the probe's samples made by hand): posted once as a notice (not as a drift
alert), updated in its thread, kept across a restart without a second post, listed open
while open, acknowledged from Slack, resolved when verdicts come back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlencode

import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack_interactions import signed_headers
from anchorwatch.alerting.integrations.slack.render import ACK
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.slack_actions import SlackInteractions
from anchorwatch.alerting.watchdog_post import (
    META_KEY,
    WATCHDOG_DOC_TYPE,
    headline,
)
from anchorwatch.alerting.watchdog_probe import Sample
from anchorwatch.alerting.watchdog_run import WatchdogRunner
from anchorwatch.cli.alerting import alerting
from tests.support.alerting import LocalSlackWithHistory, parents_by_label, slack_threads, verdict
from tests.support.alerting_harness import Harness, issues, posted, settings_for

TYPES = {"invoice": 0, "receipt": 1}
INTEGRATIONS = ["slack", "jira", "events"]


class Feed:
    """The probe's samples: the given types arrive on every check."""

    def __init__(self) -> None:
        self.ends = {0: 0, 1: 0}
        self.arriving: dict[str, int] = dict(TYPES)

    def __call__(self) -> Sample:
        for p in self.arriving.values():
            self.ends[p] += 250
        return Sample(dict(self.arriving), dict(self.ends), None, 10)


class World:
    """The watchdog on the harness's engine, as the service runs it: its poster hands the
    notice's rows to the engine (``NoticePoster(follow=...)``)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.feed = Feed()
        self.minute = 0
        self.registry = CollectorRegistry()
        self.runner = self._runner()

    def _runner(self) -> WatchdogRunner:
        return WatchdogRunner(
            self.h.settings,
            self.h.engine,
            INTEGRATIONS,
            self.registry,
            clock=self.h.clock,
            probe=self.feed,
        )

    def restart(self) -> None:
        self.h.restart()
        self.registry = CollectorRegistry()
        self.runner = self._runner()

    def run(self, seconds: int, *, judged: bool) -> None:
        """Checks every 10 s; with ``judged`` a verdict per type every minute."""
        for _ in range(seconds // 10):
            self.h.clock.now += 10
            if judged and int(self.h.clock.now) % 60 < 10:
                self.h.publish([verdict(d, self.minute, 0.5) for d in TYPES])
                self.minute += 1
                self.h.consume()
            self.runner.probe_once()
            self.runner.tick(self.h.clock.ms())
            self.h.drain()

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


def _listed(h: Harness) -> dict[str, str]:
    """The notice as ``alerting incidents --all --json`` lists it: doc type, state."""
    state = str(h.settings.alerting.state_dir)
    out = CliRunner().invoke(alerting, ["incidents", "--all", "--json", "--state-dir", state])
    assert out.exit_code == 0, out.output
    rows = [orjson.loads(line) for line in out.output.splitlines()]
    return {r["doc_type"]: r["state"] for r in rows if r["rule"] == "watchdog"}


def _notices(slack: LocalSlackWithHistory) -> list[dict[str, object]]:
    """The notice's parent messages (as posted, or edited once resolved)."""
    return [
        m
        for m in posted(slack)
        if not m["thread_ts"] and re.search("cannot see|sees again", str(m["text"]))
    ]


def test_the_notice_is_posted_once_survives_a_restart_and_resolves(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    w = World(h)
    w.run(300, judged=True)
    assert _notices(slack) == []
    assert w.value("anchorwatch_alerting_watchdog_checks_total", outcome="seeing") > 0

    # The drift job dies: snapshots keep arriving, no verdicts.
    w.run(180, judged=False)
    notices = _notices(slack)
    assert len(notices) == 1
    text, blocks = str(notices[0]["text"]), orjson.dumps(notices[0]["blocks"]).decode()
    assert text == "[CRITICAL] anchorwatch cannot see 2 doc types: `invoice`, `receipt` (open)"
    assert "no_verdicts" in blocks
    assert "no verdicts" in blocks
    assert "consumer group's lag" in blocks
    assert "Drift" not in text + blocks
    assert "mean drift" not in (text + blocks).lower()
    assert w.value("anchorwatch_alerting_blind_doc_types") == 2
    assert w.value("anchorwatch_alerting_watchdog_notices_total", kind="opened") == 1
    label = incident_label(orjson.loads(h.store.meta_get(META_KEY) or "{}")["incident_id"])
    tickets = [i for i in issues(jira) if label in i["fields"]["labels"]]
    assert len(tickets) == 1
    assert tickets[0]["fields"]["summary"] == (
        "[URGENT] anchorwatch cannot see 2 doc types: invoice, receipt"
    )
    assert "Drift alert" not in tickets[0]["fields"]["description"]
    alerts = [e for e in h.events.sent if e["doc_type"] == WATCHDOG_DOC_TYPE]
    assert [e["event_type"] for e in alerts] == ["ANCHOR_DRIFT_ALERT"]
    assert _listed(h) == {WATCHDOG_DOC_TYPE: "open"}

    # A restart while blind: the notice is neither posted again nor forgotten.
    w.restart()
    w.run(300, judged=False)
    assert len(_notices(slack)) == 1
    assert parents_by_label(posted(slack))[label] == 1
    assert w.value("anchorwatch_alerting_watchdog_notices_total", kind="opened") == 0
    assert _listed(h) == {WATCHDOG_DOC_TYPE: "open"}  # not closed by the engine's restart

    # Verdicts return: resolved, in the same thread and ticket.
    w.run(120, judged=True)
    assert len(_notices(slack)) == 1
    thread = slack_threads(posted(slack)).get(str(notices[0]["ts"]), [])
    assert [str(m["text"]).split(":")[0] for m in thread] == ["Resolved"]
    parent = next(m for m in slack.messages if m["ts"] == notices[0]["ts"])
    assert parent["text"] == (
        "[CRITICAL] anchorwatch sees again 2 doc types: `invoice`, `receipt` (resolved)"
    )
    assert _listed(h) == {WATCHDOG_DOC_TYPE: "resolved"}
    tickets = [i for i in issues(jira) if label in i["fields"]["labels"]]
    assert tickets[0]["fields"]["status"]["name"] == "Done"
    alerts = [e for e in h.events.sent if e["doc_type"] == WATCHDOG_DOC_TYPE]
    assert [e["event_type"] for e in alerts] == ["ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED"]
    assert h.store.meta_get(META_KEY) == ""
    assert w.value("anchorwatch_alerting_blind_doc_types") == 0

    # Sight stays: nothing more is posted.
    before = len(h.store.outbox_rows())
    w.run(600, judged=True)
    assert len(h.store.outbox_rows()) == before


def test_a_type_joining_is_an_update_in_the_same_thread(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    w = World(h)
    w.feed.arriving = {"invoice": 0}
    w.run(300, judged=False)
    assert len(_notices(slack)) == 1
    w.feed.arriving = {"invoice": 0, "late_type": 1}
    w.run(300, judged=False)
    notices = _notices(slack)
    assert len(notices) == 1
    replies = slack_threads(posted(slack)).get(str(notices[0]["ts"]), [])
    assert len(replies) == 1
    assert str(replies[0]["text"]).startswith("Update")
    parent = next(m for m in slack.messages if m["ts"] == notices[0]["ts"])
    assert "2 doc types: `invoice`, `late_type`" in str(parent["text"])  # edited in place


def test_the_headline_is_bounded_and_counts_the_rest() -> None:
    many = [f"type_{i:04d}" for i in range(500)]
    text = headline(many, 20)
    assert len(text) <= 200
    assert text.startswith("anchorwatch cannot see doc types type_0000, type_0001")
    shown = text.split("types ", 1)[1].split(" (+")[0].split(", ")
    assert text.endswith(f" (+{500 - len(shown)} more)")
    assert headline(many[:25], 3).endswith("type_0002 (+22 more)")
    assert len(headline(["x" * 400, "y" * 400], 20)) <= 200
    assert headline(["a\u202eb"], 20) == "anchorwatch cannot see doc types a\ufffdb"


@pytest.mark.parametrize("restart", [False, True])
def test_the_open_notice_is_acknowledged_from_slack_and_still_resolves(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    restart: bool,
) -> None:
    """The engine applies an acknowledgement of the notice it holds from the poster."""
    h = _signed_harness(tmp_path, slack, jira, clock)
    w = World(h)
    w.run(180, judged=False)
    (notice,) = _notices(slack)
    incident_id = str(orjson.loads(h.store.meta_get(META_KEY) or "{}")["incident_id"])
    assert _buttons(notice)[0] == ACK
    if restart:  # the poster hands the engine the open row it finds at the start
        w.restart()
        w.run(60, judged=False)

    assert _click(h, incident_id) == (200, {"ok": True, "text": "acknowledged by <@U0ANA>"})
    assert h.engine.apply_acks(h.clock.ms()) == 1
    h.drain()
    replies = slack_threads(posted(slack))[str(notice["ts"])]
    assert [m["text"] for m in replies] == ["Acknowledged by <@U0ANA>"]
    parent = next(m for m in slack.messages if m["ts"] == notice["ts"])
    assert str(parent["text"]).startswith("[CRITICAL] anchorwatch cannot see 2 doc types")
    assert "Acknowledged by <@U0ANA>" in orjson.dumps(parent["blocks"]).decode()
    assert ACK not in _buttons(parent)
    (ticket,) = issues(jira)
    assert ticket["comments"][-1].startswith("Acknowledged by ana (Slack user U0ANA)")
    row = h.store.incident(incident_id)
    assert row is not None
    assert (row.state, row.acked_by) == ("open", "U0ANA")

    # A type joins, then sight returns: posted after the acknowledgement's entries, the
    # acknowledgement kept on the row and on the parent.
    w.feed.arriving = {**TYPES, "late_type": 0}
    w.run(120, judged=False)
    w.feed.arriving = dict(TYPES)  # late_type stops arriving: forgotten after 15 min
    w.run(1_000, judged=True)
    entries = h.store.outbox_rows(incident_id)
    assert all(r["status"] == "done" for r in entries)
    seqs = sorted({(r["seq"], r["kind"]) for r in entries})
    kinds = [k for _, k in seqs]  # each seq once: no entry of the notice overwrote another
    assert len({q for q, _ in seqs}) == len(seqs)
    assert kinds[:2] == ["opened", "acknowledged"]
    assert kinds[-1] == "resolved"
    assert set(kinds[2:-1]) == {"updated"}  # late_type joined (and left)
    replies = slack_threads(posted(slack))[str(notice["ts"])]
    firsts = [str(m["text"]).split(" ")[0] for m in replies]
    assert firsts[0] == "Acknowledged"
    assert firsts[-1] == "Resolved:"
    assert set(firsts[1:-1]) == {"Update:"}
    parent = next(m for m in slack.messages if m["ts"] == notice["ts"])
    assert "Acknowledged by <@U0ANA>" in orjson.dumps(parent["blocks"]).decode()
    row = h.store.incident(incident_id)
    assert row is not None
    assert (row.state, row.acked_by) == ("resolved", "U0ANA")
    assert _click(h, incident_id)[0] == 409  # resolved: nothing to acknowledge


def test_an_acknowledgement_pending_when_the_notice_resolves_does_nothing(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
) -> None:
    """A click recorded, then the notice resolves before the engine applies it: closed with
    it, nothing posted, nothing broken."""
    h = _signed_harness(tmp_path, slack, jira, clock)
    w = World(h)
    w.run(180, judged=False)
    incident_id = str(orjson.loads(h.store.meta_get(META_KEY) or "{}")["incident_id"])
    w.restart()
    assert _click(h, incident_id)[0] == 200
    w.run(300, judged=True)  # resolved: a click still pending is closed with it
    assert h.engine.apply_acks(h.clock.ms()) == 0
    row = h.store.incident(incident_id)
    assert row is not None
    assert (row.state, row.acked_by) == ("resolved", None)
    assert "acknowledged" not in {r["kind"] for r in h.store.outbox_rows(incident_id)}


SECRET = "local-signing-secret-0123456789"


def _signed_harness(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> Harness:
    settings = settings_for(tmp_path, slack, jira)
    signed = settings.slack.model_copy(update={"signing_secret": SecretStr(SECRET)})
    return Harness(settings.model_copy(update={"slack": signed}), clock)


def _buttons(message: dict[str, object]) -> list[str]:
    blocks = message["blocks"]
    assert isinstance(blocks, list)
    return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def _click(h: Harness, incident_id: str) -> tuple[int, dict[str, object]]:
    """The Acknowledge button, clicked by ana, signed as Slack signs it."""
    h.clock.now += 1
    payload = {
        "type": "block_actions",
        "user": {"id": "U0ANA", "username": "ana", "team_id": "T0LOCAL"},
        "actions": [{"type": "button", "action_id": ACK, "value": incident_id}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    handler = SlackInteractions(h.settings.alerting.state_dir, SECRET, clock=h.clock)
    headers = {k.lower(): v for k, v in signed_headers(SECRET, body, int(h.clock())).items()}
    status, _, answer = handler.handle("POST", "/slack/interactions", headers, body.encode())
    return status, orjson.loads(answer)
