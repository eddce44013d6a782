"""The demo's flow as a test: Kong batches over HTTP through the ingest service, Kafka, the
drift job submitted to the session cluster and the alerting service, then exactly what the
local Slack, Jira and PagerDuty received for each labelled incident (the alerts of the
incidents living in one model version and one anchor kind naming them), and the operator
features the demo exercises: a silence, an acknowledgement clicked in Slack, a gateway-wide
data-quality fault grouped into one incident, paging, and the watchdog's notice once the
drift job is killed."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import Store
from anchorwatch.demo.journey_alerting_pair import LEASE_S
from anchorwatch.demo.journey_checks import after_ack
from anchorwatch.demo.journey_results import summary_lines
from tests.support.journey import JourneyRun, delivered, state_path

WATCHDOG = "anchorwatch:watchdog"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def store_rows(run: JourneyRun, incident_id: str) -> list[dict[str, Any]]:
    store = Store(state_path(run), create=False)
    try:
        return store.outbox_rows(incident_id)
    finally:
        store.close()


def _get(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


def test_each_labelled_incident_reaches_slack_and_jira_exactly_once(
    journey_run: JourneyRun,
) -> None:
    run, report = journey_run, journey_run.report
    log = "\n".join(run.output + summary_lines(report))
    print(log)  # what the demo printed (pytest -rP shows it)
    assert report.outcome is not None, log
    assert report.comparison is not None, log
    # Every labelled incident alerted once, after at most 3 of its windows; nothing else.
    assert report.outcome.ok, log
    assert all((f.delay_windows() or 99) <= 3 for f in report.outcome.found), log
    assert report.comparison.ok, log
    assert report.comparison.matched == report.verdicts
    assert report.comparison.without_breakdown == [], log  # compared with its breakdown
    assert report.late_events == 0
    # Every broken Kong entry is a dead letter naming its field; every other one an event.
    assert report.dead_letter_problems == []
    assert report.failed_batches == 0
    assert report.entries_rejected == report.dead_letters > 0
    assert report.events_accepted + report.entries_rejected == report.events_sent

    plan = report.plan
    # The end checks: the alerts of the incidents living in one model version and one
    # anchor kind name them; the operator features.
    checks = {c.name: c for c in report.checks}
    assert sorted(checks) == [
        "ack", "anchor kind", "blindness", "group", "model", "pagerduty", "silence"
    ], log  # fmt: skip
    assert all(c.ok for c in checks.values()), log
    assert report.ok, log

    listings = list_incidents(state_path(run), open_only=False, limit=100)
    incidents = {i.row.incident_id: i for i in listings}
    judged = [i for i in listings if i.row.rule != "group" and i.row.doc_type != WATCHDOG]
    (group,) = [i for i in listings if i.row.rule == "group"]
    (notice,) = [i for i in listings if i.row.doc_type == WATCHDOG]
    # One incident per label: the gateway-wide fault's types are labelled (the group's
    # members), as is the silenced incident.
    assert len(judged) == len(plan.labels)
    silenced = next(lab for lab in plan.labels if lab.kind == "jump")  # the first incident
    gateway = [lab for lab in plan.labels if lab.kind == "gateway"]
    posted = [lab for lab in plan.labels if lab.kind != "gateway" and lab != silenced]
    assert len(gateway) >= 3
    messages = _get(f"{run.slack_url}/_local/messages")["messages"]
    issues = {i["key"]: i for i in _get(f"{run.jira_url}/_local/issues")["issues"]}
    parents = [m for m in messages if not m.get("thread_ts") and m.get("subtype") is None]
    # A parent and a ticket per posted label, one for the group, one for the notice.
    assert len(parents) == len(posted) + 2
    assert len(issues) == len(posted) + 2

    # The silenced label: judged, held by the silence, resolved; nobody was told.
    (muted,) = [i for i in judged if i.row.doc_type == silenced.doc_type
                and i.row.opened_at_ms <= silenced.end_ms + 2 * 60_000]  # fmt: skip
    assert muted.row.state == "resolved"
    assert (muted.row.held_by or "").startswith("silence ")
    assert (muted.refs.slack_ts, muted.refs.jira_key) == (None, None)
    drift_of = re.compile(rf"\[[A-Z]+\] Drift \w+: `{re.escape(silenced.doc_type)}`")
    assert not [m for m in parents if drift_of.match(m["text"])]
    # The group: one thread and one ticket; its members none of their own.
    members = [i for i in judged if i.row.group_id == group.row.incident_id]
    assert sorted(i.row.doc_type for i in members) == sorted(lab.doc_type for lab in gateway)
    assert all(i.refs.slack_ts is None and i.refs.jira_key is None for i in members)
    assert [m for m in parents if m["ts"] == group.refs.slack_ts]
    assert group.refs.jira_key in issues
    # The watchdog's notice reached Slack (and Jira) after the job was killed.
    assert notice.refs.slack_ts is not None
    assert notice.refs.jira_key in issues
    # PagerDuty: each critical incident people were told of, one alert, a trigger per
    # change delivered (its opening, then any update: the watchdog's notice keeps changing
    # while the services outlive the run), never one twice. The services still run, so the
    # outbox is read before and after the local PagerDuty.
    ids = [i.row.incident_id for i in listings]
    before = delivered(run, ids, "pagerduty", "open")  # its opening and updates
    alerts = _get(f"{run.journey.destinations.pagerduty_url}/_local/alerts")["alerts"]
    after = delivered(run, ids, "pagerduty", "open")
    paged = {a["dedup_key"]: a for a in alerts}
    assert len(paged) == len(alerts)
    for i in [*judged, group, notice]:
        told = i.refs.slack_ts is not None and i.row.severity == "critical"
        assert (f"anchorwatch/{i.row.incident_id}" in paged) == told, i.row
        if told:
            events = paged[f"anchorwatch/{i.row.incident_id}"]["events"]
            sent = (before[i.row.incident_id], after[i.row.incident_id])
            assert sent[0] <= events.count("trigger") <= sent[1], (events, sent)
            assert events.count("trigger") >= 1
            if i is not notice and i is not group:  # a drift incident: paged once
                assert events.count("trigger") == 1, events
            assert ("resolve" in events) == (i.row.state == "resolved" and i is not notice)

    for found in report.outcome.found:
        if found.label not in posted:
            continue
        (alert,) = found.alerts
        doc = found.label.doc_type
        acked = found.label.kind == "ramp"  # acknowledged from Slack by the run
        listing = incidents[alert.incident_id]
        assert (listing.row.state, listing.row.doc_type) == ("resolved", doc)
        ts, key = listing.refs.slack_ts, listing.refs.jira_key
        assert ts is not None
        assert key is not None

        # Slack: one parent, edited to its resolution; replies are updates, each with its
        # chart (a PNG the local Slack holds), then one resolution reply.
        (parent,) = [m for m in parents if m["ts"] == ts]
        assert parent["text"].startswith(f"[{alert.severity.upper()}] Drift resolved: `{doc}`")
        assert parent["edits"], "the parent was never edited"
        # As first posted (the severity it opened with; an escalation edits it).
        assert re.match(rf"\[(WARNING|CRITICAL)\] Drift alert: `{doc}`", parent["edits"][0]["text"])
        thread = [m for m in messages if m.get("thread_ts") == ts]
        kinds = ["chart" if m.get("subtype") == "file_share" else m["text"].split(" ")[0]
                 for m in thread]  # fmt: skip
        assert kinds[-1] == "Resolved:", kinds
        updates = kinds[:-1]
        if acked:
            # The click: the parent says so, a reply too; no progress update after it.
            assert listing.row.acked_by is not None
            assert "Acknowledged by" in str(parent["blocks"]), parent
            # No progress update after it; an escalation still goes out, as an Update.
            at = kinds.index("Acknowledged")
            later = after_ack(store_rows(run, alert.incident_id))
            assert later is not None
            assert later[0] == 0, later
            assert kinds[at:].count("Update") == later[1]["slack"], (kinds, later)
            updates = kinds[:at] + [k for k in kinds[at + 1 : -1] if k != "Acknowledged"]
        elif not updates:
            # None at all: only a data-quality incident, whose breach can pass while it
            # waits for its group (posted on its own then, and resolved).
            assert found.label.diagnosis, kinds
        assert updates == ["Update", "chart"] * (len(updates) // 2), kinds
        for m in thread:
            for file_id in m.get("files", []):
                png = requests.get(f"{run.slack_url}/_local/files/{file_id}", timeout=10)
                assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
        if found.label.diagnosis:
            shown = str(parent["edits"][0]["blocks"])
            assert found.label.diagnosis in shown, shown

        # Jira: one ticket, its summary the source's format, commented per update and
        # resolved with a comment and a transition to Done.
        issue = issues[key]
        summary = issue["fields"]["summary"]
        assert re.fullmatch(rf"\[URGENT\] Drift Alert: {doc} - Score 0\.\d{{3}}", summary)
        assert "drift-alert" in issue["fields"]["labels"]
        assert issue["fields"]["status"]["name"] == "Done"
        assert [t["to"] for t in issue["transitions"]] == ["Done"]
        comments = [c.split(" ")[0] for c in issue["comments"]]
        assert comments[-1] == "Resolved", comments
        if acked:
            at = comments.index("Acknowledged")
            assert later is not None
            assert comments[at:].count("Update,") == later[1]["jira"], comments
            comments = [c for c in comments if c != "Acknowledged"]
        assert set(comments[:-1]) <= {"Update,"}, comments
        # Jira comments are paced (jira.comment_interval_s): at most one per update.
        assert len(comments) - 1 <= updates.count("Update")

    slack_calls = _get(f"{run.slack_url}/_local/requests")["requests"]
    assert [c for c in slack_calls if c["status"] != 200 or c["error"]] == []
    jira_calls = _get(f"{run.jira_url}/_local/requests")["requests"]
    assert [c for c in jira_calls if c["status"] >= 400] == []


def test_the_alerting_leader_killed_mid_run_is_replaced_by_the_standby(
    journey_run: JourneyRun,
) -> None:
    """The demo runs two alerting instances on one PostgreSQL state and kills the leader
    partway through the live traffic; the test above checks that nothing was lost or sent
    twice, this one that the kill happened and the standby took over within the lease."""
    run = journey_run
    assert run.journey.pair is not None
    (line,) = [line for line in run.output if "killed -9" in line and "took the lead" in line]
    took = run.report.timings["alerting_takeover_s"]
    assert took < LEASE_S + 10, line
    assert run.journey.pair.leader() is not None  # one of them leads at the end
    assert isinstance(state_path(run), StateLocation)
