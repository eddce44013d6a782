"""Kong http-log entries -> snapshot events. Pure logic: no I/O, no client library.

Kong's http-log plugin posts its log serializer's object for each request (``request``,
``response``, ``started_at``, ``latencies``, ``service``, ``route``, ...), or an array of
them when it batches. The snapshot travels in headers; how each field is found:

- Who is trusted for what. The caller declares its document type on the request; the
  measurements (``snapshot_status``, ``anchor_count``, the snapshot log) are produced by
  the upstream model server and arrive on the response. Any client can put any header on
  its request, so each header is read only from the locations configured for it
  (``KongFormat.doc_type_locations``, ``measurement_locations``); a snapshot header found
  anywhere else is ignored and counted (``KongNotes.ignored``), never used.
- ``doc_type``, ``snapshot_status``, ``anchor_count``: the configured header names, looked up
  case-insensitively. A header Kong logged as a list (the header was repeated), or present
  under several casings, is accepted when every value is the same after trimming
  whitespace, and rejected naming the conflicting values otherwise: two different doc types
  for one request is a gateway bug, and picking one would hide it.
- ``anchors``: the snapshot-log header, JSON: an array of anchor objects, or one object. A
  repeated header is read as consecutive parts of the log, in order. It is required when the
  status is ``active`` and the count is above 0 (a missing log there is a misconfiguration,
  not a request without anchors: accepting it would fake the "stuck at zero" signature).
- ``event_time_ms``: ``started_at`` (epoch milliseconds, as Kong logs it), within the
  ingest's time window when one is given (``validation.TimeWindow``).
- ``model``: per ``KongFormat.model_from``, ``model`` of the request body (when Kong logs
  it as ``request.body``: an object, or its JSON text; a body that is not a JSON object has
  none), a request header, or the route's or service's ``name``; absent: no model. A value
  the contract refuses dead-letters the entry, its reason naming ``model``.
- ``latency_ms``: Kong's own measurement of the request, ``latencies.request`` (integer
  milliseconds); absent (or null): none. Anything else the contract refuses (a negative
  number, a string, a float, a boolean, more than an hour) dead-letters the entry, its
  reason naming ``latencies.request``. No header sets it: a client could send any.
- ``event_id``: the request-id header (default ``x-request-id``); without a usable one
  (absent, repeated with different values, or not a valid identifier: it is not a
  measurement, so it never costs the snapshot), Kong's own ``request.id`` (logged since Kong
  3.5); without either, a hash of the entry's canonical JSON, so a batch that Kong retries
  maps to the same ids and consumers can still dedupe.

Problems name the entry's own field, e.g. ``response.headers.x-anthropic-anchor-count: not
an integer: 'twelve'`` or ``response.headers.x-anthropic-snapshot-log[2].drift_score: Input
should be less than or equal to 1``.

A batch whose top-level array is intact but holds an entry that is not JSON is split into
its entries so that the bad one alone is dead-lettered (``kong_split``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from pydantic import TypeAdapter, ValidationError

from anchorwatch.connectors.validation import Accepted, TimeWindow, snapshot_record
from anchorwatch.contracts import ContractError, FieldProblem
from anchorwatch.contracts.models import Identifier

RECORD: Final = "Kong http-log entry"
_SHOWN_VALUE_CHARS: Final = 60
_IDENTIFIER: Final = TypeAdapter(Identifier)


LOCATIONS: Final = ("request", "response")


@dataclass(frozen=True, slots=True)
class KongFormat:
    """Which headers carry the snapshot, and where each is trusted, in lookup order. Names
    in lower case."""

    doc_type: str = "x-anthropic-doc-type"
    snapshot_status: str = "x-anthropic-snapshot-status"
    anchor_count: str = "x-anthropic-anchor-count"
    snapshot_log: str = "x-anthropic-snapshot-log"
    request_id: str = "x-request-id"
    # The caller declares its doc type; the upstream produces the measurements.
    doc_type_locations: tuple[str, ...] = ("request",)
    measurement_locations: tuple[str, ...] = ("response",)
    # Not a measurement: only an identity, with fallbacks when it is unusable.
    request_id_locations: tuple[str, ...] = ("request", "response")
    # Where the model version comes from: request_body_model, header:<name>, route, service.
    model_from: str = "request_body_model"
    # Headers whose values never reach the dead-letter topic (Kong itself redacts only
    # authorization and proxy-authorization).
    redact: frozenset[str] = frozenset(
        {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
    )


DEFAULT_FORMAT: Final = KongFormat()


@dataclass(slots=True)
class KongNotes:
    """What reading entries noticed without rejecting them, for the service's metrics."""

    # Snapshot headers found where they are not trusted, by configured header name.
    ignored: Counter[str] = field(default_factory=Counter)
    # Events whose request-id header was unusable, by cause: conflict, invalid.
    request_id_fallbacks: Counter[str] = field(default_factory=Counter)

    def add(self, other: KongNotes) -> None:
        self.ignored.update(other.ignored)
        self.request_id_fallbacks.update(other.request_id_fallbacks)


def kong_record(
    entry: Any,
    fmt: KongFormat = DEFAULT_FORMAT,
    *,
    source: str,
    window: TimeWindow | None = None,
    notes: KongNotes | None = None,
) -> Accepted:
    """The snapshot event of one Kong log entry, validated and encoded; raises ContractError
    naming the entry's bad fields. ``window``: the event times accepted now (None: any the
    contract allows); ``notes`` collects ignored headers and request-id fallbacks."""
    if not isinstance(entry, dict):
        raise ContractError(
            RECORD, [FieldProblem("$", f"expected a JSON object, got {json_kind(entry)}")]
        )
    problems: list[FieldProblem] = []
    notes = notes if notes is not None else KongNotes()
    headers = _Headers(entry, problems)
    trusted = (
        (fmt.doc_type, fmt.doc_type_locations),
        (fmt.snapshot_status, fmt.measurement_locations),
        (fmt.anchor_count, fmt.measurement_locations),
        (fmt.snapshot_log, fmt.measurement_locations),
    )
    for name, locations in trusted:
        for location in LOCATIONS:
            if location not in locations and headers.has(location, name):
                notes.ignored[name] += 1

    doc_path, doc_type = headers.scalar(fmt.doc_type, fmt.doc_type_locations)
    status_path, status = headers.scalar(fmt.snapshot_status, fmt.measurement_locations)
    count_path, count_text = headers.scalar(fmt.anchor_count, fmt.measurement_locations)
    for path, value in ((doc_path, doc_type), (status_path, status), (count_path, count_text)):
        if value is None and not any(p.field == path for p in problems):
            problems.append(FieldProblem(path, "required header is missing"))
    anchor_count: int | None = None
    if count_text is not None:
        anchor_count = _count(count_text)
        if anchor_count is None:
            problems.append(FieldProblem(count_path, f"not an integer: {_show(count_text)}"))

    log_path, anchors = headers.snapshot_log(fmt.snapshot_log, fmt.measurement_locations)
    if anchors is None and status == "active" and anchor_count and not _has(problems, log_path):
        problems.append(
            FieldProblem(
                log_path,
                f"required header is missing (snapshot status is 'active' and the anchor "
                f"count is {anchor_count})",
            )
        )

    time_ms = _started_at(entry.get("started_at"), problems)
    id_problems: list[FieldProblem] = []
    id_path, event_id = headers.scalar(fmt.request_id, fmt.request_id_locations, id_problems)
    if id_problems or (event_id is not None and not valid_identifier(event_id)):
        # The request id is only an identity: an unusable one never costs the snapshot.
        notes.request_id_fallbacks["conflict" if id_problems else "invalid"] += 1
        event_id = None
    if event_id is None:
        id_path, event_id = _fallback_id(entry)
    model_path, model = _model_of(entry, headers, fmt.model_from, problems)
    latency = _latency_of(entry, problems)
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
        "model": model,
        "latency_ms": latency,
    }
    try:
        return snapshot_record(data, window)
    except ContractError as error:
        paths = {
            "event_id": id_path,
            "event_time_ms": "started_at",
            "doc_type": doc_path,
            "snapshot_status": status_path,
            "anchor_count": count_path,
            "anchors": log_path,
            "latency_ms": "latencies.request",
        }
        renamed = [
            FieldProblem(model_path, f"model: {p.reason}")
            if p.field == "model"
            else _renamed(p, paths)
            for p in error.problems
        ]
        raise ContractError(RECORD, renamed) from None


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
    """Case-insensitive lookup over the entry's header maps."""

    __slots__ = ("_lowered", "_problems")

    def __init__(self, entry: Mapping[str, Any], problems: list[FieldProblem]) -> None:
        self._problems = problems
        # Per location: lower-case name -> the values of every key with that name, in order.
        self._lowered: dict[str, dict[str, list[Any]]] = {}
        for location in LOCATIONS:
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
            lowered: dict[str, list[Any]] = {}
            for key, value in headers.items():
                if value is not None:
                    lowered.setdefault(str(key).lower(), []).append(value)
            self._lowered[location] = lowered

    def has(self, location: str, name: str) -> bool:
        return name in self._lowered.get(location, ())

    def find(self, name: str, locations: tuple[str, ...]) -> tuple[str, Any]:
        """(path, raw value) of the header in the first of ``locations`` that has it; value
        None when absent from all (the path then names the first location). A header
        present under several casings is returned as the list of all their values, as if
        it had been repeated."""
        for location in locations:
            values = self._lowered.get(location, {}).get(name)
            if values is not None:
                path = f"{location}.headers.{name}"
                if len(values) == 1:
                    return path, values[0]
                return path, [
                    v for value in values for v in (value if isinstance(value, list) else [value])
                ]
        return f"{locations[0] if locations else 'request'}.headers.{name}", None

    def scalar(
        self, name: str, locations: tuple[str, ...], into: list[FieldProblem] | None = None
    ) -> tuple[str, str | None]:
        problems = self._problems if into is None else into
        path, value = self.find(name, locations)
        if value is None:
            return path, None
        if isinstance(value, str):
            return path, value.strip()
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            distinct = sorted({v.strip() for v in value})
            if len(distinct) == 1:
                return path, distinct[0]
            shown = ", ".join(_show(v) for v in distinct[:5])
            problems.append(FieldProblem(path, f"conflicting values in a repeated header: {shown}"))
            return path, None
        problems.append(
            FieldProblem(path, f"expected a string or a list of strings, got {json_kind(value)}")
        )
        return path, None

    def snapshot_log(self, name: str, locations: tuple[str, ...]) -> tuple[str, list[Any] | None]:
        path, value = self.find(name, locations)
        if value is None:
            return path, None
        for location in locations:
            if len(self._lowered.get(location, {}).get(name, ())) > 1:
                # Which casing's part comes first is the sender's dict order: no log order.
                self._problems.append(FieldProblem(path, "present under several casings"))
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


def valid_identifier(text: str) -> bool:
    """Whether the contract's ``Identifier`` takes ``text`` (an event id)."""
    try:
        _IDENTIFIER.validate_python(text, strict=True)
    except ValidationError:
        return False
    return True


def _fallback_id(entry: Mapping[str, Any]) -> tuple[str, str]:
    request = entry.get("request")
    kong_id = request.get("id") if isinstance(request, dict) else None
    if isinstance(kong_id, str) and kong_id.strip():
        return "request.id", kong_id.strip()
    return "$", fallback_event_id(entry)


def _model_of(
    entry: dict[str, Any], headers: _Headers, model_from: str, problems: list[FieldProblem]
) -> tuple[str, str | None]:
    """(path, model version or None) of an entry, from where ``model_from`` says."""
    if model_from.startswith("header:"):
        return headers.scalar(model_from.removeprefix("header:").lower(), ("request",))
    if model_from == "request_body_model":
        request = entry.get("request")
        holder = request.get("body") if isinstance(request, dict) else None
        if isinstance(holder, str):  # the body's text, as kong.request.get_raw_body() gives it
            try:
                holder = orjson.loads(holder)
            except orjson.JSONDecodeError:
                holder = None  # not JSON: no model
        path, key = "request.body.model", "model"
    else:  # route, service
        holder, path, key = entry.get(model_from), f"{model_from}.name", "name"
    value = holder.get(key) if isinstance(holder, dict) else None
    if value is None or isinstance(value, str):
        return path, value
    problems.append(FieldProblem(path, f"model: expected a string, got {json_kind(value)}"))
    return path, None


def _latency_of(entry: dict[str, Any], problems: list[FieldProblem]) -> int | None:
    """``latencies.request`` as Kong logged it (its range is the contract's to check);
    None when absent."""
    latencies = entry.get("latencies")
    if latencies is None:
        return None
    if not isinstance(latencies, dict):
        kind = json_kind(latencies)
        problems.append(FieldProblem("latencies", f"expected a JSON object, got {kind}"))
        return None
    value = latencies.get("request")
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    problems.append(
        FieldProblem(
            "latencies.request",
            f"expected integer milliseconds, got {json_kind(value)} {_show(value)}",
        )
    )
    return None


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
