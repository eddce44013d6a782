"""An issue of the local Jira: its workflow and statuses, the checks Jira makes of a new
issue's fields, its JSON views (REST v2, v3 with Atlassian Document Format bodies) and how
it reads for a JQL field. Pure: the server keeps the issues and the clock.

An issue is a dict: ``id``, ``key``, ``project``, ``number`` (project, n), ``fields``
(times as epoch ms), ``comments`` (as the REST API shows them) and ``history`` (the
transitions made).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from anchorwatch.alerting.fakes.jql import KNOWN_FIELDS, unknown_field

STATUSES = {
    "To Do": {"id": "10000", "category": ("new", "To Do", 2)},
    "In Progress": {"id": "3", "category": ("indeterminate", "In Progress", 4)},
    "Done": {"id": "10001", "category": ("done", "Done", 3)},
}
WORKFLOW = [  # (id, name, from statuses, to status)
    ("11", "Start Progress", ("To Do",), "In Progress"),
    ("21", "Stop Progress", ("In Progress",), "To Do"),
    ("31", "Done", ("To Do", "In Progress"), "Done"),
    ("41", "Reopen", ("Done",), "To Do"),
]
PRIORITIES = ["Highest", "High", "Medium", "Low", "Lowest"]
ISSUE_TYPES = {"Task": "10002", "Bug": "10004", "Incident": "10005"}
FIELDS = [  # what GET field returns: the client maps JQL clause names to field ids with it
    ("summary", "Summary"),
    ("description", "Description"),
    ("labels", "Labels"),
    ("priority", "Priority"),
    ("status", "Status"),
    ("resolution", "Resolution"),
    ("resolutiondate", "Resolved"),
    ("created", "Created"),
    ("updated", "Updated"),
    ("issuetype", "Issue Type"),
    ("project", "Project"),
    ("comment", "Comment"),
]
#: Fields a new issue may set; any other is refused as Jira refuses fields not on its screen.
CREATE_FIELDS = frozenset(
    {"project", "issuetype", "summary", "description", "labels", "priority", "components"}
)
#: The users the local Jira knows (``user/search``, ``PUT issue/{key}/assignee``).
DEFAULT_USERS = (
    {
        "name": "local-user",
        "accountId": "5b10a2844c20165700ede21g",
        "displayName": "Local User",
        "emailAddress": "local-user@example.com",
    },
    {
        "name": "oncall",
        "accountId": "5b10ac8d82e05b22cc7d4ef5",
        "displayName": "On Call",
        "emailAddress": "oncall@example.com",
    },
)
TEXT_MAX = 32_767


def jira_time(ms: int) -> str:
    """Jira's timestamp format, e.g. 2026-01-05T14:03:00.000+0000."""
    stamp = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}+0000"


def adf_text(doc: Any) -> str:
    """The plain text of an Atlassian Document Format value (v3 bodies)."""
    if isinstance(doc, dict):
        if doc.get("type") == "text":
            return str(doc.get("text", ""))
        return "".join(adf_text(c) for c in doc.get("content", []))
    return ""


def body_text(value: Any, version: str) -> tuple[str, str | None]:
    """A description or comment body (a string on v2, an ADF document on v3) as text, or
    Jira's complaint about it."""
    if version == "3":
        if value in ("", None):
            return "", None
        if not isinstance(value, dict) or value.get("type") != "doc":
            return "", "Operation value must be an Atlassian Document (ADF)"
        value = adf_text(value)
    elif value is None:
        value = ""
    elif not isinstance(value, str):
        return "", "Operation value must be a string"
    if _utf16(value) > TEXT_MAX:
        return "", (
            "The entered text is too long. It exceeds the allowed limit of 32,767 characters."
        )
    return value, None


@dataclass(frozen=True)
class NewIssue:
    project: str
    issue_type: str
    summary: str
    description: str
    labels: list[str]
    priority: str
    components: list[str]


def check_new_issue(
    fields: dict[str, Any], version: str, projects: dict[str, str]
) -> NewIssue | dict[str, str]:
    """The new issue ``fields`` ask for, or Jira's field errors (field -> message)."""
    errors: dict[str, str] = {}
    project = fields.get("project") or {}
    pkey = str(project.get("key") or "").upper() or next(
        (k for k, v in projects.items() if v == str(project.get("id"))), ""
    )
    if pkey not in projects:
        errors["project"] = "valid project is required"
    itype = fields.get("issuetype") or {}
    type_name = itype.get("name") or next(
        (n for n, i in ISSUE_TYPES.items() if i == str(itype.get("id"))), None
    )
    if type_name not in ISSUE_TYPES:
        errors["issuetype"] = "valid issue type is required"
    summary = fields.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        errors["summary"] = "You must specify a summary of the issue."
    elif "\n" in summary or "\r" in summary:
        errors["summary"] = "The summary is invalid because it contains newline characters."
    elif _utf16(summary) > 255:
        errors["summary"] = "Summary must be less than 255 characters."
    description, problem = body_text(fields.get("description", ""), version)
    if problem:
        errors["description"] = problem
    labels = fields.get("labels") or []
    for label in labels:
        if not isinstance(label, str) or any(c.isspace() for c in label):
            errors["labels"] = f"The label '{label}' contains spaces which is invalid."
        elif len(label) > 255:
            errors["labels"] = f"The label '{label}' exceeds the 255 character limit."
    priority = (fields.get("priority") or {}).get("name", "Medium")
    if priority not in PRIORITIES:
        errors["priority"] = f"Priority name '{priority}' is not valid"
    components = [
        c.get("name") if isinstance(c, dict) else None for c in fields.get("components") or []
    ]
    if not all(isinstance(c, str) and c.strip() for c in components):
        errors["components"] = "Component name is not valid"
    for name in sorted(set(fields) - CREATE_FIELDS):
        errors[name] = (
            f"Field '{name}' cannot be set. It is not on the appropriate screen, or unknown."
        )
    if errors or type_name is None or not isinstance(summary, str):
        return errors
    names = [str(c) for c in components]
    return NewIssue(pkey, type_name, summary, description, list(labels), priority, names)


def find_users(users: list[dict[str, str]], term: str) -> list[dict[str, str]]:
    """The users ``user/search`` answers: ``term`` in their name, account id, display name
    or e-mail address, case-insensitively (as Jira Server matches ``username``)."""
    term = term.lower()
    return [u for u in users if any(term in str(v).lower() for v in u.values())]


def find_user(users: list[dict[str, str]], body: dict[str, Any]) -> dict[str, str] | None:
    """The user ``PUT issue/{key}/assignee`` names: ``name`` (Server) or ``accountId``
    (Cloud), exactly."""
    for field in ("accountId", "name"):
        if isinstance(value := body.get(field), str):
            return next((u for u in users if u[field] == value), None)
    return None


def issue_json(
    issue: dict[str, Any],
    version: str,
    *,
    url: str,
    projects: dict[str, str],
    wanted: set[str] | None = None,
) -> dict[str, Any]:
    """The issue as ``GET issue/{key}`` (and a search) returns it; ``wanted``: the fields
    asked for."""
    f = issue["fields"]
    key, cat_name, cat_id = STATUSES[f["status"]]["category"]
    description: Any = f["description"]
    if version == "3" and description:
        description = {
            "type": "doc",
            "version": 1,
            "content": [{"type": "paragraph", "content": [{"type": "text", "text": description}]}],
        }
    fields = {
        "summary": f["summary"],
        "description": description,
        "labels": list(f["labels"]),
        "priority": {"name": f["priority"], "id": str(PRIORITIES.index(f["priority"]) + 1)},
        "issuetype": {"name": f["issuetype"], "id": ISSUE_TYPES[f["issuetype"]]},
        "project": {"key": issue["project"], "id": projects[issue["project"]]},
        "status": {
            "name": f["status"],
            "id": STATUSES[f["status"]]["id"],
            "statusCategory": {"key": key, "name": cat_name, "id": cat_id},
        },
        "resolution": {"name": f["resolution"]} if f["resolution"] else None,
        "components": [{"name": c} for c in f.get("components") or []],
        "assignee": f.get("assignee"),
        "resolutiondate": jira_time(f["resolutiondate"]) if f["resolutiondate"] else None,
        "created": jira_time(f["created"]),
        "updated": jira_time(f["updated"]),
        "comment": {
            "comments": issue["comments"],
            "total": len(issue["comments"]),
            "startAt": 0,
            "maxResults": len(issue["comments"]),
        },
    }
    if wanted and not wanted & {"*all", "*navigable"}:
        fields = {k: v for k, v in fields.items() if k in wanted}
    return {
        "id": issue["id"],
        "key": issue["key"],
        "self": f"{url}/rest/api/{version}/issue/{issue['id']}",
        "fields": fields,
    }


def field_value(issue: dict[str, Any], name: str) -> Any:
    """How an issue reads for a JQL field."""
    f = issue["fields"]
    status = f["status"]
    return (
        {
            "project": issue["project"],
            "labels": f["labels"],
            "status": status,
            "statuscategory": STATUSES[status]["category"][1],
            "resolution": f["resolution"],
            "resolutiondate": f["resolutiondate"],
            "resolved": f["resolutiondate"],
            "created": f["created"],
            "createddate": f["created"],
            "updated": f["updated"],
            "key": issue["number"],
            "issue": issue["number"],
            "issuekey": issue["number"],
            "summary": f["summary"],
            "text": f["summary"] + " " + f["description"],
            "description": f["description"],
            "priority": f["priority"],
            "issuetype": f["issuetype"],
            "type": f["issuetype"],
        }[name]
        if name in KNOWN_FIELDS
        else unknown_field(name)
    )


def _utf16(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)
