"""What people do to incidents, in the harness of tests/support/alerting_harness.py: a silence
made over the service's silences API, an acknowledgement clicked in the local Slack and sent
signed as Slack sends it, both through the service's own handlers; restarts armed at a crash
point; and what the local Slack, Jira and PagerDuty received of an incident, as the fault
campaign counts it (bench/fault_plan.py ``notification_kinds``)."""

from __future__ import annotations

from typing import Any

import orjson
import requests
from pydantic import SecretStr

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pagerduty import LocalPagerDuty
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.fakes.slack_interactions import block_actions_body, signed_headers
from anchorwatch.alerting.integrations.pagerduty import dedup_key
from anchorwatch.alerting.integrations.slack.render import ACK
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.silence_api import PREFIX, SilenceApi
from anchorwatch.alerting.slack_actions import PATH, SlackInteractions
from bench.fault_plan import notification_kinds
from tests.support.alerting_harness import Harness, issues
from tests.support.alerting_paging import with_paging

SIGNING_SECRET = "operator-signing-secret-0123456789"
API_TOKEN = "operator-api-token-0123456789"


def operator_settings(settings: AlertingSettings, pagerduty: LocalPagerDuty) -> AlertingSettings:
    """``settings`` with the silences API, Slack's buttons (no charts: the campaign's service
    posts none) and PagerDuty on."""
    slack = settings.slack.model_copy(
        update={"signing_secret": SecretStr(SIGNING_SECRET), "charts": False}
    )
    alerting = settings.alerting.model_copy(update={"api_token": SecretStr(API_TOKEN)})
    return with_paging(
        settings.model_copy(update={"slack": slack, "alerting": alerting}), pagerduty=pagerduty
    )


class OperatorHarness(Harness):
    def restart_armed(self, crash: str) -> None:
        """A restart whose new process dies at ``crash`` (``restart`` starts one unarmed)."""
        self.engine.close()
        for d in self.drainers:
            d._store.close()
        self._start(crash)

    def incident_id(self, doc_type: str) -> str:
        (found,) = [
            r.row.incident_id
            for r in self.store.list_incidents(open_only=False, limit=100)
            if r.row.doc_type == doc_type
        ]
        return found

    def add_silence(self, doc_type: str, seconds: int) -> dict[str, Any]:
        """A silence of ``doc_type`` as ``POST /api/v1/silences`` makes it; the silence."""
        api = SilenceApi(self.settings.alerting.state_dir, API_TOKEN, clock=self.clock)
        body = {"doc_type": doc_type, "duration": f"{seconds}s", "reason": "test", "author": "t"}
        status, _, answer = api.handle(
            "POST", PREFIX, {"authorization": f"Bearer {API_TOKEN}"}, orjson.dumps(body)
        )
        assert status == 201, answer
        made: dict[str, Any] = orjson.loads(answer)
        return made

    def click_ack(self, slack: LocalSlack, doc_type: str) -> dict[str, Any]:
        """Acknowledge clicked on the incident's parent in the local Slack: the body it posts,
        signed as it signs it, handled by the service's endpoint; the answer."""
        label = incident_label(self.incident_id(doc_type))
        (parent,) = [m for m in slack.messages if not m.get("thread_ts") and _label(m) == label]
        body = block_actions_body(parent, "#drift-alerts", ACK, slack.url)
        assert body is not None, "the parent has no Acknowledge button"
        headers = signed_headers(SIGNING_SECRET, body, int(self.clock.now))
        handler = SlackInteractions(self.settings.alerting.state_dir, SIGNING_SECRET, self.clock)
        status, _, answer = handler.handle(
            "POST", PATH, {k.lower(): v for k, v in headers.items()}, body.encode()
        )
        assert status == 200, answer
        result: dict[str, Any] = orjson.loads(answer)
        return result

    def received(
        self, doc_type: str, slack: LocalSlack, jira: LocalJira, pagerduty: LocalPagerDuty
    ) -> list[str]:
        """What the local Slack, Jira and PagerDuty received of the incident of ``doc_type``."""
        incident_id = self.incident_id(doc_type)
        alerts = requests.get(f"{pagerduty.url}/_local/alerts", timeout=5).json()["alerts"]
        return notification_kinds(
            incident_label(incident_id),
            dedup_key(incident_id),
            slack.messages,
            issues(jira),
            alerts,
        )


def _label(message: dict[str, Any]) -> str | None:
    metadata = message.get("params", {}).get("metadata")
    return metadata["event_payload"]["incident_label"] if isinstance(metadata, dict) else None
