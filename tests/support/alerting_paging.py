"""The paging receivers in the alerting tests: settings that turn PagerDuty and the webhook on
against the local servers (``with_paging``), and what those servers received."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY, LocalPagerDuty
from anchorwatch.alerting.fakes.webhook import LocalWebhook
from anchorwatch.alerting.integrations.paging_settings import PagerDutySection, WebhookSection
from anchorwatch.alerting.settings import AlertingSettings
from tests.support.alerting_harness import Harness

HOOK_TOKEN = "hook-bearer-token"


def with_paging(
    settings: AlertingSettings,
    *,
    pagerduty: LocalPagerDuty | None = None,
    hook: LocalWebhook | None = None,
    pagerduty_severities: Sequence[str] = ("critical",),
    webhook_severities: Sequence[str] = ("warning", "critical"),
    **webhook: Any,
) -> AlertingSettings:
    """``settings`` with PagerDuty and/or the webhook on, sending to these local servers
    (``webhook``: more of the ``[webhook]`` settings)."""
    update: dict[str, Any] = {}
    if pagerduty is not None:
        update["pagerduty"] = PagerDutySection.model_validate(
            {
                "enabled": True,
                "url": pagerduty.enqueue_url,
                "routing_key": LOCAL_ROUTING_KEY,
                "severities": list(pagerduty_severities),
            }
        )
    if hook is not None:
        update["webhook"] = WebhookSection.model_validate(
            {
                "enabled": True,
                "url": hook.hook_url,
                "severities": list(webhook_severities),
                **webhook,
            }
        )
    return settings.model_copy(update=update)


def incident_ids(h: Harness, doc_type: str) -> list[str]:
    rows = h.store.list_incidents(open_only=False, limit=1000)
    return [r.row.incident_id for r in rows if r.row.doc_type == doc_type]


def rows_of(h: Harness, integration: str) -> list[dict[str, Any]]:
    """The integration's outbox rows, in the order they were written."""
    return [r for r in h.store.outbox_rows() if r["integration"] == integration]


def bodies(receiver: LocalWebhook) -> list[dict[str, Any]]:
    with receiver.lock:
        return [dict(b["body"]) for b in receiver.bodies]
