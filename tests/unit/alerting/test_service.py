"""The alerting service without Kafka: the engine deciding batches of verdicts and the
senders draining the outbox through the real Slack and Jira clients to the local servers,
driven by hand on a manual clock (tests/support/alerting_harness.py); the verdicts are fed
from the offsets the state holds, as Kafka would. Crashes: test_service_crash.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry
from pydantic import TypeAdapter, ValidationError

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.outbox import Drainer, TokenBucket
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.contracts.models import DocType
from tests.support.alerting import (
    POLICY,
    LocalSlackWithHistory,
    lifecycle,
    parents_by_label,
    slack_threads,
    verdict,
)
from tests.support.alerting_harness import (
    Harness,
    assert_one_clean_lifecycle,
    issues,
    posted,
    settings_for,
)
from tests.support.rendering import HOSTILE, assert_slack_safe

# --------------------------------------------------------------------------- lifecycle


def test_lifecycle_open_escalate_progress_resolve(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("medical_report"))
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    # The escalation and the progress update each upload a chart into the thread.
    assert sum(1 for m in slack.messages if m.get("subtype") == "file_share") == 2
    assert [e["evidence"]["mean_drift"] for e in h.events.sent] == [0.88, 0.95, 0.5]
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="processed") == 9
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="slack", outcome="sent")
        == 6  # four messages, two charts
    )
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="jira", outcome="sent") == 4
    )
    assert h.value("anchorwatch_alerting_incidents_open", severity="critical") == 0
    assert h.value("anchorwatch_alerting_window_mean_drift", doc_type="medical_report") == 0.5
    assert h.value("anchorwatch_alerting_threshold", doc_type="medical_report") == 0.85
    assert (
        h.value("anchorwatch_alerting_notification_latency_seconds_count", integration="slack") == 6
    )


def test_the_open_incident_is_visible_while_it_lasts(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("invoice")[:5])
    h.run()
    (listing,) = h.store.list_incidents(open_only=True, limit=10)
    assert listing.row.severity == "critical"
    assert listing.row.record["peak_mean_drift"] == 0.95
    assert listing.refs.jira_key == "OPS-1"
    assert listing.refs.slack_ts is not None
    assert h.value("anchorwatch_alerting_incidents_open", severity="critical") == 1


def test_decisions_do_not_depend_on_where_batches_end(tmp_path: Path, clock: ManualClock) -> None:
    # The second incident of "a" comes after the policy's re-open span: a new incident.
    verdicts = lifecycle("a") + lifecycle("b", first_minute=2) + lifecycle("a", first_minute=50)
    outboxes = []
    for batch_max in (1, 7, 500):
        settings = settings_for(tmp_path / str(batch_max), None, None)
        h = Harness(settings, ManualClock(start=clock.now))
        h.publish(verdicts)
        h.consume(batch_max=batch_max)
        outboxes.append(
            [
                (r["incident_id"], r["seq"], r["integration"], r["action"], r["kind"], r["payload"])
                for r in sorted(h.store.outbox_rows(), key=lambda r: (r["incident_id"], r["seq"]))
            ]
        )
    assert outboxes[0] == outboxes[1] == outboxes[2]
    assert len(outboxes[0]) == 9  # three incidents: alert, escalation, resolution


def test_replays_stale_and_invalid_verdicts_are_skipped(tmp_path: Path, clock: ManualClock) -> None:
    h = Harness(settings_for(tmp_path, None, None), clock)
    h.publish(lifecycle("invoice"))
    h.consume()
    rows = len(h.store.outbox_rows())
    h.publish(lifecycle("invoice"))  # the drift job's at-least-once sink repeating itself
    h.publish([verdict("invoice", 3, 0.99, job_version="j2")])  # an old window re-judged
    h.publish([b"not json", b'{"verdict_id": "x"}'])
    h.consume()
    assert len(h.store.outbox_rows()) == rows
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="replay") == 9
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="stale") == 1
    assert h.value("anchorwatch_alerting_verdicts_total", outcome="invalid") == 2
    # Offsets moved past everything, the invalid records included.
    assert sum(h.engine.offsets.values()) == sum(len(r) for r in h.log.values())


# --------------------------------------------------------------------------- outages


def test_outages_of_minutes_then_recovery(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    requests.post(
        f"{slack.url}/_local/faults", json={"method": "*", "status": 503, "times": -1}, timeout=5
    ).raise_for_status()
    requests.post(
        f"{jira.url}/_local/faults",
        json={"method": "*", "status": 429, "retry_after": 45, "times": -1},
        timeout=5,
    ).raise_for_status()
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    # A long incident: breaching for 10 minutes (progress updates every 2) during the outage.
    means = [0.5, 0.87, 0.88, *([0.95] * 10), 0.5, 0.5, 0.5]
    h.publish([verdict("invoice", i, m) for i, m in enumerate(means)])
    h.publish(lifecycle("medical_report"))
    for _ in range(40):  # ten minutes, in 15-second steps
        h.consume()
        h.drain()
        clock.now += 15
    assert posted(slack) == []
    assert jira.issues == {}
    assert {e["doc_type"] for e in h.events.sent} == {"invoice", "medical_report"}
    pending = h.store.pending_counts(["slack", "jira", "events"])
    assert pending["slack"] > 0
    assert pending["jira"] > 0
    assert pending["events"] == 0
    # Backed off and probing (reconciling first), not hammering: 40 rounds, a few probes.
    for integration in ("slack", "jira"):
        retries = h.value(
            "anchorwatch_alerting_notifications_total", integration=integration, outcome="retry"
        )
        assert 5 <= retries <= 25, (integration, retries)
    assert len([r for r in slack.requests if r["method"] == "chat.postMessage"]) == 1
    requests.delete(f"{slack.url}/_local/faults", timeout=5).raise_for_status()
    requests.delete(f"{jira.url}/_local/faults", timeout=5).raise_for_status()
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    # The queued progress updates of the long incident collapse into the latest one.
    rows = h.store.outbox_rows()
    assert sum(r["outcome"] == "superseded" for r in rows if r["integration"] == "slack") >= 3
    (parent,) = [m for m in posted(slack) if not m["thread_ts"] and "invoice" in m["text"]]
    replies = slack_threads(posted(slack))[parent["ts"]]
    assert [r["text"].split(" ")[0] for r in replies] == ["Update", "Update", "Resolved:"]


# --------------------------------------------------------------------------- the rest


def test_reopening_uses_the_same_thread_and_ticket(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    means = [0.5, 0.87, 0.88, 0.5, 0.5, 0.5, 0.5, 0.87, 0.88, 0.5, 0.5, 0.5]
    h.publish([verdict("invoice", i, m) for i, m in enumerate(means)])
    h.run()
    assert len(parents_by_label(slack.messages)) == 1
    (ticket,) = issues(jira)
    assert [t["transition"] for t in ticket["transitions"]] == ["Done", "Reopen", "Done"]
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Resolved", "Update,", "Resolved"]
    kinds = [(e["event_type"], e.get("resolved_at_ms") is not None) for e in h.events.sent]
    assert kinds == [("ANCHOR_DRIFT_ALERT", False), ("ANCHOR_DRIFT_RESOLVED", True)] * 2


def test_a_silent_type_resolves_as_its_partition_moves_on(
    tmp_path: Path, slack: LocalSlackWithHistory, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, None), clock)
    assert h.partition_of("invoice") == h.partition_of("others")
    h.publish([verdict("invoice", i, m) for i, m in enumerate([0.5, 0.87, 0.88])])
    h.publish([verdict("others", i, 0.5) for i in range(40)])
    h.run()
    (resolved,) = [e for e in h.events.sent if e["event_type"] == "ANCHOR_DRIFT_RESOLVED"]
    assert resolved["doc_type"] == "invoice"
    # resolve_when_silent (30) windows after the last one, once the partition is 2 past it.
    assert resolved["resolved_at_ms"] == verdict("invoice", 33, 0.5).window.window_start_ms
    assert [r["code"] for r in resolved["evidence"]["reasons"]] == ["silent"]
    assert posted(slack)[-1]["text"].startswith("Resolved")


def test_a_type_alone_on_its_partition_resolves_once_that_partition_is_idle(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, None, None), clock)
    assert h.partition_of("invoice") != h.partition_of("other")
    h.publish([verdict("invoice", i, m) for i, m in enumerate([0.5, 0.87, 0.88])])
    h.publish([verdict("other", i, 0.5) for i in range(3)])
    h.consume()
    h.publish([verdict("other", i, 0.5) for i in range(3, 20)])
    h.consume()
    # Another partition far ahead proves nothing while this one still delivers...
    assert [e["event_type"] for e in h.events.sent] == []
    assert len(h.engine.open_incidents()) == 1
    clock.now += 121  # ... but once it has been idle for silence_lag_s, it does.
    h.publish([verdict("other", i, 0.5) for i in range(20, 40)])
    h.consume()
    assert h.engine.open_incidents() == []


def test_dry_run_logs_what_it_would_send_and_sends_nothing(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock, dry_run=True)
    h.publish(lifecycle("<!channel> report"))
    with caplog.at_level(logging.INFO, logger="anchorwatch.alerting"):
        h.run()
    assert slack.messages == []
    assert jira.issues == {}
    assert h.events.sent == []
    would = [r.__dict__ for r in caplog.records if r.getMessage() == "dry run: would send"]
    per_integration = {
        i: [(w["kind"], w["action"]) for w in would if w["integration"] == i]
        for i in ("slack", "jira", "events")
    }
    assert per_integration["jira"] == [
        ("opened", "open"),
        ("updated", "update"),
        ("progress", "update"),
        ("resolved", "resolve"),
    ]
    assert per_integration["slack"] == [
        ("opened", "open"),
        ("updated", "update"),
        ("chart", "chart"),
        ("progress", "update"),
        ("chart", "chart"),
        ("resolved", "resolve"),
    ]
    charts = [w["would_send"] for w in would if w["action"] == "chart"]
    assert [c["windows"] for c in charts] == [4, 6]
    assert all(c["chart"].startswith("drift-") for c in charts)
    assert per_integration["events"] == [
        ("opened", "open"),
        ("updated", "open"),
        ("resolved", "resolve"),
    ]
    slack_open = next(w for w in would if w["integration"] == "slack")
    assert slack_open["would_send"]["channel"] == "#drift-alerts"
    assert_slack_safe(slack_open["would_send"])
    jira_open = next(w for w in would if w["integration"] == "jira")
    assert jira_open["would_send"]["summary"].startswith("[URGENT] Drift Alert: <!channel>")
    assert {r["outcome"] for r in h.store.outbox_rows()} == {"dry_run"}


def _accepted_doc_type(text: str) -> bool:
    try:
        TypeAdapter(DocType).validate_python(text)
    except ValidationError:
        return False
    return True


# Verdicts only ever carry doc types the contract accepts (control, format and separator
# characters are refused at ingest: tests/unit/anchorwatch/contracts/test_contracts.py);
# the rest reach the service.
@pytest.mark.parametrize("doc_type", [d for d in HOSTILE if _accepted_doc_type(d)])
def test_hostile_doc_types_reach_slack_and_jira_safely(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    doc_type: str,
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle(doc_type))
    h.run()
    for m in slack.messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"]})
        for edit in m["edits"]:
            assert_slack_safe(edit)
    assert len(parents_by_label(slack.messages)) == 1
    assert len(slack_threads(posted(slack))) == 1
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"
    assert not [r for r in jira.requests if r["status"] >= 400]
    assert {e["doc_type"] for e in h.events.sent} == {doc_type}


def test_webhook_mode_sends_one_message_per_change(tmp_path: Path, clock: ManualClock) -> None:
    with LocalSlack() as slack:
        settings = AlertingSettings.load(
            alerting={"state_dir": tmp_path / "state", "update_interval_s": 120},
            policy=POLICY,
            slack={"mode": "webhook", "webhook_url": slack.webhook_url},
        )
        h = Harness(settings, clock)
        h.publish(lifecycle("invoice"))
        h.run()
    assert [m["text"].split(" ")[0] for m in slack.messages] == [
        "[WARNING]",
        "[CRITICAL]",
        "[CRITICAL]",
        "[CRITICAL]",
    ]
    assert "resolved" in slack.messages[-1]["text"]


def test_charts_decided_in_bot_mode_are_dropped_in_webhook_mode(
    tmp_path: Path, slack: LocalSlackWithHistory, clock: ManualClock
) -> None:
    bot = Harness(settings_for(tmp_path, slack, None), clock)
    bot.publish(lifecycle("invoice"))
    bot.consume()  # decided with their charts, nothing sent yet
    bot.store.close()
    for d in bot.drainers:
        d._store.close()
    settings = AlertingSettings.load(
        alerting={"state_dir": tmp_path / "state", "update_interval_s": 120},
        policy=POLICY,
        slack={"mode": "webhook", "webhook_url": slack.webhook_url},
    )
    h = Harness(settings, clock)
    h.run()
    assert len(slack.messages) == 4  # one per change; a chart is not sent as a message
    rows = [r for r in h.store.outbox_rows() if r["action"] == "chart"]
    assert [r["outcome"] for r in rows] == ["suppressed", "suppressed"]


def test_a_permanent_failure_is_given_up_and_the_rest_goes_on(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    requests.post(
        f"{slack.url}/_local/faults",
        json={"method": "chat.postMessage", "status": 200, "error": "channel_not_found"},
        timeout=5,
    ).raise_for_status()
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("invoice"))
    h.run()
    slack_rows = [r for r in h.store.outbox_rows() if r["integration"] == "slack"]
    assert [r["status"] for r in slack_rows] == ["failed"] * 6  # two are charts
    assert "channel_not_found" in slack_rows[0]["error"]
    assert all("no thread" in r["error"] for r in slack_rows[1:])
    assert len(issues(jira)) == 1
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="slack", outcome="failed")
        == 6
    )


def test_the_rate_limit_spaces_notifications(
    tmp_path: Path, slack: LocalSlackWithHistory, clock: ManualClock
) -> None:
    bucket = TokenBucket(2.0, 1, clock)
    assert bucket.wait_s() == 0
    assert bucket.wait_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.wait_s() == 0

    h = Harness(settings_for(tmp_path, slack, None), clock)
    drainer = Drainer(
        h.drainers[0]._single,  # type: ignore[arg-type]
        Store(h.settings.alerting.state_dir),
        h._retry(),
        h.metrics,
        rate_per_s=4,
        burst=2,
        clock=clock,
    )
    h.publish([v for i in range(10) for v in lifecycle(f"type-{i}")[:3]])
    h.consume()
    started = clock.now
    while (wait := drainer.drain_once()) is not None:
        clock.now += wait
    # Two at once (the burst), then four a second.
    assert len(posted(slack)) == 10
    assert clock.now - started == pytest.approx(2.0)


def test_jira_comments_respect_the_comment_interval(
    tmp_path: Path, jira: LocalJira, clock: ManualClock
) -> None:
    settings = settings_for(tmp_path, None, jira)
    settings = settings.model_copy(
        update={"jira": settings.jira.model_copy(update={"comment_interval_s": 3600})}
    )
    h = Harness(settings, clock)
    h.publish(lifecycle("invoice"))
    h.run()
    (ticket,) = issues(jira)
    # The escalation always comments; the progress update within the hour does not.
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Update,", "Resolved"]
    outcomes = [r["outcome"] for r in h.store.outbox_rows() if r["integration"] == "jira"]
    assert outcomes == ["sent", "sent", "suppressed", "sent"]


def test_a_new_policy_version_abandons_the_old_incidents(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(settings_for(tmp_path, None, None), clock)
    h.publish(lifecycle("invoice")[:4])
    h.consume()
    assert len(h.engine.open_incidents()) == 1
    h.settings = h.settings.model_copy(
        update={"policy": h.settings.policy.model_copy(update={"version": "p2"})}
    )
    with caplog.at_level(logging.WARNING):
        h.restart()
    assert h.engine.open_incidents() == []
    assert "policy version changed" in caplog.text
    h.publish([verdict("invoice", 10, 0.5)])
    h.consume()
    assert h.store.list_incidents(open_only=True, limit=5) == []


def test_doc_type_gauges_are_capped() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, doc_types_max=3)
    for i in range(5):
        metrics.window(f"t{i}", 0.1 * i, 0.85)
    metrics.window("t2", 0.9, 0.85)
    shown = {
        s.labels["doc_type"]
        for m in registry.collect()
        if m.name == "anchorwatch_alerting_window_mean_drift"
        for s in m.samples
    }
    assert shown == {"t3", "t4", "t2"}
    assert registry.get_sample_value("anchorwatch_alerting_doc_type_gauges_dropped_total") == 2
