"""Jira: one ticket per incident, found again by its hash label, never duplicated.

``open_or_reopen`` searches first, with one quoted JQL query, for the incident's own ticket
(its ``aw-<hash>`` label, the ticket's identity) or a ticket of exactly the same doc type
(its ``doc-...-<hash>`` label) resolved within the reopen window; it reuses, reopens
(transition by name) or creates accordingly. Another incident's open ticket is never shared.
Each attempt of it searches again, so a retry after an ambiguous failure (a timeout after
Jira created the ticket) finds the ticket instead of creating a second one; a lost local
state is covered the same way. ``comment`` is rate-limited per ticket; ``resolve`` comments
and transitions by name, and a missing transition is a logged error in the result, not an
exception. The doc type's route (``routing.py``) picks the project and component of a new
ticket and adds its owner and runbook to the description; ``assign`` gives the ticket to a
user (on an acknowledgement).

The client is the real ``jira.JIRA`` with its own retries off (``max_retries=0``): every
call goes through the ``Caller`` it is given (in the service one attempt each: the outbox
retries). It is built on first use, inside the call, because its constructor already calls
``serverInfo``. ``comment_bodies``, ``is_resolved`` and ``resolve_transition`` are what the outbox
reconciles with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import requests
from jira import JIRA, JIRAError
from jira.resources import Issue

from anchorwatch.alerting.integrations.jira.render import (
    jira_description,
    jira_labels,
    jira_resolved_comment,
    jira_summary,
    jira_update_comment,
    jql_quote,
)
from anchorwatch.alerting.notify import (
    Caller,
    Permanent,
    Retryable,
    attempt,
    classify,
    failure,
)
from anchorwatch.alerting.render import IncidentView, WindowPoint, incident_label
from anchorwatch.alerting.routing import NO_ROUTE, RouteInfo
from anchorwatch.alerting.settings import JiraSection, RoutingSection

log = logging.getLogger(__name__)

SERVICE = "jira"
T = TypeVar("T")
_SEARCH_FIELDS = "status,labels,resolutiondate,created"


@dataclass(frozen=True)
class JiraTicket:
    key: str
    #: existing: the incident's open ticket; reopened: its own resolved ticket, transitioned
    #: back (the policy re-opened the incident); created: a new ticket.
    action: Literal["existing", "reopened", "created"]


@dataclass(frozen=True)
class JiraResolveResult:
    key: str
    commented: bool
    transitioned: bool
    already_resolved: bool = False
    error: str | None = None  # e.g. the transition does not exist, with the ones that do


def jira_outcome(exc: Exception) -> Retryable | Permanent | None:
    """The outcome of a failed jira/requests call; None for exceptions that are our bugs."""
    if isinstance(exc, JIRAError):
        message = (exc.text or "").strip() or "no error message"
        if exc.status_code is None:
            return Permanent(message)
        headers = exc.response.headers if exc.response is not None else {}
        return failure(classify(exc.status_code, message, headers.get("Retry-After")), message)
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return failure(classify(None, f"connection error: {exc}"), str(exc))
    if isinstance(exc, ValueError):  # a 2xx whose body is not JSON: not a Jira at that URL
        return Permanent(f"unexpected answer (not JSON): {exc}")
    return None


def find_jql(project: str, incident: IncidentView) -> str:
    """The incident's own ticket, by its ``aw-`` hash label (the ticket's identity) and by
    nothing else: a label derived from the doc type could reach a ticket that belongs to
    another incident, and resolving it would close that incident's ticket. A recurrence soon
    after a resolution is the same incident (the policy's ``reopen_within``), so it finds its
    own ticket here and reopens it. Every value is a quoted JQL string."""
    own = f"labels = {jql_quote(incident_label(incident.incident_id))}"
    return f"project = {jql_quote(project)} AND {own} ORDER BY created DESC"


def new_issue_fields(
    settings: JiraSection,
    route: RouteInfo,
    incident: IncidentView,
    history: Sequence[WindowPoint] = (),
) -> dict[str, Any]:
    """The fields of the incident's new ticket, in the route's project and component."""
    fields: dict[str, Any] = {
        "project": {"key": route.jira_project or settings.project},
        "issuetype": {"name": settings.issue_type},
        "summary": jira_summary(incident, settings.summary_template, route),
        "description": jira_description(
            incident, history, route=route, template=settings.description_template
        ),
        "labels": [*jira_labels(incident), *settings.extra_labels],
    }
    if route.jira_component:
        fields["components"] = [{"name": route.jira_component}]
    if priority := settings.priorities.get(incident.severity):
        fields["priority"] = {"name": priority}
    return fields


def _fields(issue: Issue) -> dict[str, Any]:
    raw = issue.raw or {}
    fields: dict[str, Any] = raw.get("fields") or {}
    return fields


def _is_done(issue: Issue) -> bool:
    status = _fields(issue).get("status") or {}
    return bool((status.get("statusCategory") or {}).get("key") == "done")


def connect(settings: JiraSection) -> JIRA:
    """A ``jira.JIRA`` client for the settings, its own retries off (one policy: ours).
    Cloud: ``user`` (the account e-mail) + API token as basic auth; Server/Data Center:
    the token alone as a bearer personal access token."""
    token = settings.token()
    auth: dict[str, Any] = {}
    if token is not None and settings.user:
        auth["basic_auth"] = (settings.user, token.get_secret_value())
    elif token is not None:
        auth["token_auth"] = token.get_secret_value()
    return JIRA(server=settings.url, max_retries=0, timeout=settings.timeout_s, **auth)


class JiraNotifier:
    """One per service; not thread-safe (one client, a per-ticket comment memory)."""

    def __init__(
        self,
        client_factory: Callable[[], JIRA],
        settings: JiraSection,
        retry: Caller,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        routing: RoutingSection | None = None,
    ) -> None:
        self._factory = client_factory
        self._client: JIRA | None = None
        self._settings = settings
        self._routing = routing
        self._retry = retry
        self._clock_ms = clock_ms
        self._last_comment: dict[str, tuple[int, str]] = {}  # key -> (ms, severity)

    @classmethod
    def from_settings(
        cls, settings: JiraSection, retry: Caller, routing: RoutingSection | None = None
    ) -> JiraNotifier:
        return cls(lambda: connect(settings), settings, retry, routing=routing)

    def route(self, incident: IncidentView) -> RouteInfo:
        """The route of the incident's doc type (none without routing settings)."""
        return self._routing.route_for(incident.doc_type) if self._routing else NO_ROUTE

    def project(self, incident: IncidentView) -> str:
        """The project of the incident's ticket: its route's, else ``jira.project``."""
        return self.route(incident).jira_project or self._settings.project

    # ----------------------------------------------------------------- plumbing

    def _call(self, operation: str, fn: Callable[[JIRA], T]) -> T:
        def once() -> T:
            if self._client is None:
                self._client = self._factory()
            return fn(self._client)

        return self._retry.call(
            lambda: attempt(SERVICE, operation, once, jira_outcome),
            service=SERVICE,
            operation=operation,
        )

    @staticmethod
    def _search(client: JIRA, jql: str) -> list[Issue]:
        found = client.search_issues(jql, maxResults=20, fields=_SEARCH_FIELDS)
        if isinstance(found, dict):  # only with json_result=True
            raise ValueError("search returned JSON instead of issues")
        return list(found)

    @staticmethod
    def _transition_id(client: JIRA, key: str, name: str) -> tuple[str | None, list[str]]:
        transitions = client.transitions(key)
        names = [str(t["name"]) for t in transitions]
        for t in transitions:
            if str(t["name"]).lower() == name.lower():
                return str(t["id"]), names
        return None, names

    def _remember(self, key: str, severity: str) -> None:
        self._last_comment[key] = (self._clock_ms(), severity)

    # ----------------------------------------------------------------- open

    def open_or_reopen(
        self, incident: IncidentView, history: Sequence[WindowPoint] = ()
    ) -> JiraTicket:
        ticket = self._call("open_or_reopen", lambda c: self._open_once(c, incident, history))
        self._remember(ticket.key, incident.severity)
        log.info(
            "jira ticket",
            extra={
                "key": ticket.key,
                "action": ticket.action,
                "incident_label": incident_label(incident.incident_id),
            },
        )
        return ticket

    def _open_once(
        self, client: JIRA, incident: IncidentView, history: Sequence[WindowPoint]
    ) -> JiraTicket:
        s = self._settings
        label = incident_label(incident.incident_id)
        project = self.project(incident)
        issues = self._search(client, find_jql(project, incident))
        # Labels compare exactly here: a search may match labels case-insensitively.
        own = [i for i in issues if label in (_fields(i).get("labels") or [])]
        for issue in sorted(own, key=_is_done):
            if _is_done(issue):
                if not self._reopen(client, issue.key):
                    continue
                return JiraTicket(issue.key, "reopened")
            return JiraTicket(issue.key, "existing")
        fields = new_issue_fields(s, self.route(incident), incident, history)
        created = client.create_issue(fields=fields, prefetch=False)
        return JiraTicket(str(created.key), "created")

    def _reopen(self, client: JIRA, key: str) -> bool:
        name = self._settings.reopen_transition
        tid, available = self._transition_id(client, key, name)
        if tid is None:
            log.error(
                "jira reopen transition missing: opening a new ticket instead",
                extra={"key": key, "transition": name, "available": available},
            )
            return False
        client.transition_issue(key, tid)
        return True

    # ----------------------------------------------------------------- comment

    def comment(
        self, key: str, incident: IncidentView, *, last_comment_ms: int | None = None
    ) -> bool:
        """An update comment unless one was written less than ``comment_interval_s`` ago
        (by this notifier, or at ``last_comment_ms`` when the caller keeps that time); a
        change of severity always comments (and updates the priority). True if written."""
        now = self._clock_ms()
        last_ms, last_severity = self._last_comment.get(key, (None, None))
        if last_comment_ms is not None:
            last_ms = last_comment_ms
        escalated = last_severity is not None and last_severity != incident.severity
        interval_ms = self._settings.comment_interval_s * 1000
        if last_ms is not None and now - last_ms < interval_ms and not escalated:
            return False
        body = jira_update_comment(incident)
        self._call("comment", lambda c: c.add_comment(key, body))
        self._remember(key, incident.severity)
        if escalated and (priority := self._settings.priorities.get(incident.severity)):
            try:
                self._call(
                    "priority",
                    lambda c: c.issue(key, fields="priority").update(
                        fields={"priority": {"name": priority}}
                    ),
                )
            except Exception as error:  # the comment is what matters; say and go on
                log.error("jira priority not updated", extra={"key": key, "error": str(error)})
        return True

    def add_comment(self, key: str, body: str) -> None:
        """A comment as it is, whatever the comment interval (an acknowledgement)."""
        self._call("comment", lambda c: c.add_comment(key, body))

    def assign(self, key: str, assignee: str) -> None:
        """Give the ticket to ``assignee`` (found by Jira's user search, then
        ``PUT issue/{key}/assignee``); idempotent, so a retry is harmless."""
        self._call("assign", lambda c: c.assign_issue(key, assignee))
        log.info("jira ticket assigned", extra={"key": key, "assignee": assignee})

    # ----------------------------------------------------------------- resolve

    def resolve(self, key: str, incident: IncidentView) -> JiraResolveResult:
        """A resolution comment, then the configured transition by name. Already resolved:
        nothing is written (a repeated resolve after a lost state stays silent)."""
        if self.is_resolved(key):
            return JiraResolveResult(key, False, False, already_resolved=True)
        body = jira_resolved_comment(incident)
        self._call("comment", lambda c: c.add_comment(key, body))
        if (error := self.resolve_transition(key)) is not None:
            return JiraResolveResult(key, True, False, error=error)
        self._last_comment.pop(key, None)
        return JiraResolveResult(key, True, True)

    def resolve_transition(self, key: str) -> str | None:
        """Move the ticket by the configured resolve transition; what is wrong if it has none."""
        name = self._settings.resolve_transition
        tid, available = self._call("transitions", lambda c: self._transition_id(c, key, name))
        if tid is None:
            log.error(
                "jira resolve transition missing",
                extra={"key": key, "transition": name, "available": available},
            )
            return f"transition {name!r} not available on {key}; available: {available}"
        self._call("transition", lambda c: c.transition_issue(key, tid))
        return None

    # ----------------------------------------------------------------- reading back

    def comment_bodies(self, key: str) -> list[str]:
        return [str(c.body) for c in self._call("get.comments", lambda c: c.comments(key))]

    def is_resolved(self, key: str) -> bool:
        return _is_done(self._call("get", lambda c: c.issue(key, fields="status")))
