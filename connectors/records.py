"""Request bodies and log lines -> validated snapshot events and rejects. Pure logic.

Two input formats:

- ``kong``: what Kong's http-log plugin posts, one log entry (a JSON object) or a JSON array
  of them when it batches (see ``kong.py`` for the mapping);
- ``ndjson``: snapshot events in the project's own schema, one JSON object per line.

A body as a whole that cannot be read (not JSON at all, empty) raises ``BodyError``; every
entry or line that does not fit the contract becomes a ``Rejected`` with the raw bytes and a
``ContractError`` naming the field, for the dead-letter topic.

Accepted events come out validated and encoded (``validation``). Both formats first take a
fast path: msgspec reads only what the mapping needs, straight into validated values (for
Kong, the five snapshot headers and ``started_at``, else the header maps and
``request.id``; the rest of each entry is skipped unread). An entry or line the fast path
does not accept takes the reference path (orjson, the pydantic contract), which accepts it
or says exactly why not; so does a whole body when msgspec cannot read it. Both paths give
the same answer, byte for byte (tests/unit/test_ingest_fastpath.py).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import orjson
from typing_extensions import TypedDict

from anchorwatch.connectors.kong import (
    DEFAULT_FORMAT,
    KongFormat,
    json_kind,
    kong_event_fast,
    kong_record,
    kong_record_fast,
    redacted,
)
from anchorwatch.connectors.validation import (
    Accepted,
    plain_json,
    snapshot_json,
    snapshot_record,
)
from anchorwatch.contracts import ContractError, FieldProblem, SnapshotEvent

Format = Literal["kong", "ndjson"]


class BodyError(ValueError):
    """The body as a whole is unusable (HTTP 400): not JSON at all, or empty."""


@dataclass(frozen=True, slots=True)
class Rejected:
    raw: bytes
    error: ContractError


@dataclass(slots=True)
class Batch:
    accepted: list[Accepted] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.accepted) + len(self.rejected)


class _KongSection(TypedDict, total=False):
    headers: dict[str, Any] | None
    id: Any


class _KongEntry(TypedDict, total=False):
    """What kong_record reads of an entry; msgspec skips every other key unread."""

    request: _KongSection | None
    response: _KongSection | None
    started_at: Any


_KONG_JSON = msgspec.json.Decoder(list[_KongEntry] | _KongEntry)


@functools.lru_cache(maxsize=16)
def _snapshot_headers_json(fmt: KongFormat) -> msgspec.json.Decoder[Any]:
    """Reads of each entry only the five headers, under their exact (lower-case) names, in
    the first location, and ``started_at``; all else is skipped unread. When the five are
    there as strings, they are what ``_Headers.find`` answers whatever else the entry
    holds (the exact name wins); an entry without them takes ``_KONG_JSON``."""
    names = {
        "doc_type": fmt.doc_type,
        "snapshot_status": fmt.snapshot_status,
        "anchor_count": fmt.anchor_count,
        "snapshot_log": fmt.snapshot_log,
        "request_id": fmt.request_id,
    }
    headers = msgspec.defstruct(
        "KongSnapshotHeaders", [(f, str | None, None) for f in names], rename=names, gc=False
    )
    section = msgspec.defstruct("KongSection", [("headers", headers | None, None)], gc=False)
    entry = msgspec.defstruct(
        "KongEntry",
        [("first", section | None, None), ("started_at", int | None, None)],
        rename={"first": fmt.locations[0]},
        gc=False,
    )
    return msgspec.json.Decoder(list[entry] | entry)  # type: ignore[valid-type]


def kong_body(
    body: bytes, fmt: KongFormat = DEFAULT_FORMAT, *, source: str, fast: bool = True
) -> Batch:
    """One Kong http-log request body: an entry or an array of entries. ``fast=False``:
    the reference path only (orjson and the contract for every entry), which the fast path
    must equal; for tests."""
    if fast and (batch := _kong_body_fast(body, fmt, source=source)) is not None:
        return batch
    if not body.strip():
        raise BodyError("empty body: expected a Kong log entry (a JSON object) or an array of them")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BodyError(f"body is not JSON: {exc}") from None
    if not isinstance(value, dict | list):
        raise BodyError(
            f"expected a Kong log entry (a JSON object) or an array of them, got {json_kind(value)}"
        )
    batch = Batch()
    add_kong_value(batch, value, body if isinstance(value, dict) else None, fmt, source=source)
    return batch


def _kong_body_fast(body: bytes, fmt: KongFormat, *, source: str) -> Batch | None:
    """``kong_body`` for a body msgspec can read: each entry through the narrowest reading
    that accepts it, the reference path (``add_kong_value``) for the rest. None: use the
    reference path for the whole body."""
    if not plain_json(body):
        return None
    try:
        snapshot = _snapshot_headers_json(fmt).decode(body)
    except (msgspec.DecodeError, RecursionError):
        snapshot = None
    if snapshot is None:
        try:
            snapshot = _KONG_JSON.decode(body)
        except (msgspec.DecodeError, RecursionError):
            return None
    entries = snapshot if isinstance(snapshot, list) else [snapshot]
    partial: Any = None  # _KONG_JSON's reading of the body, when needed
    whole: Any = None  # orjson's, when needed
    batch = Batch()
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            record = kong_record_fast(entry, fmt, source=source)
        elif (
            entry.first is not None
            and (h := entry.first.headers) is not None
            and h.doc_type is not None
            and h.snapshot_status is not None
            and h.anchor_count is not None
            and h.request_id is not None
            and h.snapshot_log is not None
        ):
            record = kong_event_fast(
                h.request_id.strip(),
                h.doc_type.strip(),
                h.snapshot_status.strip(),
                h.anchor_count.strip(),
                h.snapshot_log,
                entry.started_at,
                source=source,
            )
        else:
            if partial is None:
                try:
                    partial = _KONG_JSON.decode(body)
                except (msgspec.DecodeError, RecursionError):
                    partial = False
            record = None
            if partial is not False:
                one = partial[i] if isinstance(partial, list) else partial
                record = kong_record_fast(one, fmt, source=source)
        if record is not None:
            batch.accepted.append(record)
            continue
        if whole is None:
            try:
                whole = orjson.loads(body)
            except orjson.JSONDecodeError:
                # What msgspec skipped unread, orjson refuses (a number beyond the float
                # range): the reference path answers for the body, as it always did.
                return None
        if isinstance(whole, list):
            add_kong_value(batch, whole[i], None, fmt, source=source)
        else:
            add_kong_value(batch, whole, body, fmt, source=source)
    return batch


def add_kong_value(
    batch: Batch, value: Any, raw: bytes | None, fmt: KongFormat, *, source: str
) -> None:
    """Add one parsed Kong entry, or each entry of an array, to ``batch``. ``raw`` is the
    entry's original bytes when known; otherwise, or when the entry carries a header to
    redact, the dead letter gets the entry re-serialized."""
    entries = value if isinstance(value, list) else [value]
    for entry in entries:
        try:
            batch.accepted.append(kong_record(entry, fmt, source=source))
        except ContractError as error:
            safe = redacted(entry, fmt.redact)
            kept = raw if raw is not None and safe is entry else orjson.dumps(safe)
            batch.rejected.append(Rejected(kept, error))


def ndjson_body(body: bytes, *, source: str, fast: bool = True) -> Batch:
    """NDJSON snapshot events, one per line; blank lines are skipped. ``fast=False``: as
    for ``kong_body``."""
    batch = Batch()
    parsed_any = False
    fast = fast and plain_json(body)
    for line in body.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        if fast and (record := snapshot_json(line, source=source)) is not None:
            parsed_any = True
            batch.accepted.append(record)
            continue
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            error = ContractError(
                SnapshotEvent.__name__, [FieldProblem("$", f"not valid JSON: {exc}")]
            )
            batch.rejected.append(Rejected(line, error))
            continue
        parsed_any = True
        try:
            batch.accepted.append(ndjson_record(data, source=source))
        except ContractError as error:
            batch.rejected.append(Rejected(line, error))
    if not parsed_any:
        if not batch.rejected:
            raise BodyError("empty body: expected snapshot events, one JSON object per line")
        raise BodyError(f"body is not NDJSON: no line is JSON ({batch.rejected[0].error})")
    return batch


def ndjson_record(data: Any, *, source: str) -> Accepted:
    """Validate one parsed NDJSON line; an event without a ``source`` gets ``source``."""
    if isinstance(data, dict) and data.get("source") is None:
        data["source"] = source
    return snapshot_record(data)


_INDEX = re.compile(r"\[\d+\]")


def reason_label(error: ContractError) -> str:
    """A metric label for a rejection: the first bad field without list indexes (a small,
    fixed set: the contract's fields and the configured headers), or ``not_json`` /
    ``record`` for problems with the record as a whole."""
    problem = error.problems[0] if error.problems else FieldProblem("$", "")
    if problem.field == "$":
        return "not_json" if problem.reason.startswith("not valid JSON") else "record"
    return _INDEX.sub("[]", problem.field)[:120]


def reason_summary(rejected: list[Rejected], limit: int = 5) -> list[dict[str, Any]]:
    """The first ``limit`` distinct reasons, in order of first appearance, with counts."""
    counts = Counter(reason_label(r.error) for r in rejected)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in rejected:
        label = reason_label(r.error)
        if label in seen:
            continue
        seen.add(label)
        first = r.error.problems[0] if r.error.problems else FieldProblem("$", str(r.error))
        out.append({"field": first.field, "reason": first.reason[:500], "count": counts[label]})
        if len(out) == limit:
            break
    return out
