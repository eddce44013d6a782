"""Jira in the outbox: sending an entry (open or reopen the ticket, an update comment, the
resolution) and reconciling one that may have been sent already.

Opening searches by the incident's hash label before creating, so it needs no
reconciliation; a comment is found again by its exact body, a resolution by the ticket's
status (commented but not transitioned: the transition is finished without a second
comment). An acknowledgement assigns the ticket first (to the acknowledging Slack user's
Jira user, ``routing.jira_users``, else the route's ``jira_assignee``), then comments: the
assignment is idempotent, so a retry after a lost answer repeats it harmlessly, and a
comment found by reconciliation means the assignment was made.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from anchorwatch.alerting.integrations.base import Delivered, Integration, Sender, missing
from anchorwatch.alerting.integrations.jira.notifier import (
    JiraNotifier,
    connect,
    new_issue_fields,
)
from anchorwatch.alerting.integrations.jira.render import (
    jira_ack_comment,
    jira_resolved_comment,
    jira_update_comment,
)
from anchorwatch.alerting.notify import Caller, NotifyError
from anchorwatch.alerting.payload import Note
from anchorwatch.alerting.render import IncidentView
from anchorwatch.alerting.settings import AlertingSettings, JiraSection, RoutingSection
from anchorwatch.alerting.store import OutboxEntry

log = logging.getLogger(__name__)


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


class JiraSender(Sender):
    """One ticket per incident (``JiraNotifier``)."""

    integration = "jira"

    def __init__(
        self,
        notifier: JiraNotifier,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        routing: RoutingSection | None = None,
    ) -> None:
        self._notifier = notifier
        self._clock_ms = clock_ms
        self._routing = routing

    @classmethod
    def from_settings(
        cls,
        settings: JiraSection,
        caller: Caller,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        routing: RoutingSection | None = None,
    ) -> JiraSender:
        notifier = JiraNotifier(
            lambda: connect(settings), settings, caller, clock_ms=clock_ms, routing=routing
        )
        return cls(notifier, clock_ms=clock_ms, routing=routing)

    def _key(self, entry: OutboxEntry) -> str:
        if entry.refs.jira_key is None:
            raise missing("jira", entry.action, "no ticket: opening it failed")
        return entry.refs.jira_key

    def send(self, entry: OutboxEntry) -> Delivered:
        note = Note.of(entry)
        now = self._clock_ms()
        if entry.action == "open":
            ticket = self._notifier.open_or_reopen(note.view, note.history)
            # Opening counts as the first comment for the comment interval.
            return Delivered("sent", {"jira_key": ticket.key, "jira_last_comment_ms": now})
        key = self._key(entry)
        if entry.action == "update":
            last = 0 if note.force_comment else entry.refs.jira_last_comment_ms
            if self._notifier.comment(key, note.view, last_comment_ms=last):
                return Delivered("sent", {"jira_last_comment_ms": self._clock_ms()})
            return Delivered("suppressed")
        if entry.action == "acknowledge":
            self._assign(key, note.view)
            self._notifier.add_comment(key, jira_ack_comment(note.view))
            return Delivered("sent")
        result = self._notifier.resolve(key, note.view)
        if result.error:
            raise missing("jira", "resolve", result.error)
        return Delivered("sent")

    def _assign(self, key: str, view: IncidentView) -> None:
        """Assign the acknowledged ticket when the settings name someone. A user Jira does
        not know is logged and skipped (the comment still says who acknowledged); a
        retryable failure is raised for the outbox to retry the entry."""
        if self._routing is None:
            return
        assignee = self._routing.jira_assignee(view.doc_type, view.acked_by)
        if assignee is None:
            return
        try:
            self._notifier.assign(key, assignee)
        except NotifyError as error:
            if error.retryable:
                raise
            log.error(
                "jira ticket not assigned",
                extra={"key": key, "assignee": assignee, "error": str(error)},
            )

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        if entry.action == "open":
            return None  # open_or_reopen finds the ticket by its label before creating one
        note = Note.of(entry)
        key = self._key(entry)
        bodies = self._notifier.comment_bodies(key)
        if entry.action == "update":
            wanted = jira_update_comment(note.view)
            if any(_same_text(b, wanted) for b in bodies):
                return Delivered("reconciled", {"jira_last_comment_ms": self._clock_ms()})
            return None
        if entry.action == "acknowledge":
            wanted = jira_ack_comment(note.view)
            return Delivered("reconciled") if any(_same_text(b, wanted) for b in bodies) else None
        if self._notifier.is_resolved(key):
            return Delivered("reconciled")
        if not any(_same_text(b, jira_resolved_comment(note.view)) for b in bodies):
            return None
        # Commented, not transitioned: finish the resolution without a second comment.
        if (error := self._notifier.resolve_transition(key)) is not None:
            raise missing("jira", "resolve", error)
        return Delivered("reconciled")


def describe(settings: AlertingSettings, entry: OutboxEntry) -> dict[str, Any]:
    note = Note.of(entry)
    view, jira = note.view, settings.jira
    if entry.action == "open":
        fields = new_issue_fields(
            jira, settings.routing.route_for(view.doc_type), view, note.history
        )
        return {
            "project": fields["project"]["key"],
            "component": settings.routing.route_for(view.doc_type).jira_component,
            "summary": fields["summary"],
            "description": fields["description"],
            "labels": fields["labels"],
            "priority": jira.priorities.get(view.severity),
        }
    if entry.action == "update":
        return {"comment": jira_update_comment(view), "forced": note.force_comment}
    if entry.action == "acknowledge":
        assignee = settings.routing.jira_assignee(view.doc_type, view.acked_by)
        return {"comment": jira_ack_comment(view), "assignee": assignee}
    return {"comment": jira_resolved_comment(view), "transition": jira.resolve_transition}


JIRA = Integration(
    name="jira",
    # A reopened incident reopens its own ticket, then says why in a comment.
    actions={
        "opened": "open",
        "reopened": "open",
        "updated": "update",
        "progress": "update",
        "resolved": "resolve",
        "acknowledged": "acknowledge",  # a comment naming who
    },
    then={"reopened": "updated"},
    enabled=lambda settings: settings.jira.enabled,
    sender=lambda settings, caller: JiraSender.from_settings(
        settings.jira, caller, routing=settings.routing
    ),
    describe=describe,
    rate_per_s=lambda settings: settings.alerting.jira_rate_per_s,
)
