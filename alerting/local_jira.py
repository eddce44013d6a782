"""A local Jira that speaks the REST endpoints the `jira` client calls for the notifier, with
failure injection. For tests and for seeing tickets without a Jira site.

REST (v2, and v3 where the body format differs: v3 takes Atlassian Document Format):
``GET serverInfo`` (the client calls it on construction), ``GET field`` (before a search),
``GET myself``, ``GET /rest/auth/1/session``, ``GET|POST search`` (Server/Data Center) and
``GET|POST search/jql`` (Cloud; ``search`` answers 410 there as it does on Cloud),
``POST issue``, ``GET|PUT issue/{key}``, ``GET|POST issue/{key}/comment``,
``GET|POST issue/{key}/transitions``. JQL is parsed as strictly as Jira does: an unquoted
reserved word or character, or an unterminated string, is a 400 with Jira's error body
``{"errorMessages": [...], "errors": {...}}``; field validation errors (summary over 255
characters or with a newline, labels with spaces, unknown project/issue type/priority,
texts over 32,767 characters) come back the same way.

The workflow: To Do --Start Progress--> In Progress --Done--> Done --Reopen--> To Do (Done is
also available from To Do; Stop Progress goes back). Done sets resolution and
resolutiondate; Reopen clears them.

Inspection: ``GET /_local/issues`` (every issue with its comments and transition history),
``GET /_local/requests``; a page for people at ``GET /``. Control: ``POST /_local/faults``
(``{"method": "create", "status": 503, "times": 3}``; methods ``serverInfo``, ``field``,
``search``, ``create``, ``get``, ``edit``, ``comment``, ``transitions`` (GET),
``transition`` (POST), ``*``; ``error`` is put in ``errorMessages``, ``body`` replaces
the body, ``disconnect`` drops the connection (with ``after``: once the call was carried
out); ``{"hide_transition": "Done"}`` removes a
transition from the workflow), ``DELETE /_local/faults``, ``POST /_local/clock
{"advance_s": 7200}`` (moves the server's clock for resolution-date queries),
``POST /_local/reset``.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from anchorwatch.alerting.local_pages import jira_issue_page, jira_list_page, jira_not_found
from anchorwatch.alerting.local_slack import Fault, LocalServer, Request, Response, form_or_json

# --------------------------------------------------------------------------- JQL

#: Jira's reserved JQL words: unquoted, they are a syntax error.
_RESERVED_TEXT = """a an abort access add after alias all alter and any are as asc at audit avg
    before begin between boolean break by byte catch cf char character check checkpoint collate
    collation column commit connect continue count create current date decimal declare
    decrement default defaults define delete delimiter desc difference distinct divide do
    double drop else empty encoding end equals escape exclusive exec execute exists explain
    false fetch file field first float for from function go goto grant greater group having
    identified if immediate in increment index initial inner inout input insert int integer
    intersect intersection into is isempty isnull join last left less like limit lock long
    max min minus mode modify modulo more multiply next noaudit not notin nowait null number
    object of on option or order outer output power previous prior privileges public raise
    raw remainder rename resource return returns revoke right row rowid rownum rows select
    session set share size sqrt start strict string subtract sum synonym table then to trans
    transaction trigger true uid union unique update user validate values view when whenever
    where while with"""
RESERVED_WORDS = frozenset(_RESERVED_TEXT.split())
_RESERVED_CHARS = set("+.,;?|*/%^$#@[]")
_OPERATORS = ("!=", ">=", "<=", "!~", "=", ">", "<", "~")
_KEYWORDS = {"and", "or", "not", "in", "is", "empty", "null", "order", "by", "asc", "desc"}


class JqlError(ValueError):
    pass


@dataclass(frozen=True)
class Token:
    kind: str  # word, string, op, lparen, rparen, comma, end
    text: str
    pos: int


def tokenize(jql: str) -> list[Token]:
    tokens, i, n = [], 0, len(jql)
    while i < n:
        c = jql[i]
        if c.isspace():
            i += 1
        elif c in "(),":
            tokens.append(Token({"(": "lparen", ")": "rparen", ",": "comma"}[c], c, i))
            i += 1
        elif c in "\"'":
            j, out = i + 1, []
            while True:
                if j >= n:
                    raise JqlError(
                        f"The quoted string '{jql[i + 1 :]}' has not been completed. "
                        f"(line 1, character {i + 1})"
                    )
                ch = jql[j]
                if ch == "\\":
                    if j + 1 >= n:
                        raise JqlError(
                            f"Illegal escape at end of query. (line 1, character {j + 1})"
                        )
                    esc = jql[j + 1]
                    if esc == "u":
                        out.append(chr(int(jql[j + 2 : j + 6], 16)))
                        j += 6
                        continue
                    mapped = {
                        "n": "\n",
                        "r": "\r",
                        "t": "\t",
                        '"': '"',
                        "'": "'",
                        "\\": "\\",
                        " ": " ",
                    }
                    if esc not in mapped:
                        raise JqlError(
                            f"The escape sequence '\\{esc}' in the query is not valid. "
                            f"(line 1, character {j + 1})"
                        )
                    out.append(mapped[esc])
                    j += 2
                elif ch == c:
                    break
                else:
                    out.append(ch)
                    j += 1
            tokens.append(Token("string", "".join(out), i))
            i = j + 1
        elif any(jql.startswith(op, i) for op in _OPERATORS):
            op = next(op for op in _OPERATORS if jql.startswith(op, i))
            tokens.append(Token("op", op, i))
            i += len(op)
        else:
            j = i
            while j < n and not jql[j].isspace() and jql[j] not in "(),\"'=!<>~":
                if jql[j] in _RESERVED_CHARS:
                    raise JqlError(
                        f"The character '{jql[j]}' is a reserved JQL character. You must "
                        f"enclose it in a string or use the escape '\\u{ord(jql[j]):04x}' "
                        f"instead. (line 1, character {j + 1})"
                    )
                j += 1
            tokens.append(Token("word", jql[i:j], i))
            i = j
    tokens.append(Token("end", "", n))
    return tokens


Node = tuple[Any, ...]


class _Parser:
    def __init__(self, jql: str) -> None:
        self.tokens = tokenize(jql)
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at_word(self, *words: str) -> bool:
        t = self.peek()
        return t.kind == "word" and t.text.lower() in words

    def expect_word(self, word: str) -> None:
        t = self.next()
        if t.kind != "word" or t.text.lower() != word:
            raise self.error(f"Expecting '{word.upper()}'", t)

    @staticmethod
    def error(what: str, t: Token) -> JqlError:
        got = f"'{t.text}'" if t.kind != "end" else "the end of the query"
        return JqlError(f"{what} but got {got}. (line 1, character {t.pos + 1})")

    def parse(self) -> tuple[Node | None, list[tuple[str, bool]]]:
        where = None
        if not self.at_word("order") and self.peek().kind != "end":
            where = self.or_expr()
        order: list[tuple[str, bool]] = []
        if self.at_word("order"):
            self.next()
            self.expect_word("by")
            while True:
                name = self.field_name()
                descending = False
                if self.at_word("asc", "desc"):
                    descending = self.next().text.lower() == "desc"
                order.append((name, descending))
                if self.peek().kind != "comma":
                    break
                self.next()
        if self.peek().kind != "end":
            raise self.error("Expecting either 'OR' or 'AND'", self.peek())
        return where, order

    def or_expr(self) -> Node:
        node = self.and_expr()
        while self.at_word("or"):
            self.next()
            node = ("or", node, self.and_expr())
        return node

    def and_expr(self) -> Node:
        node = self.not_expr()
        while self.at_word("and"):
            self.next()
            node = ("and", node, self.not_expr())
        return node

    def not_expr(self) -> Node:
        if self.at_word("not"):
            self.next()
            return ("not", self.not_expr())
        if self.peek().kind == "lparen":
            self.next()
            node = self.or_expr()
            if self.next().kind != "rparen":
                raise self.error("Expecting ')'", self.tokens[self.i - 1])
            return node
        return self.clause()

    def field_name(self) -> str:
        t = self.next()
        if t.kind == "string":
            return t.text.lower()
        if t.kind != "word":
            raise self.error("Expecting a field name", t)
        if t.text.lower() in RESERVED_WORDS:
            raise JqlError(
                f"The word '{t.text}' is a reserved JQL word. You must surround it in "
                f"quotation marks to use it in a query. (line 1, character {t.pos + 1})"
            )
        return t.text.lower()

    def clause(self) -> Node:
        name = self.field_name()
        t = self.next()
        if t.kind == "op":
            return ("cmp", name, t.text, self.value())
        if t.kind == "word" and t.text.lower() == "is":
            negate = self.at_word("not")
            if negate:
                self.next()
            v = self.next()
            if v.kind != "word" or v.text.lower() not in ("empty", "null"):
                raise self.error("Expecting 'EMPTY' or 'NULL'", v)
            return ("empty", name, negate)
        if t.kind == "word" and t.text.lower() in ("in", "not"):
            negate = t.text.lower() == "not"
            if negate:
                self.expect_word("in")
            if self.next().kind != "lparen":
                raise self.error("Expecting '('", self.tokens[self.i - 1])
            values = [self.value()]
            while self.peek().kind == "comma":
                self.next()
                values.append(self.value())
            if self.next().kind != "rparen":
                raise self.error("Expecting ')'", self.tokens[self.i - 1])
            return ("in", name, negate, values)
        raise self.error("Expecting operator", t)

    def value(self) -> str | None:
        t = self.next()
        if t.kind == "string":
            return t.text
        if t.kind != "word":
            raise self.error("Expecting either a value, list or function", t)
        low = t.text.lower()
        if low in ("empty", "null"):
            return None
        if low in RESERVED_WORDS:
            raise JqlError(
                f"The word '{t.text}' is a reserved JQL word. You must surround it in "
                f"quotation marks to use it in a query. (line 1, character {t.pos + 1})"
            )
        return t.text


def parse_jql(jql: str) -> tuple[Node | None, list[tuple[str, bool]]]:
    """(where clause, order by) of a query; JqlError in Jira's words otherwise."""
    try:
        return _Parser(jql).parse()
    except (IndexError, ValueError) as exc:
        if isinstance(exc, JqlError):
            raise
        raise JqlError(f"Error in the JQL Query: {exc}") from None


_RELATIVE = re.compile(r"^([-+]?)(\d+)([mhdw])$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def _date_value(value: str, now_ms: int, field_name: str) -> int:
    if m := _RELATIVE.match(value.strip()):
        sign = -1 if m.group(1) == "-" else 1
        return now_ms + sign * int(m.group(2)) * _UNIT_MS[m.group(3)]
    for fmt in ("%Y-%m-%d %H:%M", "%Y/%m/%d %H:%M", "%Y-%m-%d", "%Y/%m/%d"):
        try:
            return int(datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp() * 1000)
        except ValueError:
            continue
    raise JqlError(
        f"Date value '{value}' for field '{field_name}' is invalid. Valid formats include: "
        "'yyyy/MM/dd HH:mm', 'yyyy-MM-dd HH:mm', 'yyyy/MM/dd', 'yyyy-MM-dd', or a period "
        "format e.g. '-5d', '4w 2d'."
    )


# --------------------------------------------------------------------------- the server

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
_ISSUE_PATH = re.compile(r"^/rest/api/(2|3|latest)/issue/([^/]+)(?:/(comment|transitions))?$")
_NOT_FOUND = "Issue does not exist or you do not have permission to see it."


def _iso(ms: int) -> str:
    """Jira's timestamp format, e.g. 2026-01-05T14:03:00.000+0000."""
    stamp = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}+0000"


def jira_error(
    status: int,
    messages: list[str] | None = None,
    errors: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """Jira's error body: ``{"errorMessages": [...], "errors": {field: message}}``."""
    body = {"errorMessages": messages or [], "errors": errors or {}}
    return Response.json(body, status, **(headers or {}))


def _adf_text(doc: Any) -> str:
    """The plain text of an Atlassian Document Format value (v3 bodies)."""
    if isinstance(doc, dict):
        if doc.get("type") == "text":
            return str(doc.get("text", ""))
        return "".join(_adf_text(c) for c in doc.get("content", []))
    return ""


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
    ) -> None:
        super().__init__(host, port)
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
        fault = self.faults.take(op, kind=lambda f: f.hide_transition is None)
        if fault is not None and not (fault.disconnect and fault.after):
            self._log(op, fault.status, key, path, "fault")
            return self._fault_response(fault)
        if (denied := self._authenticate(request)) is not None:
            self._log(op, 401, key, path)
            return denied
        with self.lock:
            response = self._route(op, key, version, request)
        self._log(op, response.status, key, path, "answer dropped" if fault else None)
        return Response(disconnect=True) if fault is not None else response

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

    def _fault_response(self, fault: Fault) -> Response:
        if fault.disconnect:
            return Response(disconnect=True)
        headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
        if fault.body is not None:
            body = fault.body if isinstance(fault.body, str) else json.dumps(fault.body)
            return Response(fault.status, body.encode(), headers=headers)
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
            "serverTime": _iso(self.now_ms()),
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
            where, order = parse_jql(jql)
            self._check(where, order)
            matches = [i for i in self.issues.values() if self._matches(where, i)]
        except JqlError as exc:
            text = str(exc)
            if not text.startswith("Error in the JQL Query"):
                text = "Error in the JQL Query: " + text
            return jira_error(400, [text])
        for name, descending in reversed(order):
            matches.sort(key=self._sorter(name), reverse=descending)
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

    def _sorter(self, name: str) -> Callable[[dict[str, Any]], tuple[int, Any]]:
        return lambda issue: _sort_key(self._value(issue, name))

    def _check(self, node: Node | None, order: list[tuple[str, bool]]) -> None:
        """Jira validates fields and values before searching, even when nothing matches."""
        for name, _ in order:
            if name not in _KNOWN_FIELDS:
                _unknown_field(name)
        if node is None:
            return
        if node[0] in ("and", "or"):
            self._check(node[1], [])
            self._check(node[2], [])
        elif node[0] == "not":
            self._check(node[1], [])
        else:
            if node[1] not in _KNOWN_FIELDS:
                _unknown_field(node[1])
            values = node[3] if node[0] == "in" else [node[3]] if node[0] == "cmp" else []
            for value in values:
                self._operand(node[1], value)

    def _value(self, issue: dict[str, Any], name: str) -> Any:
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
            if name in _KNOWN_FIELDS
            else _unknown_field(name)
        )

    def _matches(self, node: Node | None, issue: dict[str, Any]) -> bool:
        if node is None:
            return True
        kind = node[0]
        if kind == "and":
            return self._matches(node[1], issue) and self._matches(node[2], issue)
        if kind == "or":
            return self._matches(node[1], issue) or self._matches(node[2], issue)
        if kind == "not":
            return not self._matches(node[1], issue)
        name = node[1]
        actual = self._value(issue, name)
        values = actual if isinstance(actual, list) else ([] if actual is None else [actual])
        if kind == "empty":
            return bool(values) is bool(node[2])
        if kind == "in":
            wanted = [self._operand(name, v) for v in node[3]]
            hit = any(_equal(a, w) for a in values for w in wanted)
            return hit is not bool(node[2])
        _, _, op, raw = node
        if raw is None:  # = EMPTY / != EMPTY
            return (not values) if op == "=" else bool(values)
        operand = self._operand(name, raw)
        if op == "=":
            return any(_equal(a, operand) for a in values)
        if op == "!=":
            return bool(values) and not any(_equal(a, operand) for a in values)
        if op in ("~", "!~"):
            found = any(str(operand).lower() in str(a).lower() for a in values)
            return found if op == "~" else not found
        if not values:
            return False
        a, b = values[0], operand
        return bool({">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op])

    def _operand(self, name: str, raw: str | None) -> Any:
        if raw is None:
            return None
        if name in ("resolutiondate", "resolved", "created", "createddate", "updated"):
            return _date_value(raw, self.now_ms(), name)
        if name == "project" and raw.upper() not in self.projects:
            raise JqlError(f"The value '{raw}' does not exist for the field 'project'.")
        if name in ("key", "issue", "issuekey"):
            m = re.match(r"^([A-Z][A-Z0-9_]*)-(\d+)$", raw.upper())
            if not m:
                raise JqlError(f"The issue key '{raw}' for field '{name}' is invalid.")
            return (m.group(1), int(m.group(2)))
        return raw

    def _create(self, request: Request, version: str) -> Response:
        try:
            fields = (request.json() or {}).get("fields") or {}
        except ValueError:
            return jira_error(400, ["Unexpected character in the request body"])
        errors: dict[str, str] = {}
        project = fields.get("project") or {}
        pkey = str(project.get("key") or "").upper() or next(
            (k for k, v in self.projects.items() if v == str(project.get("id"))), ""
        )
        if pkey not in self.projects:
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
        description, problem = self._text(fields.get("description", ""), version)
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
        unknown = set(fields) - {
            "project",
            "issuetype",
            "summary",
            "description",
            "labels",
            "priority",
        }
        for name in sorted(unknown):
            errors[name] = (
                f"Field '{name}' cannot be set. It is not on the appropriate screen, or unknown."
            )
        if errors:
            return jira_error(400, [], errors)
        number = next(self._numbers[pkey])
        key = f"{pkey}-{number}"
        now = self.now_ms()
        issue = {
            "id": str(next(self._ids)),
            "key": key,
            "project": pkey,
            "number": (pkey, number),
            "fields": {
                "summary": summary,
                "description": description,
                "labels": list(labels),
                "priority": priority,
                "issuetype": type_name,
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

    @staticmethod
    def _text(value: Any, version: str) -> tuple[str, str | None]:
        """A description or comment body: a string on v2, an ADF document on v3."""
        if version == "3":
            if value in ("", None):
                return "", None
            if not isinstance(value, dict) or value.get("type") != "doc":
                return "", "Operation value must be an Atlassian Document (ADF)"
            value = _adf_text(value)
        elif value is None:
            value = ""
        elif not isinstance(value, str):
            return "", "Operation value must be a string"
        if _utf16(value) > 32_767:
            return "", (
                "The entered text is too long. It exceeds the allowed limit of 32,767 characters."
            )
        return value, None

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

    def _comment(self, issue: dict[str, Any], request: Request, version: str) -> Response:
        data = request.json() or {}
        body, problem = self._text(data.get("body"), version)
        if problem or not body:
            return jira_error(400, [], {"comment": problem or "Comment body can not be empty!"})
        comment = self._add_comment(issue, body)
        return Response.json(comment, 201)

    def _add_comment(self, issue: dict[str, Any], body: str) -> dict[str, Any]:
        cid = str(next(self._comment_ids))
        now = _iso(self.now_ms())
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
            {"transition": match["name"], "from": before, "to": fields["status"], "at": _iso(now)}
        )
        for item in (data.get("update") or {}).get("comment") or []:
            body = (item.get("add") or {}).get("body")
            if isinstance(body, str) and body:
                self._add_comment(issue, body)
        return Response(204)

    # ----------------------------------------------------------------- JSON views

    def _issue_json(
        self, issue: dict[str, Any], version: str, wanted: set[str] | None = None
    ) -> dict[str, Any]:
        f = issue["fields"]
        key, cat_name, cat_id = STATUSES[f["status"]]["category"]
        description: Any = f["description"]
        if version == "3" and description:
            description = {
                "type": "doc",
                "version": 1,
                "content": [
                    {"type": "paragraph", "content": [{"type": "text", "text": description}]}
                ],
            }
        fields = {
            "summary": f["summary"],
            "description": description,
            "labels": list(f["labels"]),
            "priority": {"name": f["priority"], "id": str(PRIORITIES.index(f["priority"]) + 1)},
            "issuetype": {"name": f["issuetype"], "id": ISSUE_TYPES[f["issuetype"]]},
            "project": {"key": issue["project"], "id": self.projects[issue["project"]]},
            "status": {
                "name": f["status"],
                "id": STATUSES[f["status"]]["id"],
                "statusCategory": {"key": key, "name": cat_name, "id": cat_id},
            },
            "resolution": {"name": f["resolution"]} if f["resolution"] else None,
            "resolutiondate": _iso(f["resolutiondate"]) if f["resolutiondate"] else None,
            "created": _iso(f["created"]),
            "updated": _iso(f["updated"]),
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
            "self": f"{self.url}/rest/api/{version}/issue/{issue['id']}",
            "fields": fields,
        }

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
                return Response.json({"now": _iso(self.now_ms())})
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
            "created": _iso(f["created"]),
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


_KNOWN_FIELDS = frozenset(
    {
        "project",
        "labels",
        "status",
        "statuscategory",
        "resolution",
        "resolutiondate",
        "resolved",
        "created",
        "createddate",
        "updated",
        "key",
        "issue",
        "issuekey",
        "summary",
        "text",
        "description",
        "priority",
        "issuetype",
        "type",
    }
)


def _unknown_field(name: str) -> Any:
    raise JqlError(f"Field '{name}' does not exist or you do not have permission to view it.")


def _equal(actual: Any, wanted: Any) -> bool:
    if isinstance(actual, str) and isinstance(wanted, str):
        return actual.lower() == wanted.lower()
    return bool(actual == wanted)


def _sort_key(value: Any) -> tuple[int, Any]:
    # Jira sorts empty values last in ascending order.
    if value is None or value == []:
        return (1, 0)
    return (0, value if not isinstance(value, list) else ",".join(value))


def _utf16(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)
