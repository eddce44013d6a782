"""Routes in the running service without Kafka (the harness of
tests/support/alerting_harness.py, the real slack_sdk and jira clients against the local
Slack and Jira): two doc types to their own channel, project and component with their
runbooks; the ticket assigned when the incident is acknowledged in Slack."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
import requests
from pydantic import SecretStr

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.fakes.slack_interactions import signed_headers
from anchorwatch.alerting.integrations.slack.render import ACK
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.settings import AlertingSettings, RoutingSection
from anchorwatch.alerting.slack_actions import SlackInteractions
from tests.support.alerting import lifecycle
from tests.support.alerting_harness import Harness, issues, posted, settings_for
from tests.support.alerting_paging import incident_ids

SECRET = "local-signing-secret-0123456789"
ROUTES: dict[str, Any] = {
    "routes": [
        {
            "doc_types": ["medical_*"],
            "owner": "Team Med",
            "slack_mention": "S0MEDTEAM",
            "channel": "#med-alerts",
            "jira_project": "MED",
            "jira_component": "Ingest",
            "jira_assignee": "oncall",
            "runbook_url": "https://runbooks.example.com/med",
        },
        {
            "doc_types": ["invoice"],
            "owner": "Billing",
            "channel": "#billing",
            "jira_project": "BILL",
            "jira_component": "OCR",
            "runbook_url": "https://runbooks.example.com/billing",
        },
    ],
}


def _settings(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, **routing: Any
) -> AlertingSettings:
    s = settings_for(tmp_path, slack, jira)
    signed = s.slack.model_copy(update={"signing_secret": SecretStr(SECRET)})
    return s.model_copy(
        update={"slack": signed, "routing": RoutingSection.model_validate({**ROUTES, **routing})}
    )


def _acknowledge(h: Harness, incident_id: str, user: str = "U0ANA", name: str = "ana") -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": name, "team_id": "T0LOCAL"},
        "actions": [{"type": "button", "action_id": ACK, "value": incident_id}],
    }
    body = urlencode({"payload": json.dumps(payload)})
    h.clock.now += 1
    headers = {k.lower(): v for k, v in signed_headers(SECRET, body, int(h.clock())).items()}
    handler = SlackInteractions(h.settings.alerting.state_dir, SECRET, clock=h.clock)
    status, _, answer = handler.handle("POST", "/slack/interactions", headers, body.encode())
    assert (status, orjson.loads(answer)["ok"]) == (200, True)
    assert h.engine.apply_acks(h.clock.ms()) == 1
    h.drain()


def _context(message: dict[str, Any]) -> str:
    """The parent's context line (the incident's label, its links, its owner)."""
    (text,) = [
        e["text"]
        for b in message["blocks"]
        if b["type"] == "context"
        for e in b["elements"]
        if e["text"].startswith("incident ")
    ]
    return str(text)


def _ticket(jira: LocalJira, doc_type: str) -> dict[str, Any]:
    (ticket,) = [i for i in issues(jira) if doc_type in i["fields"]["summary"]]
    return ticket


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"))
def test_two_doc_types_go_to_their_own_channel_project_and_component(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    h.publish(lifecycle("medical_report") + lifecycle("invoice", first_minute=1))
    h.run()

    parents = {slack.channel_names[m["channel"]]: m for m in posted(slack) if not m["thread_ts"]}
    assert set(parents) == {"#med-alerts", "#billing"}
    med_context = _context(parents["#med-alerts"])
    assert med_context.endswith(
        "owner Team Med <!subteam^S0MEDTEAM> · <https://runbooks.example.com/med|runbook>"
    )
    bill_context = _context(parents["#billing"])
    assert bill_context.endswith("owner Billing · <https://runbooks.example.com/billing|runbook>")

    med, bill = _ticket(jira, "medical_report"), _ticket(jira, "invoice")
    assert med["key"].startswith("MED-")
    assert bill["key"].startswith("BILL-")
    assert med["fields"]["components"] == [{"name": "Ingest"}]
    assert bill["fields"]["components"] == [{"name": "OCR"}]
    assert med["fields"]["description"].splitlines()[2] == (
        "Owner: *Team Med* · [Runbook|https://runbooks.example.com/med]"
    )
    # The whole lifecycle found its ticket again in the routed project.
    assert med["fields"]["status"]["name"] == "Done"
    assert [c.split(" ")[0] for c in med["comments"]] == ["Update,", "Update,", "Resolved"]
    page = requests.get(f"{jira.url}/browse/{med['key']}", timeout=5).text
    assert "<a href='https://runbooks.example.com/med'>Runbook</a>" in page
    assert "component <span class='components'>Ingest</span>" in page


def _opened(h: Harness, doc_type: str) -> str:
    h.publish(lifecycle(doc_type)[:3])
    h.run()
    (incident_id,) = incident_ids(h, doc_type)
    return incident_id


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"))
def test_an_acknowledgement_assigns_the_ticket_to_the_routes_assignee(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    _acknowledge(h, _opened(h, "medical_report"))
    ticket = _ticket(jira, "medical_report")
    assert ticket["fields"]["assignee"]["name"] == "oncall"
    assert ticket["comments"] == [
        "Acknowledged by ana (Slack user U0ANA) in Slack: no more progress updates are posted."
    ]
    page = requests.get(f"{jira.url}/browse/{ticket['key']}", timeout=5).text
    assert "assignee <b class='assignee'>On Call</b>" in page
    assigned = [r for r in jira.requests if r["op"] == "assign"]
    assert [(r["status"], r["key"]) for r in assigned] == [(204, ticket["key"])]


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"), deployment="Cloud")
def test_the_acknowledging_users_own_jira_account_wins_on_cloud(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, clock: ManualClock
) -> None:
    users = {"U0ANA": "local-user@example.com"}
    h = Harness(_settings(tmp_path, slack, jira, jira_users=users), clock)
    _acknowledge(h, _opened(h, "medical_report"))
    ticket = _ticket(jira, "medical_report")
    assert ticket["fields"]["assignee"]["accountId"] == "5b10a2844c20165700ede21g"


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"))
def test_no_assignee_configured_leaves_the_ticket_unassigned(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    _acknowledge(h, _opened(h, "invoice"))
    ticket = _ticket(jira, "invoice")
    assert ticket["fields"]["assignee"] is None
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Acknowledged"]
    assert not [r for r in jira.requests if r["op"] in ("assign", "users")]


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"))
def test_an_assignee_jira_does_not_know_is_logged_and_the_comment_still_goes_out(
    tmp_path: Path,
    slack: LocalSlack,
    jira: LocalJira,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(_settings(tmp_path, slack, jira, jira_users={"U0ANA": "nobody-here"}), clock)
    with caplog.at_level(logging.ERROR):
        _acknowledge(h, _opened(h, "medical_report"))
    ticket = _ticket(jira, "medical_report")
    assert ticket["fields"]["assignee"] is None
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Acknowledged"]
    (record,) = [r for r in caplog.records if r.getMessage() == "jira ticket not assigned"]
    assert record.__dict__["assignee"] == "nobody-here"
    assert "No matching user found" in record.__dict__["error"]
    rows = [r for r in h.store.outbox_rows() if r["integration"] == "jira"]
    assert {r["status"] for r in rows} == {"done"}


def test_the_local_jira_refuses_an_unknown_assignee_and_unassigns(jira: LocalJira) -> None:
    created = requests.post(
        f"{jira.url}/rest/api/2/issue",
        json={"fields": {"project": {"key": "OPS"}, "issuetype": {"name": "Task"}, "summary": "x"}},
        timeout=5,
    ).json()
    url = f"{jira.url}/rest/api/2/issue/{created['key']}/assignee"
    refused = requests.put(url, json={"name": "ghost"}, timeout=5)
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"assignee": "User 'ghost' does not exist."}
    assert requests.put(url, json={"name": "oncall"}, timeout=5).status_code == 204
    assert jira.issues[created["key"]]["fields"]["assignee"]["displayName"] == "On Call"
    assert requests.put(url, json={"name": None}, timeout=5).status_code == 204
    assert jira.issues[created["key"]]["fields"]["assignee"] is None
    found = requests.get(f"{jira.url}/rest/api/2/user/search?username=ONCALL", timeout=5).json()
    assert [u["name"] for u in found] == ["oncall"]
