"""JQL as the local Jira reads it: parsed as strictly as Jira does (an unquoted reserved
word or character, or an unterminated string, is an error in Jira's words), then checked
(unknown fields, projects, keys and dates are errors even when nothing would match) and
evaluated against issues, sorted as ``ORDER BY`` says. Pure: the server hands in how an
issue reads for a field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

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


# --------------------------------------------------------------------------- evaluation

#: The date fields: their operands are dates, absolute or relative to now.
DATE_FIELDS = frozenset({"resolutiondate", "resolved", "created", "createddate", "updated"})
KEY_FIELDS = frozenset({"key", "issue", "issuekey"})


def search(
    jql: str,
    issues: Iterable[T],
    value: Callable[[T, str], Any],
    *,
    projects: Collection[str],
    now_ms: int,
) -> list[T]:
    """The issues ``jql`` matches, in its order; ``value(issue, field)`` is how an issue
    reads for a known field (project keys in ``projects``; relative dates from ``now_ms``).
    JqlError in Jira's words."""
    where, order = parse_jql(jql)
    query = _Query(projects, now_ms)
    query.check(where, order)
    found = [i for i in issues if query.matches(where, partial(value, i))]
    for name, descending in reversed(order):
        found.sort(key=partial(_sort_value, value, name), reverse=descending)
    return found


def _sort_value(value: Callable[[T, str], Any], name: str, issue: T) -> tuple[int, Any]:
    return sort_key(value(issue, name))


@dataclass(frozen=True)
class _Query:
    projects: Collection[str]
    now_ms: int

    def check(self, node: Node | None, order: list[tuple[str, bool]]) -> None:
        """Jira validates fields and values before searching, even when nothing matches."""
        for name, _ in order:
            if name not in KNOWN_FIELDS:
                unknown_field(name)
        if node is None:
            return
        if node[0] in ("and", "or"):
            self.check(node[1], [])
            self.check(node[2], [])
        elif node[0] == "not":
            self.check(node[1], [])
        else:
            if node[1] not in KNOWN_FIELDS:
                unknown_field(node[1])
            values = node[3] if node[0] == "in" else [node[3]] if node[0] == "cmp" else []
            for value in values:
                self.operand(node[1], value)

    def matches(self, node: Node | None, value: Callable[[str], Any]) -> bool:
        if node is None:
            return True
        kind = node[0]
        if kind == "and":
            return self.matches(node[1], value) and self.matches(node[2], value)
        if kind == "or":
            return self.matches(node[1], value) or self.matches(node[2], value)
        if kind == "not":
            return not self.matches(node[1], value)
        name = node[1]
        actual = value(name)
        values = actual if isinstance(actual, list) else ([] if actual is None else [actual])
        if kind == "empty":
            return bool(values) is bool(node[2])
        if kind == "in":
            wanted = [self.operand(name, v) for v in node[3]]
            hit = any(_equal(a, w) for a in values for w in wanted)
            return hit is not bool(node[2])
        _, _, op, raw = node
        if raw is None:  # = EMPTY / != EMPTY
            return (not values) if op == "=" else bool(values)
        operand = self.operand(name, raw)
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

    def operand(self, name: str, raw: str | None) -> Any:
        if raw is None:
            return None
        if name in DATE_FIELDS:
            return _date_value(raw, self.now_ms, name)
        if name == "project" and raw.upper() not in self.projects:
            raise JqlError(f"The value '{raw}' does not exist for the field 'project'.")
        if name in KEY_FIELDS:
            m = re.match(r"^([A-Z][A-Z0-9_]*)-(\d+)$", raw.upper())
            if not m:
                raise JqlError(f"The issue key '{raw}' for field '{name}' is invalid.")
            return (m.group(1), int(m.group(2)))
        return raw


KNOWN_FIELDS = frozenset(
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


def unknown_field(name: str) -> Any:
    raise JqlError(f"Field '{name}' does not exist or you do not have permission to view it.")


def _equal(actual: Any, wanted: Any) -> bool:
    if isinstance(actual, str) and isinstance(wanted, str):
        return actual.lower() == wanted.lower()
    return bool(actual == wanted)


def sort_key(value: Any) -> tuple[int, Any]:
    # Jira sorts empty values last in ascending order.
    if value is None or value == []:
        return (1, 0)
    return (0, value if not isinstance(value, list) else ",".join(value))
