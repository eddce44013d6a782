"""Who owns a doc type's incidents, and where they go: ``[[routing.routes]]`` (doc-type
patterns, first match wins) over ``[routing.default_route]``, resolved into a ``RouteInfo``
that the Slack and Jira integrations render from. Pure: no I/O.

A route names the owner (free text shown in messages, an optional Slack user or user group
to mention, an optional Jira assignee), the Slack channel (and per-severity channels), the
Jira project and component, and a runbook URL. A matched route's unset fields fall back to
the default route's, then to ``[jira] project`` and ``[routing] default_channel``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from pydantic import Field, field_validator

from anchorwatch.alerting.render import Severity
from anchorwatch.alerting.secret_fields import http_url
from anchorwatch.settings import Section

# A channel name (#ops-alerts, ops-alerts) or a conversation id (C0123ABCD).
_CHANNEL = re.compile(r"^(#?[a-z0-9][a-z0-9._-]{0,79}|[CGD][A-Z0-9]{6,})$")
PROJECT_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,19}$")
# A Slack user (U.../W...) or user group (S...) id: nothing else can go in a mention.
_MENTION = re.compile(r"^[UWS][A-Z0-9]{2,30}$")
# Jira components and assignees are names, account ids or e-mail addresses: one line.
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")


def check_channel(value: str) -> str:
    if not _CHANNEL.match(value):
        raise ValueError(
            f"{value!r} is not a Slack channel: #name (lower case, digits, . _ -) or an id"
        )
    return value


@dataclass(frozen=True)
class RouteInfo:
    """What the route of an incident's doc type says (``RoutingSection.route_for``)."""

    owner: str | None = None
    slack_mention: str | None = None  # a user (U.../W...) or user group (S...) id
    runbook_url: str | None = None
    jira_project: str | None = None  # None: [jira] project
    jira_component: str | None = None
    jira_assignee: str | None = None

    @property
    def mention(self) -> str | None:
        """The Slack mention of ``slack_mention`` (the id is checked at load)."""
        if self.slack_mention is None:
            return None
        if self.slack_mention.startswith("S"):
            return f"<!subteam^{self.slack_mention}>"
        return f"<@{self.slack_mention}>"


NO_ROUTE = RouteInfo()


class DefaultRoute(Section):
    """Owner, Jira target and runbook of doc types no route matches (and the fallback of
    each field a matching route leaves unset)."""

    owner: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Team or person owning the incidents, shown in the Slack parent and the "
        "Jira description.",
    )
    slack_mention: str | None = Field(
        None,
        description="Slack user (U…/W…) or user group (S…) id mentioned next to the owner in "
        "the parent message.",
    )
    jira_assignee: str | None = Field(
        None,
        description="Jira user the ticket is assigned to when the incident is acknowledged in "
        "Slack (as Jira's user search finds it: Server user name; Cloud e-mail or name); "
        "routing.jira_users wins for the user who acknowledged.",
    )
    jira_project: str | None = Field(None, description="Jira project key (unset: jira.project).")
    jira_component: str | None = Field(
        None, description="Jira component (by name) set on new tickets."
    )
    runbook_url: str | None = Field(
        None, description="Runbook linked from the Slack parent and the Jira description."
    )

    @field_validator("slack_mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is not None and not _MENTION.match(value):
            raise ValueError(f"{value!r} is not a Slack user (U…, W…) or user group (S…) id")
        return value

    @field_validator("jira_project")
    @classmethod
    def _project(cls, value: str | None) -> str | None:
        if value is not None and not PROJECT_KEY.match(value):
            raise ValueError("must be a Jira project key: capital letters, digits, '_'")
        return value

    @field_validator("jira_assignee", "jira_component", "owner")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is not None and (not _NAME.match(value) or not value.strip()):
            raise ValueError("one line of 1-255 characters, not blank")
        return value

    @field_validator("runbook_url")
    @classmethod
    def _runbook(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "runbook_url")


class Route(DefaultRoute):
    """The route of the doc types matching one of its patterns (first route wins)."""

    doc_types: list[str] = Field(
        min_length=1,
        description='Doc types as shell patterns, case-sensitive: "medical_*", "invoice".',
    )
    channel: str | None = Field(
        None,
        description="Slack channel of these doc types; routing.severity_channels still wins "
        "for the severities it names (unless this route's severity_channels does).",
    )
    severity_channels: dict[Severity, str] = Field(
        default_factory=dict,
        description='This route\'s channel per severity, e.g. {"critical": "#team-a-pager"}; '
        "wins over routing.severity_channels.",
    )

    @field_validator("doc_types")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        if any(not p for p in value):
            raise ValueError("a pattern must not be empty")
        return value

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str | None) -> str | None:
        return None if value is None else check_channel(value)

    @field_validator("severity_channels")
    @classmethod
    def _channels(cls, value: dict[Severity, str]) -> dict[Severity, str]:
        for channel in value.values():
            check_channel(channel)
        return value

    def matches(self, doc_type: str) -> bool:
        return any(fnmatchcase(doc_type, p) for p in self.doc_types)


def first_route(routes: list[Route], doc_type: str) -> Route | None:
    return next((r for r in routes if r.matches(doc_type)), None)


def resolve(route: Route | None, default: DefaultRoute) -> RouteInfo:
    """The route's fields, each unset one taken from the default route."""

    def pick(name: str) -> str | None:
        value: str | None = getattr(route, name) if route is not None else None
        fallback: str | None = getattr(default, name)
        return value if value is not None else fallback

    return RouteInfo(
        owner=pick("owner"),
        slack_mention=pick("slack_mention"),
        runbook_url=pick("runbook_url"),
        jira_project=pick("jira_project"),
        jira_component=pick("jira_component"),
        jira_assignee=pick("jira_assignee"),
    )


def route_channel(
    route: Route | None,
    severity: Severity,
    *,
    exact: str | None,
    severity_channels: dict[Severity, str],
    default: str,
) -> str:
    """The channel, most specific first: ``doc_type_channels`` (the exact type), the route's
    own channel for the severity, ``severity_channels`` (so critical still goes to the
    pager channel), the route's channel, ``default_channel``."""
    return (
        exact
        or (route.severity_channels.get(severity) if route else None)
        or severity_channels.get(severity)
        or (route.channel if route else None)
        or default
    )
