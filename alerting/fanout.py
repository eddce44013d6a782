"""One incident change to its outbox entries: one per configured integration that acts on
the change's kind, each integration's follow-up after them, seqs in order.

An integration may route changes (``Integration.routes``: the paging receivers, by the
incident's severity): a change it does not route writes no entry for it.

Muting (``silences.py``) narrows who gets a change: integrations that carry the downstream
drift event still get it (a silence is for people, not for the systems that act on drift);
the ones that post for people (Slack, Jira) do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from anchorwatch.alerting.integrations.base import Integration
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import BatchWrite, NewEntry

#: Who a change goes to: every integration, those that post for people, or the event ones.
Audience = Literal["all", "people", "events"]


def _reaches(integration: Integration, audience: Audience) -> bool:
    if audience == "all":
        return True
    return (integration.carries == "event") == (audience == "events")


class Fanout:
    def __init__(self, settings: AlertingSettings, integrations: Sequence[Integration]) -> None:
        self._settings = settings
        self._integrations = integrations

    def enqueue(
        self,
        write: BatchWrite,
        consumed_ms: int,
        incident_id: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        event: dict[str, Any] | None = None,
        *,
        only: str | None = None,
        audience: Audience = "all",
    ) -> int:
        """The entries of one kind, one per integration that acts on it (``only``: that
        integration alone); the next seq."""
        for integration in self._integrations:
            action = integration.actions.get(kind)
            if action is None or (only is not None and integration.name != only):
                continue
            if not _reaches(integration, audience):
                continue
            if not integration.routes(self._settings, kind, payload):
                continue  # not its severity (the paging receivers)
            body = payload
            if integration.carries == "event":
                if event is None:
                    continue
                body = {"event": event}
            write.outbox.append(
                NewEntry(incident_id, seq, integration.name, action, kind, body, consumed_ms)
            )
        return seq + 1

    def enqueue_change(
        self,
        write: BatchWrite,
        consumed_ms: int,
        incident_id: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        event: dict[str, Any] | None = None,
        *,
        audience: Audience = "all",
    ) -> int:
        """The entries of one change, then each integration's follow-up of that kind (its
        own seq, after them); the next seq."""
        seq = self.enqueue(
            write, consumed_ms, incident_id, seq, kind, payload, event, audience=audience
        )
        for integration in self._integrations:
            then = integration.then.get(kind)
            if (
                then
                and _reaches(integration, audience)
                and integration.then_if(self._settings, payload)
            ):
                seq = self.enqueue(
                    write, consumed_ms, incident_id, seq, then, payload, only=integration.name
                )
        return seq
