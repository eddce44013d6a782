"""The demo's flow as a test: Kong batches over HTTP through the ingest service, Kafka, the
drift job submitted to the session cluster and the alerting service, then exactly what the
local Slack and Jira received for each labelled incident."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from anchorwatch.alerting.service import list_incidents
from tests.support.journey import JourneyRun, state_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _get(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


def test_each_labelled_incident_reaches_slack_and_jira_exactly_once(
    journey_run: JourneyRun,
) -> None:
    run, report = journey_run, journey_run.report
    log = "\n".join(run.output)
    assert report.outcome is not None, log
    assert report.comparison is not None, log
    # Every labelled incident alerted once, after at most 3 of its windows; nothing else.
    assert report.outcome.ok, log
    assert all((f.delay_windows() or 99) <= 3 for f in report.outcome.found), log
    assert report.comparison.ok, log
    assert report.comparison.matched == report.verdicts
    assert report.late_events == 0
    # Every broken Kong entry is a dead letter naming its field; every other one an event.
    assert report.dead_letter_problems == []
    assert report.failed_batches == 0
    assert report.entries_rejected == report.dead_letters > 0
    assert report.events_accepted + report.entries_rejected == report.events_sent

    incidents = {i.row.incident_id: i for i in list_incidents(state_path(run), open_only=False,
                                                               limit=100)}  # fmt: skip
    assert len(incidents) == len(run.plan.labels)
    messages = _get(f"{run.slack_url}/_local/messages")["messages"]
    issues = {i["key"]: i for i in _get(f"{run.jira_url}/_local/issues")["issues"]}
    parents = [m for m in messages if not m.get("thread_ts") and m.get("subtype") is None]
    assert len(parents) == len(run.plan.labels)
    assert len(issues) == len(run.plan.labels)

    for found in report.outcome.found:
        (alert,) = found.alerts
        doc = found.label.doc_type
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
        assert updates, kinds
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
        assert set(comments[:-1]) <= {"Update,"}, comments
        # Jira comments are paced (jira.comment_interval_s): at most one per update.
        assert len(comments) - 1 <= updates.count("Update")

    slack_calls = _get(f"{run.slack_url}/_local/requests")["requests"]
    assert [c for c in slack_calls if c["status"] != 200 or c["error"]] == []
    jira_calls = _get(f"{run.jira_url}/_local/requests")["requests"]
    assert [c for c in jira_calls if c["status"] >= 400] == []
