"""The integrations the service knows, in the order each change's entries are written."""

from __future__ import annotations

from typing import Final

from anchorwatch.alerting.integrations.base import Integration
from anchorwatch.alerting.integrations.events import EVENTS
from anchorwatch.alerting.integrations.jira.sender import JIRA
from anchorwatch.alerting.integrations.pagerduty import PAGERDUTY
from anchorwatch.alerting.integrations.slack.sender import SLACK
from anchorwatch.alerting.integrations.webhook import WEBHOOK
from anchorwatch.alerting.settings import AlertingSettings

INTEGRATIONS: Final[tuple[Integration, ...]] = (SLACK, JIRA, PAGERDUTY, WEBHOOK, EVENTS)
BY_NAME: Final[dict[str, Integration]] = {i.name: i for i in INTEGRATIONS}


def enabled(settings: AlertingSettings) -> list[Integration]:
    """The integrations these settings turn on."""
    return [i for i in INTEGRATIONS if i.enabled(settings)]


def named(names: list[str] | tuple[str, ...]) -> list[Integration]:
    """The integrations of these names, in the registry's order; KeyError for an unknown one."""
    unknown = set(names) - set(BY_NAME)
    if unknown:
        raise KeyError(f"unknown integration(s) {sorted(unknown)}; known: {sorted(BY_NAME)}")
    return [i for i in INTEGRATIONS if i.name in names]
