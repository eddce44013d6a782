"""The watchdog's notice through the service's outbox (without Kafka: the harness of
tests/support/alerting_harness.py with the real Slack and Jira clients against the local
servers, and the probe's samples made by hand): posted once, updated in its thread, kept
across a restart without a second post, resolved when verdicts come back."""

from __future__ import annotations

from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.watchdog_post import META_KEY, WATCHDOG_DOC_TYPE, headline
from anchorwatch.alerting.watchdog_probe import Sample
from anchorwatch.alerting.watchdog_run import WatchdogRunner
from tests.support.alerting import LocalSlackWithHistory, parents_by_label, slack_threads, verdict
from tests.support.alerting_harness import Harness, issues, posted, settings_for

TYPES = {"invoice": 0, "receipt": 1}


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
            ["slack", "jira", "events"],
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


def _notices(slack: LocalSlackWithHistory) -> list[dict[str, object]]:
    return [m for m in posted(slack) if not m["thread_ts"] and "cannot see" in str(m["text"])]


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
    assert "`anchorwatch cannot see doc types invoice, receipt`" in str(notices[0]["text"])
    assert "no_verdicts" in orjson.dumps(notices[0]["blocks"]).decode()
    assert w.value("anchorwatch_alerting_blind_doc_types") == 2
    assert w.value("anchorwatch_alerting_watchdog_notices_total", kind="opened") == 1
    label = incident_label(orjson.loads(h.store.meta_get(META_KEY) or "{}")["incident_id"])
    tickets = [i for i in issues(jira) if label in i["fields"]["labels"]]
    assert len(tickets) == 1
    alerts = [e for e in h.events.sent if e["doc_type"] == WATCHDOG_DOC_TYPE]
    assert [e["event_type"] for e in alerts] == ["ANCHOR_DRIFT_ALERT"]

    # A restart while blind: the notice is neither posted again nor forgotten.
    w.restart()
    w.run(300, judged=False)
    assert len(_notices(slack)) == 1
    assert parents_by_label(posted(slack))[label] == 1
    assert w.value("anchorwatch_alerting_watchdog_notices_total", kind="opened") == 0

    # Verdicts return: resolved, in the same thread and ticket.
    w.run(120, judged=True)
    assert len(_notices(slack)) == 1
    thread = slack_threads(posted(slack)).get(str(notices[0]["ts"]), [])
    assert [str(m["text"]).split(":")[0] for m in thread] == ["Resolved"]
    parent = next(m for m in slack.messages if m["ts"] == notices[0]["ts"])
    assert str(parent["text"]).startswith("[CRITICAL] Drift resolved")
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
    assert "invoice, late_type" in str(parent["text"])  # edited in place


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
