"""Dry run: any integration's entries logged (a JSON line each, what would be sent as its
``describe`` renders it) and marked done; nothing is sent."""

from __future__ import annotations

import logging

from anchorwatch.alerting.integrations.base import Delivered, Integration, Sender
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import OutboxEntry

log = logging.getLogger(__name__)


class DryRunSender(Sender):
    def __init__(self, integration: Integration, settings: AlertingSettings) -> None:
        self.integration = integration.name
        self._describe = integration.describe
        self._settings = settings

    def send(self, entry: OutboxEntry) -> Delivered:
        log.info(
            "dry run: would send",
            extra={**entry.log_fields(), "would_send": self._describe(self._settings, entry)},
        )
        return Delivered("dry_run")
