"""Routes in the alerting service against a real Kafka: two doc types go to their own Slack
channel and Jira project and component, with their owner and runbook link in the local
Slack's and the local Jira's pages, through the real slack_sdk and jira clients."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.service import AlertingService
from anchorwatch.jobs.settings import JobSettings
from tests.support.alerting import POLICY, LocalSlackWithHistory, lifecycle
from tests.support.alerting_kafka import (
    delivered_everything,
    load_settings,
    produce,
    service_config,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUTING = {
    "severity_channels": {"critical": "#ops-pager"},
    "routes": [
        {
            "doc_types": ["medical_*"],
            "owner": "Team Med",
            "channel": "#med-alerts",
            "severity_channels": {"critical": "#med-alerts"},
            "jira_project": "MED",
            "jira_component": "Ingest",
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


@pytest.mark.local_jira(projects=("OPS", "MED", "BILL"))
def test_two_doc_types_are_routed_with_their_runbooks(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    config = service_config(job_settings, tmp_path / "state", slack, jira)
    config["policy"] = POLICY
    config["routing"] = ROUTING
    service = AlertingService(load_settings(config)).start()
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready")
        produced = produce(
            job_settings, lifecycle("medical_report") + lifecycle("invoice", first_minute=1)
        )
        wait_until(
            lambda: delivered_everything(tmp_path / "state", produced), 90, "every notification"
        )
    finally:
        service.stop()

    parents = {
        slack.channel_names[m["channel"]]: m
        for m in slack.messages
        if m.get("subtype") is None and not m["thread_ts"]
    }
    # The route's own critical channel wins over the global #ops-pager; invoice's does not
    # name one, so its parent was posted (as a warning) to #billing and stays there.
    assert set(parents) == {"#med-alerts", "#billing"}
    for channel, runbook, owner in (
        ("#med-alerts", "https://runbooks.example.com/med", "Team Med"),
        ("#billing", "https://runbooks.example.com/billing", "Billing"),
    ):
        channel_id = parents[channel]["channel"]
        page = requests.get(f"{slack.url}/archives/{channel_id}", timeout=5).text
        assert f"<title>{channel} · local Slack</title>" in page
        assert f"href='{runbook}'" in page
        assert f"owner {owner}" in page

    tickets = {i["project"]: i for i in jira.issues.values()}
    assert set(tickets) == {"MED", "BILL"}
    assert tickets["MED"]["fields"]["components"] == ["Ingest"]
    assert tickets["BILL"]["fields"]["components"] == ["OCR"]
    for project, runbook in (
        ("MED", "https://runbooks.example.com/med"),
        ("BILL", "https://runbooks.example.com/billing"),
    ):
        ticket = tickets[project]
        assert ticket["fields"]["status"] == "Done"
        page = requests.get(f"{jira.url}/browse/{ticket['key']}", timeout=5).text
        assert f"<a href='{runbook}'>Runbook</a>" in page
    assert not [r for r in jira.requests if r["status"] >= 400]
