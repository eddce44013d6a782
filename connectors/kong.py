"""Kong http-log entries -> snapshot events. Pure logic: no I/O, no client library.

Kong's http-log plugin posts its log serializer's object for each request (``request``,
``response``, ``started_at``, ``latencies``, ``service``, ``route``, ...), or an array of
them when it batches. The snapshot travels in headers; how each field is found:

- ``doc_type``, ``snapshot_status``, ``anchor_count``: the configured header names, looked up
  case-insensitively in ``request.headers`` then ``response.headers`` (configurable). A
  header Kong logged as a list (the header was repeated) is accepted when every value is the
  same after trimming whitespace, and rejected naming the conflicting values otherwise: two
  different doc types for one request is a gateway bug, and picking one would hide it.
- ``anchors``: the snapshot-log header, JSON: an array of anchor objects, or one object. A
  repeated header is read as consecutive parts of the log, in order. It is required when the
  status is ``active`` and the count is above 0 (a missing log there is a misconfiguration,
  not a request without anchors: accepting it would fake the "stuck at zero" signature).
- ``event_time_ms``: ``started_at`` (epoch milliseconds, as Kong logs it).
- ``event_id``: the request-id header (default ``x-request-id``); without it, Kong's own
  ``request.id`` (logged since Kong 3.5); without either, a hash of the entry's canonical
  JSON, so a batch that Kong retries maps to the same ids and consumers can still dedupe.

Problems name the entry's own field, e.g. ``request.headers.x-anthropic-anchor-count: not
an integer: 'twelve'`` or ``request.headers.x-anthropic-snapshot-log[2].drift_score: Input
should be less than or equal to 1``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from anchorwatch.connectors.validation import Accepted, snapshot_record
from anchorwatch.contracts import ContractError, FieldProblem

RECORD: Final = "Kong http-log entry"
_SHOWN_VALUE_CHARS: Final = 60


@dataclass(frozen=True, slots=True)
class KongFormat:
    """Which headers carry the snapshot, and where to look for them. Names in lower case."""

    doc_type: str = "x-anthropic-doc-type"
    snapshot_status: str = "x-anthropic-snapshot-status"
    anchor_count: str = "x-anthropic-anchor-count"
    snapshot_log: str = "x-anthropic-snapshot-log"
    request_id: str = "x-request-id"
    locations: tuple[str, ...] = ("request", "response")
    # Headers whose values never reach the dead-letter topic (Kong itself redacts only
    # authorization and proxy-authorization).
    redact: frozenset[str] = frozenset(
        {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
    )


DEFAULT_FORMAT: Final = KongFormat()


def kong_record(entry: Any, fmt: KongFormat = DEFAULT_FORMAT, *, source: str) -> Accepted:
    """The snapshot event of one Kong log entry, validated and encoded; raises ContractError
    naming the entry's bad fields."""
    if not isinstance(entry, dict):
        raise ContractError(
            RECORD, [FieldProblem("$", f"expected a JSON object, got {json_kind(entry)}")]
        )
    problems: list[FieldProblem] = []
    headers = _Headers(entry, fmt.locations, problems)

    doc_path, doc_type = headers.scalar(fmt.doc_type)
    status_path, status = headers.scalar(fmt.snapshot_status)
    count_path, count_text = headers.scalar(fmt.anchor_count)
    for path, value in ((doc_path, doc_type), (status_path, status), (count_path, count_text)):
        if value is None and not any(p.field == path for p in problems):
            problems.append(FieldProblem(path, "required header is missing"))
    anchor_count: int | None = None
    if count_text is not None:
        anchor_count = _count(count_text)
        if anchor_count is None:
            problems.append(FieldProblem(count_path, f"not an integer: {_show(count_text)}"))

    log_path, anchors = headers.snapshot_log(fmt.snapshot_log)
    if anchors is None and status == "active" and anchor_count and not _has(problems, log_path):
        problems.append(
            FieldProblem(
                log_path,
                f"required header is missing (snapshot status is 'active' and the anchor "
                f"count is {anchor_count})",
            )
        )

    time_ms = _started_at(entry.get("started_at"), problems)
    id_path, event_id = headers.scalar(fmt.request_id)
    if event_id is None and not _has(problems, id_path):
        id_path, event_id = _fallback_id(entry)
    if problems:
        raise ContractError(RECORD, problems)

    data = {
        "event_id": event_id,
        "event_time_ms": time_ms,
        "doc_type": doc_type,
        "snapshot_status": status,
        "anchor_count": anchor_count,
        "anchors": anchors or [],
        "source": source,
    }
    try:
        return snapshot_record(data)
    except ContractError as error:
        paths = {
            "event_id": id_path,
            "event_time_ms": "started_at",
            "doc_type": doc_path,
            "snapshot_status": status_path,
            "anchor_count": count_path,
            "anchors": log_path,
        }
        raise ContractError(RECORD, [_renamed(p, paths) for p in error.problems]) from None


def redacted(entry: Any, names: frozenset[str]) -> Any:
    """``entry`` with the values of the named headers replaced by ``REDACTED``, as Kong
    does for authorization; the entry itself when it carries none of them."""
    if not isinstance(entry, dict):
        return entry
    out: dict[str, Any] | None = None
    for location in ("request", "response"):
        section = entry.get(location)
        if not isinstance(section, dict) or not isinstance(section.get("headers"), dict):
            continue
        headers: dict[str, Any] = section["headers"]
        hidden = {k: "REDACTED" for k in headers if str(k).lower() in names}
        if hidden:
            out = out if out is not None else dict(entry)
            out[location] = {**section, "headers": {**headers, **hidden}}
    return entry if out is None else out


def fallback_event_id(entry: Mapping[str, Any]) -> str:
    """A deterministic id for an entry that carries no request id: the same entry (as Kong
    re-sends it on retry) always gets the same id."""
    canonical = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    return "kong-" + hashlib.sha256(canonical).hexdigest()[:32]


class _Headers:
    """Case-insensitive lookup over the entry's header maps, in the configured order."""

    __slots__ = ("_first", "_lowered", "_maps", "_problems")

    def __init__(
        self, entry: Mapping[str, Any], locations: tuple[str, ...], problems: list[FieldProblem]
    ) -> None:
        self._problems = problems
        self._maps: list[tuple[str, dict[str, Any]]] = []
        self._lowered: dict[str, dict[str, Any]] = {}
        for location in locations:
            section = entry.get(location)
            if section is None:
                continue
            if not isinstance(section, dict):
                problems.append(
                    FieldProblem(location, f"expected a JSON object, got {json_kind(section)}")
                )
                continue
            headers = section.get("headers")
            if headers is None:
                continue
            if not isinstance(headers, dict):
                problems.append(
                    FieldProblem(
                        f"{location}.headers", f"expected a JSON object, got {json_kind(headers)}"
                    )
                )
                continue
            self._maps.append((location, headers))
        self._first = locations[0] if locations else "request"

    def find(self, name: str) -> tuple[str, Any]:
        """(path, raw value) of the header in the first location that has it; value None
        when absent everywhere (the path then names the first location)."""
        for location, headers in self._maps:
            # Kong logs names in lower case: the exact lookup is the common, cheap case.
            value = headers.get(name)
            if value is None:
                lowered = self._lowered.get(location)
                if lowered is None:
                    lowered = {str(k).lower(): v for k, v in headers.items()}
                    self._lowered[location] = lowered
                value = lowered.get(name)
            if value is not None:
                return f"{location}.headers.{name}", value
        return f"{self._first}.headers.{name}", None

    def scalar(self, name: str) -> tuple[str, str | None]:
        path, value = self.find(name)
        if value is None:
            return path, None
        if isinstance(value, str):
            return path, value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            distinct = sorted({v.strip() for v in value})
            if len(distinct) == 1:
                return path, distinct[0]
            shown = ", ".join(_show(v) for v in distinct[:5])
            self._problems.append(
                FieldProblem(path, f"conflicting values in a repeated header: {shown}")
            )
            return path, None
        self._problems.append(
            FieldProblem(path, f"expected a string or a list of strings, got {json_kind(value)}")
        )
        return path, None

    def snapshot_log(self, name: str) -> tuple[str, list[Any] | None]:
        path, value = self.find(name)
        if value is None:
            return path, None
        parts = value if isinstance(value, list) else [value]
        anchors: list[Any] = []
        for i, part in enumerate(parts):
            where = path if len(parts) == 1 else f"{path}[{i}]"
            if not isinstance(part, str):
                self._problems.append(
                    FieldProblem(where, f"expected a JSON string, got {json_kind(part)}")
                )
                return path, None
            try:
                parsed = orjson.loads(part)
            except orjson.JSONDecodeError as exc:
                self._problems.append(FieldProblem(where, f"not valid JSON: {exc}"))
                return path, None
            if isinstance(parsed, list):
                anchors.extend(parsed)
            elif isinstance(parsed, dict):
                anchors.append(parsed)
            else:
                self._problems.append(
                    FieldProblem(
                        where, f"expected a JSON array of anchor objects, got {json_kind(parsed)}"
                    )
                )
                return path, None
        return path, anchors


def _count(text: str) -> int | None:
    """The anchor count header as an integer; None when it is not one. Thousands of digits
    stay a (too large) number rather than reaching int(), which refuses them."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


def _started_at(value: Any, problems: list[FieldProblem]) -> int | None:
    if value is None:
        problems.append(FieldProblem("started_at", "required field is missing"))
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    # Kong's JSON encoder writes every number as a double; an integral one is fine.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    problems.append(
        FieldProblem(
            "started_at",
            f"expected integer epoch milliseconds, got {json_kind(value)} {_show(value)}",
        )
    )
    return None


def _fallback_id(entry: Mapping[str, Any]) -> tuple[str, str]:
    request = entry.get("request")
    kong_id = request.get("id") if isinstance(request, dict) else None
    if isinstance(kong_id, str) and kong_id.strip():
        return "request.id", kong_id.strip()
    return "$", fallback_event_id(entry)


def _renamed(problem: FieldProblem, paths: dict[str, str]) -> FieldProblem:
    head, sep, rest = problem.field.partition(".")
    head, bracket, index = head.partition("[")
    if head not in paths:
        return problem
    return FieldProblem(paths[head] + bracket + index + sep + rest, problem.reason)


def _has(problems: list[FieldProblem], path: str) -> bool:
    return any(p.field.startswith(path) for p in problems)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 3] + "..."


def json_kind(value: Any) -> str:
    """How a JSON value is named in messages: 'an array', 'a number', 'null' ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__
