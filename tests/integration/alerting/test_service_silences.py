"""A silence made over the running service's HTTP API, against a real Kafka and the local
Slack and Jira: the silenced type's incident is stored and not posted while the silence
holds; expired over the API, it is posted once, by the service's own release loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.store import Store
from anchorwatch.jobs.settings import JobSettings
from tests.support.alerting import POLICY, LocalSlackWithHistory, lifecycle, parents_by_label
from tests.support.alerting_kafka import load_settings, produce, service_config
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "integration-api-token-0123"


def _parents(slack: LocalSlackWithHistory) -> int:
    posted = [m for m in slack.messages if m.get("subtype") is None]
    return sum(parents_by_label(posted).values())


def _held(state_dir: Path, doc_type: str) -> bool:
    store = Store(state_dir, create=False)
    try:
        rows = store.list_incidents(open_only=True, limit=100)
    finally:
        store.close()
    return any(r.row.doc_type == doc_type and r.row.held_by for r in rows)


def test_a_silence_over_the_api_holds_a_page_until_it_is_expired(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    state_dir = tmp_path / "state"
    config = service_config(job_settings, state_dir, slack, jira, api_token=TOKEN)
    config["policy"] = POLICY
    service = AlertingService(load_settings(config)).start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready")
        api = f"{service.endpoint_url}/api/v1/silences"
        body = {"doc_type": "invoice", "duration": "1h", "reason": "vendor outage", "author": "t"}
        assert requests.post(api, json=body, timeout=5).status_code == 401
        made = requests.post(api, json=body, headers=auth, timeout=5)
        assert made.status_code == 201, made.text
        produce(job_settings, lifecycle("invoice")[:5] + lifecycle("order")[:5])
        wait_until(lambda: _parents(slack) == 1, 60, "the unsilenced type's page")
        wait_until(lambda: _held(state_dir, "invoice"), 30, "the silenced incident, held")
        assert _parents(slack) == 1
        assert not any("invoice" in m["text"] for m in slack.messages)

        ended = requests.delete(
            f"{api}/{made.json()['silence_id']}", params={"author": "t"}, headers=auth, timeout=5
        )
        assert ended.status_code == 200, ended.text
        wait_until(lambda: _parents(slack) == 2, 30, "the held page, once")
        assert not _held(state_dir, "invoice")
        assert sum(1 for m in slack.messages if "invoice" in m["text"]) == 1
        assert len(requests.get(f"{api}?all=1", headers=auth, timeout=5).json()["silences"]) == 1
    finally:
        service.stop()
