"""A local Jira that speaks the REST endpoints the `jira` client calls for the notifier, with
failure injection. For tests and for seeing tickets without a Jira site.

REST (v2, and v3 where the body format differs: v3 takes Atlassian Document Format):
``GET serverInfo`` (the client calls it on construction), ``GET field`` (before a search),
``GET myself``, ``GET /rest/auth/1/session``, ``GET|POST search`` (Server/Data Center) and
``GET|POST search/jql`` (Cloud; ``search`` answers 410 there as it does on Cloud),
``POST issue``, ``GET|PUT issue/{key}``, ``GET|POST issue/{key}/comment``,
``GET|POST issue/{key}/transitions``, ``GET user/search`` (``username`` on Server,
``query`` on Cloud) and ``PUT issue/{key}/assignee`` (``name`` on Server, ``accountId`` on
Cloud; an unknown user is a 400) over the users it is given (``DEFAULT_USERS``); new
issues take ``components``. A JQL error (``jql.py``: parsed as strictly as Jira
does) is a 400 with Jira's error body ``{"errorMessages": [...], "errors": {...}}``; field
validation errors (``jira_issues.py``: summary over 255 characters or with a newline, labels
with spaces, unknown project/issue type/priority, texts over 32,767 characters) come back
the same way.

The workflow: To Do --Start Progress--> In Progress --Done--> Done --Reopen--> To Do (Done is
also available from To Do; Stop Progress goes back). Done sets resolution and
resolutiondate; Reopen clears them.

Inspection: ``GET /_local/issues`` (every issue with its comments and transition history),
``GET /_local/requests``; a page for people at ``GET /`` (see ``pages.py``). Control (see
``server.py``): ``POST /_local/faults`` (``{"method": "create", "status": 503, "times": 3}``;
methods ``serverInfo``, ``field``, ``search``, ``create``, ``get``, ``edit``, ``comment``,
``transitions`` (GET), ``transition`` (POST), ``*``; ``error`` is put in
``errorMessages``; ``{"hide_transition": "Done"}`` removes a transition from the
workflow), ``DELETE /_local/faults``, ``POST /_local/clock
{"advance_s": 7200}`` (moves the server's clock for resolution-date queries),
``POST /_local/reset``.
"""

from __future__ import annotations

import base64
import itertools
import re
import time
from collections.abc import Callable
from typing import Any

from anchorwatch.alerting.fakes.jira_issues import (
    DEFAULT_USERS,
    FIELDS,
    STATUSES,
    WORKFLOW,
    NewIssue,
    body_text,
    check_new_issue,
    field_value,
    find_user,
    find_users,
    issue_json,
    jira_time,
)
from anchorwatch.alerting.fakes.jql import JqlError, search
from anchorwatch.alerting.fakes.pages import jira_issue_page, jira_list_page, jira_not_found
from anchorwatch.alerting.fakes.server import Fault, LocalServer, Request, Response, form_or_json

# --------------------------------------------------------------------------- the server

_ISSUE_PATH = re.compile(
    r"^/rest/api/(2|3|latest)/issue/([^/]+)(?:/(comment|transitions|assignee))?$"
)
_NOT_FOUND = "Issue does not exist or you do not have permission to see it."


def jira_error(
    status: int,
    messages: list[str] | None = None,
    errors: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """Jira's error body: ``{"errorMessages": [...], "errors": {field: message}}``."""
    body = {"errorMessages": messages or [], "errors": errors or {}}
    return Response.json(body, status, **(headers or {}))


class LocalJira(LocalServer):
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        projects: tuple[str, ...] = ("OPS",),
        deployment: str = "Server",
        credentials: tuple[str, str] | None = None,
        clock_ms: Callable[[], int] | None = None,
        users: tuple[dict[str, str], ...] = DEFAULT_USERS,
    ) -> None:
        super().__init__(host, port)
        self.users = [dict(u) for u in users]
        if deployment not in ("Server", "Cloud"):
            raise ValueError("deployment: Server or Cloud")
        self.projects = {key: str(10000 + i) for i, key in enumerate(projects)}
        self.deployment = deployment
        # (user, token): basic auth; ("", token): a bearer token; None: no check.
        self.credentials = credentials
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._offset_ms = 0
        self._ids = itertools.count(10001)
        self._comment_ids = itertools.count(20001)
        self._numbers: dict[str, itertools.count[int]] = {p: itertools.count(1) for p in projects}
        self.issues: dict[str, dict[str, Any]] = {}  # key -> stored issue
        self.requests: list[dict[str, Any]] = []

    def now_ms(self) -> int:
        return self._clock_ms() + self._offset_ms

    # ----------------------------------------------------------------- dispatch

    def handle(self, request: Request) -> Response:
        path, method = request.path, request.method
        if method == "GET" and (path == "/" or path.startswith("/browse/")):
            return Response.text(self._page(path, request.query), content_type="text/html")
        if path.startswith("/_local/"):
            return self._local(request)
        op, key, version = self._operation(method, path)
        if op is None:
            return jira_error(404, [f"No endpoint {method} {path}"])

        def carry_out(dropped: bool) -> Response:
            if (denied := self._authenticate(request)) is not None:
                self._log(op, 401, key, path)
                return denied
            with self.lock:
                response = self._route(op, key, version, request)
            self._log(op, response.status, key, path, "answer dropped" if dropped else None)
            return response

        return self.faulted(
            op,
            carry_out,
            note=lambda fault: self._log(op, fault.status, key, path, "fault"),
            kind=lambda fault: fault.hide_transition is None,
        )

    def _operation(self, method: str, path: str) -> tuple[str | None, str | None, str]:
        """(operation name, issue key, API version) of a REST call; None: no such endpoint."""
        if path == "/rest/auth/1/session" and method == "GET":
            return "session", None, "2"
        m = re.match(r"^/rest/api/(2|3|latest)/(.*)$", path)
        if not m:
            return None, None, "2"
        version, rest = m.group(1), m.group(2)
        simple = {
            ("GET", "serverInfo"): "serverInfo",
            ("GET", "field"): "field",
            ("GET", "myself"): "myself",
            ("GET", "search"): "search",
            ("POST", "search"): "search",
            ("GET", "search/jql"): "search",
            ("POST", "search/jql"): "search",
            ("POST", "issue"): "create",
            ("GET", "user/search"): "users",
        }
        if (method, rest) in simple:
            return simple[(method, rest)], None, version
        if im := _ISSUE_PATH.match(path):
            key, sub = im.group(2), im.group(3)
            op = {
                ("GET", None): "get",
                ("PUT", None): "edit",
                ("GET", "comment"): "comments",
                ("POST", "comment"): "comment",
                ("GET", "transitions"): "transitions",
                ("POST", "transitions"): "transition",
                ("PUT", "assignee"): "assign",
            }.get((method, sub))
            return op, key, version
        return None, None, version

    def _authenticate(self, request: Request) -> Response | None:
        if self.credentials is None:
            return None
        user, token = self.credentials
        auth = request.headers.get("authorization", "")
        if user:
            expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        else:
            expected = f"Bearer {token}"
        if auth != expected:
            return jira_error(
                401,
                ["You are not authenticated. Authentication required to perform this operation."],
            )
        return None

    def fault_answer(self, method: str, fault: Fault, headers: dict[str, str]) -> Response:
        defaults = {429: "Rate limit exceeded.", 503: "Service Unavailable"}
        message = fault.error or defaults.get(fault.status, f"HTTP {fault.status} (local Jira)")
        return jira_error(fault.status, [message], headers=headers)

    def _log(
        self, op: str, status: int, key: str | None, path: str, note: str | None = None
    ) -> None:
        with self.lock:
            self.requests.append(
                {
                    "op": op,
                    "status": status,
                    "key": key,
                    "path": path,
                    "note": note,
                    "at": time.time(),
                }
            )

    def _route(self, op: str, key: str | None, version: str, request: Request) -> Response:
        if op == "serverInfo":
            return Response.json(self._server_info())
        if op == "field":
            return Response.json(
                [
                    {
                        "id": fid,
                        "key": fid,
                        "name": name,
                        "custom": False,
                        "navigable": True,
                        "searchable": True,
                        "clauseNames": [fid],
                    }
                    for fid, name in FIELDS
                ]
            )
        if op in ("myself", "session"):
            return Response.json(
                {
                    "name": "anchorwatch",
                    "displayName": "anchorwatch (local)",
                    "accountId": "local-anchorwatch",
                    "active": True,
                }
            )
        if op == "search":
            return self._search(request)
        if op == "create":
            return self._create(request, version)
        if op == "users":
            term = (request.query.get("query") or request.query.get("username") or [""])[-1]
            found = find_users(self.users, term) if term else []
            return Response.json([self._user_json(u) for u in found])
        issue = self._find(key or "")
        if issue is None:
            return jira_error(404, [_NOT_FOUND])
        if op == "get":
            return Response.json(self._issue_json(issue, version))
        if op == "edit":
            return self._edit(issue, request)
        if op == "comments":
            comments = issue["comments"]
            return Response.json(
                {
                    "comments": comments,
                    "startAt": 0,
                    "maxResults": len(comments),
                    "total": len(comments),
                }
            )
        if op == "comment":
            return self._comment(issue, request, version)
        if op == "transitions":
            return Response.json({"expand": "transitions", "transitions": self._available(issue)})
        if op == "assign":
            return self._assign(issue, request)
        return self._transition(issue, request)

    # ----------------------------------------------------------------- endpoints

    def _server_info(self) -> dict[str, Any]:
        cloud = self.deployment == "Cloud"
        return {
            "baseUrl": self.url,
            "version": "1001.0.0-SNAPSHOT" if cloud else "9.12.15",
            "versionNumbers": [1001, 0, 0] if cloud else [9, 12, 15],
            "deploymentType": self.deployment,
            "buildNumber": 100_000 if cloud else 9_120_015,
            "serverTime": jira_time(self.now_ms()),
            "serverTitle": "anchorwatch local Jira",
        }

    def _find(self, key_or_id: str) -> dict[str, Any] | None:
        if key_or_id in self.issues:
            return self.issues[key_or_id]
        return next((i for i in self.issues.values() if i["id"] == key_or_id), None)

    def _search(self, request: Request) -> Response:
        cloud_path = request.path.endswith("/search/jql")
        if self.deployment == "Cloud" and not cloud_path:
            return jira_error(
                410,
                [
                    "The requested API has been removed. Please migrate to the "
                    "/rest/api/3/search/jql API."
                ],
            )
        if request.method == "POST":
            params = request.json() or {}
        else:
            params = {k: (v if k == "fields" else v[-1]) for k, v in request.query.items()}
        jql = str(params.get("jql") or "")
        try:
            matches = search(
                jql, self.issues.values(), field_value, projects=self.projects, now_ms=self.now_ms()
            )
        except JqlError as exc:
            text = str(exc)
            if not text.startswith("Error in the JQL Query"):
                text = "Error in the JQL Query: " + text
            return jira_error(400, [text])
        max_results = int(params.get("maxResults") or 50)
        start = int(params.get("startAt") or 0)
        page = matches[start : start + max_results]
        fields = params.get("fields") or ["*all"]
        if isinstance(fields, str):
            fields = [fields]
        wanted = {f for part in fields for f in str(part).split(",") if f}
        issues = [self._issue_json(i, "2", wanted) for i in page]
        if cloud_path:
            return Response.json({"issues": issues, "isLast": start + max_results >= len(matches)})
        return Response.json(
            {
                "expand": "schema,names",
                "startAt": start,
                "maxResults": max_results,
                "total": len(matches),
                "issues": issues,
            }
        )

    def _create(self, request: Request, version: str) -> Response:
        try:
            fields = (request.json() or {}).get("fields") or {}
        except ValueError:
            return jira_error(400, ["Unexpected character in the request body"])
        new = check_new_issue(fields, version, self.projects)
        if not isinstance(new, NewIssue):
            return jira_error(400, [], new)
        number = next(self._numbers[new.project])
        key = f"{new.project}-{number}"
        now = self.now_ms()
        issue = {
            "id": str(next(self._ids)),
            "key": key,
            "project": new.project,
            "number": (new.project, number),
            "fields": {
                "summary": new.summary,
                "description": new.description,
                "labels": new.labels,
                "priority": new.priority,
                "components": new.components,
                "assignee": None,
                "issuetype": new.issue_type,
                "status": "To Do",
                "resolution": None,
                "resolutiondate": None,
                "created": now,
                "updated": now,
            },
            "comments": [],
            "history": [],
        }
        self.issues[key] = issue
        return Response.json(
            {"id": issue["id"], "key": key, "self": f"{self.url}/rest/api/2/issue/{issue['id']}"},
            201,
        )

    def _issue_json(
        self, issue: dict[str, Any], version: str, wanted: set[str] | None = None
    ) -> dict[str, Any]:
        return issue_json(issue, version, url=self.url, projects=self.projects, wanted=wanted)

    def _edit(self, issue: dict[str, Any], request: Request) -> Response:
        data = request.json() or {}
        fields = issue["fields"]
        for op in (data.get("update") or {}).get("labels", []):
            for verb, label in op.items():
                if any(c.isspace() for c in label):
                    return jira_error(
                        400,
                        [],
                        {"labels": f"The label '{label}' contains spaces which is invalid."},
                    )
                if verb == "add" and label not in fields["labels"]:
                    fields["labels"].append(label)
                elif verb == "remove" and label in fields["labels"]:
                    fields["labels"].remove(label)
        for item in (data.get("update") or {}).get("comment", []):
            body = (item.get("add") or {}).get("body")
            if not isinstance(body, str) or not body:
                return jira_error(400, [], {"comment": "Comment body can not be empty!"})
            self._add_comment(issue, body)
        for name, value in (data.get("fields") or {}).items():
            if name == "labels":
                fields["labels"] = list(value)
            elif name == "priority":
                fields["priority"] = value.get("name", fields["priority"])
            elif name in ("summary", "description"):
                fields[name] = value
            else:
                return jira_error(400, [], {name: f"Field '{name}' cannot be set."})
        fields["updated"] = self.now_ms()
        return Response(204)

    def _user_json(self, user: dict[str, str]) -> dict[str, Any]:
        return {
            **user,
            "self": f"{self.url}/rest/api/2/user?username={user['name']}",
            "active": True,
        }

    def _assign(self, issue: dict[str, Any], request: Request) -> Response:
        body = request.json() or {}
        if body.get("name", "") is None or body.get("accountId", "") is None:
            issue["fields"]["assignee"] = None  # unassigned
            return Response(204)
        user = find_user(self.users, body)
        if user is None:
            shown = body.get("accountId") or body.get("name")
            return jira_error(400, [], {"assignee": f"User '{shown}' does not exist."})
        issue["fields"]["assignee"] = self._user_json(user)
        issue["fields"]["updated"] = self.now_ms()
        return Response(204)

    def _comment(self, issue: dict[str, Any], request: Request, version: str) -> Response:
        data = request.json() or {}
        body, problem = body_text(data.get("body"), version)
        if problem or not body:
            return jira_error(400, [], {"comment": problem or "Comment body can not be empty!"})
        comment = self._add_comment(issue, body)
        return Response.json(comment, 201)

    def _add_comment(self, issue: dict[str, Any], body: str) -> dict[str, Any]:
        cid = str(next(self._comment_ids))
        now = jira_time(self.now_ms())
        comment = {
            "id": cid,
            "self": f"{self.url}/rest/api/2/issue/{issue['id']}/comment/{cid}",
            "body": body,
            "author": {"name": "anchorwatch"},
            "created": now,
            "updated": now,
        }
        issue["comments"].append(comment)
        issue["fields"]["updated"] = self.now_ms()
        return comment

    def _hidden(self) -> set[str]:
        return {
            f.hide_transition.lower()
            for f in self.faults.active(lambda f: f.hide_transition is not None)
            if f.hide_transition
        }

    def _available(self, issue: dict[str, Any]) -> list[dict[str, Any]]:
        hidden, status = self._hidden(), issue["fields"]["status"]
        out = []
        for tid, name, sources, target in WORKFLOW:
            if status in sources and name.lower() not in hidden:
                key, cat_name, cat_id = STATUSES[target]["category"]
                out.append(
                    {
                        "id": tid,
                        "name": name,
                        "to": {
                            "name": target,
                            "id": STATUSES[target]["id"],
                            "statusCategory": {"key": key, "name": cat_name, "id": cat_id},
                        },
                    }
                )
        return out

    def _transition(self, issue: dict[str, Any], request: Request) -> Response:
        data = request.json() or {}
        tid = str((data.get("transition") or {}).get("id", ""))
        match = next((t for t in self._available(issue) if t["id"] == tid), None)
        if match is None:
            return jira_error(400, [f"Transition id '{tid}' is not valid for this issue."])
        fields = issue["fields"]
        before = fields["status"]
        fields["status"] = match["to"]["name"]
        now = self.now_ms()
        if fields["status"] == "Done":
            fields["resolution"], fields["resolutiondate"] = "Done", now
        elif before == "Done":
            fields["resolution"], fields["resolutiondate"] = None, None
        fields["updated"] = now
        issue["history"].append(
            {
                "transition": match["name"],
                "from": before,
                "to": fields["status"],
                "at": jira_time(now),
            }
        )
        for item in (data.get("update") or {}).get("comment") or []:
            body = (item.get("add") or {}).get("body")
            if isinstance(body, str) and body:
                self._add_comment(issue, body)
        return Response(204)

    # ----------------------------------------------------------------- JSON views

    # ----------------------------------------------------------------- control

    def _local(self, request: Request) -> Response:
        path = request.path
        with self.lock:
            if path == "/_local/issues":
                return Response.json(
                    {"issues": [self._local_view(i) for i in self.issues.values()]}
                )
            if path == "/_local/requests":
                return Response.json({"requests": self.requests})
            if path == "/_local/clock" and request.method == "POST":
                params = form_or_json(request)
                self._offset_ms += int(float(params.get("advance_s", 0)) * 1000)
                return Response.json({"now": jira_time(self.now_ms())})
            if path == "/_local/reset" and request.method == "POST":
                self.issues.clear()
                self.requests.clear()
                self.faults.clear()
                self._numbers = {p: itertools.count(1) for p in self.projects}
                return Response.json({"ok": True})
        return Response.text("not found", 404)

    def _local_view(self, issue: dict[str, Any]) -> dict[str, Any]:
        view = self._issue_json(issue, "2")
        view["fields"]["comment"] = None
        view["comments"] = [c["body"] for c in issue["comments"]]
        view["transitions"] = issue["history"]
        return view

    def advance(self, seconds: float) -> None:
        """Move the server's clock (resolution dates, relative JQL dates) forward."""
        with self.lock:
            self._offset_ms += int(seconds * 1000)

    def _ticket(self, issue: dict[str, Any]) -> dict[str, Any]:
        """What the pages show of an issue (times as ISO text)."""
        f = issue["fields"]
        return {
            "key": issue["key"],
            "summary": f["summary"],
            "status": f["status"],
            "priority": f["priority"],
            "labels": list(f["labels"]),
            "components": list(f.get("components") or []),
            "assignee": (f.get("assignee") or {}).get("displayName"),
            "created": jira_time(f["created"]),
            "description": f["description"] or "",
            "comments": [
                {"author": c["author"]["name"], "created": c["created"], "body": c["body"]}
                for c in issue["comments"]
            ],
            "history": list(issue["history"]),
        }

    def _page(self, path: str = "/", query: dict[str, list[str]] | None = None) -> str:
        """The ticket list (filters: ?status=open|resolved&doc=<doc label>) or, at
        ``/browse/<KEY>``, one ticket."""
        with self.lock:
            tickets = [self._ticket(i) for i in self.issues.values()]
        if path.startswith("/browse/"):
            key = path[len("/browse/") :]
            found = next((t for t in tickets if t["key"] == key), None)
            return jira_issue_page(found) if found else jira_not_found(key)
        return jira_list_page(tickets, query or {})
