"""Request bodies and log lines -> validated snapshot events and rejects. Pure logic.

Two input formats:

- ``kong``: what Kong's http-log plugin posts, one log entry (a JSON object) or a JSON array
  of them when it batches (see ``kong.py`` for the mapping);
- ``ndjson``: snapshot events in the project's own schema, one JSON object per line.

A body as a whole that cannot be read (not JSON at all, empty) raises ``BodyError``; every
entry or line that does not fit the contract becomes a ``Rejected`` with the raw bytes and a
``ContractError`` naming the field, for the dead-letter topic.

Accepted events come out validated and encoded (``validation``). Both formats first take a
compiled fast path (``_native``, see ``validation``), which reads only what the mapping
needs (for Kong, the snapshot headers in each configured location, ``started_at`` and the
model version where ``KongFormat.model_from`` says; the rest of each entry is skipped
unread). An entry or line it does not accept takes the
reference path (orjson, the pydantic contract), which accepts it or says exactly why not;
so does a whole body that it cannot read. Both paths give the same answer, byte for byte
(tests/unit/connectors/test_fastpath.py).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from anchorwatch.connectors._native import SnapshotReader
from anchorwatch.connectors.kong import (
    DEFAULT_FORMAT,
    KongFormat,
    KongNotes,
    json_kind,
    kong_record,
    redacted,
)
from anchorwatch.connectors.kong_split import NOT_JSON, split_entries, unreadable_entry
from anchorwatch.connectors.publisher import tight
from anchorwatch.connectors.validation import (
    Accepted,
    ContractChanged,
    TimeWindow,
    snapshot_record,
    summary_of,
)
from anchorwatch.contracts import ContractError, FieldProblem, SnapshotEvent, encode
from anchorwatch.contracts.avro import MARKER, summary_fingerprint

Format = Literal["kong", "ndjson"]


class BodyError(ValueError):
    """The body as a whole is unusable (HTTP 400): not JSON at all, or empty."""


@dataclass(frozen=True, slots=True)
class Rejected:
    raw: bytes
    error: ContractError

    def __post_init__(self) -> None:
        # A caught error keeps the frames that raised it (its traceback, and that of the
        # pydantic error in its context), and they hold the whole parsed body and the batch
        # that holds this error: a reference cycle that only a full collection frees, which
        # let large rejected requests pile up hundreds of MB. The message is all we need.
        error = self.error
        error.__traceback__ = error.__context__ = error.__cause__ = None


@dataclass(slots=True)
class Batch:
    accepted: list[Accepted] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    notes: KongNotes = field(default_factory=KongNotes)

    def __len__(self) -> int:
        return len(self.accepted) + len(self.rejected)


@functools.lru_cache(maxsize=16)
def _reader(fmt: KongFormat) -> SnapshotReader:
    return SnapshotReader(
        fmt.doc_type,
        fmt.snapshot_status,
        fmt.anchor_count,
        fmt.snapshot_log,
        fmt.request_id,
        list(fmt.doc_type_locations),
        list(fmt.measurement_locations),
        list(fmt.request_id_locations),
        Accepted,
        fmt.model_from,
        MARKER + summary_fingerprint(),
    )


# Without a window, the contract's own bounds (2000-01-01 .. 2100-01-01).
_ANY_TIME: Final = (946_684_800_000, 4_102_444_800_000 - 1)


def check_native_summary() -> None:
    """Raise ContractChanged unless the compiled path writes the summaries topic's records
    as ``contracts.avro.encode_summary`` does (connectors/native/src/summary.rs mirrors the
    schema's layout): on an event with every field, and on one with none but the required."""
    anchors = [
        {"anchor_id": i, "position": p, "l2_norm": 1.5, "cosine_angle": 0.5,
         "kl_divergence": 0.25, "drift_score": d, "recommendation": r}
        for i, p, d, r in [("SECTION_1", 9, 0.5, "none"), ("TABLE_001", 70_000, 0.9, "re-sample"),
                           ("\u00e9_x", 3, 0.9, "none"), ("OTHER", 1, 0.125, "none")]
    ]  # fmt: skip
    full = {
        "event_id": "req-\u00e9", "event_time_ms": 1_764_403_200_000, "doc_type": "invoice",
        "snapshot_status": "active", "anchor_count": 300, "anchors": anchors,
        "source": "gw", "model": "summarizer-2.1", "latency_ms": 1_234_567,
    }  # fmt: skip
    bare = full | {"anchors": [], "anchor_count": 0, "source": None, "model": None}
    for data in (full, bare | {"latency_ms": None}):
        line = encode(SnapshotEvent.model_validate(data))
        accepted = _reader(DEFAULT_FORMAT).ndjson_line(line, "x", *_ANY_TIME)
        if accepted is None or accepted.summary != summary_of(accepted.value):
            raise ContractChanged(
                "the summaries topic's record is not what connectors/native writes: mirror "
                "contracts.avro.encode_summary in connectors/native/src/summary.rs"
            )


check_native_summary()


def _bounds(window: TimeWindow | None) -> tuple[int, int]:
    return _ANY_TIME if window is None else (window.earliest_ms, window.latest_ms)


def kong_body(
    body: bytes,
    fmt: KongFormat = DEFAULT_FORMAT,
    *,
    source: str,
    window: TimeWindow | None = None,
    fast: bool = True,
    summaries: bool = True,
) -> Batch:
    """One Kong http-log request body: an entry or an array of entries. ``window``: the
    event times accepted now (None: whatever the contract allows). ``fast=False``: the
    reference path only (orjson and the contract for every entry), which the fast path
    must equal; for tests. ``summaries=False``: the compiled path leaves each summary
    unmade (``Accepted.summary`` None), for a service that writes no summaries topic."""
    if (
        fast
        and (batch := _kong_body_fast(body, fmt, source=source, window=window, summaries=summaries))
        is not None
    ):
        return batch
    if not body.strip():
        raise BodyError("empty body: expected a Kong log entry (a JSON object) or an array of them")
    if fast and (
        batch := _kong_array_by_entry(body, fmt, source=source, window=window, summaries=summaries)
    ):
        return batch
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # One entry that is not JSON must not sink its neighbours: split the batch.
        if (
            batch := _kong_entries(body, fmt, source=source, window=window, summaries=summaries)
        ) is not None:
            return batch
        raise BodyError(f"body is not JSON: {exc}") from None
    if not isinstance(value, dict | list):
        raise BodyError(
            f"expected a Kong log entry (a JSON object) or an array of them, got {json_kind(value)}"
        )
    batch = Batch()
    add_kong_value(
        batch, value, body if isinstance(value, dict) else None, fmt, source=source, window=window
    )
    return batch


def _kong_array_by_entry(
    body: bytes,
    fmt: KongFormat,
    *,
    source: str,
    window: TimeWindow | None,
    summaries: bool = True,
) -> Batch | None:
    """A JSON array of entries that the compiled reader cannot read as a whole, one entry
    at a time (each through the compiled reader first), as the reference path would answer:
    never the whole batch in Python objects at once (about ten times its size). None when
    it is not an array of entries that all parse."""
    if body.lstrip(_SPACE)[:1] != b"[" or (parts := split_entries(body)) is None:
        return None
    batch = Batch()
    reader = _reader(fmt)
    for part in parts:
        records = reader.kong(part, source, *_bounds(window), summaries)
        if records is not None and len(records) == 1 and records[0] is not None:
            batch.accepted.append(records[0])
            continue
        try:
            entry = orjson.loads(part)
        except orjson.JSONDecodeError:
            return None
        add_kong_value(batch, entry, None, fmt, source=source, window=window)
    return batch


def _kong_entries(
    body: bytes,
    fmt: KongFormat,
    *,
    source: str,
    window: TimeWindow | None,
    summaries: bool = True,
) -> Batch | None:
    """A body that is not JSON as a whole, entry by entry: the entries that parse as
    usual, the others dead-lettered naming their index and field. None when the top level
    cannot be split into entries."""
    parts = split_entries(body)
    if parts is None:
        return None
    batch = Batch()
    reader = _reader(fmt)
    for index, part in enumerate(parts):
        fast = reader.kong(part, source, *_bounds(window), summaries)
        if fast is not None and len(fast) == 1 and fast[0] is not None:
            batch.accepted.append(fast[0])
            continue
        try:
            part.decode()  # orjson's error for a bad byte always points at the start
            entry = orjson.loads(part)
        except (UnicodeDecodeError, orjson.JSONDecodeError) as exc:
            batch.rejected.append(Rejected(*unreadable_entry(part, index, exc, fmt.redact)))
            continue
        add_kong_value(batch, entry, part, fmt, source=source, window=window)
    return batch


def _kong_body_fast(
    body: bytes,
    fmt: KongFormat,
    *,
    source: str,
    window: TimeWindow | None,
    summaries: bool = True,
) -> Batch | None:
    """``kong_body`` for a body the compiled reader can read: each entry it accepts, and
    the reference path (``add_kong_value``) for the rest. None: use the reference path for
    the whole body."""
    records = _reader(fmt).kong(body, source, *_bounds(window), summaries)
    if records is None:
        return None
    # Only the entries it refuses are parsed again, one at a time: orjson's reading of a
    # whole 13 MB batch is about ten times its size in Python objects.
    parts: list[bytes] | None = None
    batch = Batch()
    for i, record in enumerate(records):
        if record is not None:
            batch.accepted.append(record)
            continue
        if parts is None:
            parts = split_entries(body)
            if parts is None or len(parts) != len(records):
                return None  # the reference path answers for the whole body
        try:
            entry = orjson.loads(parts[i])
        except orjson.JSONDecodeError:
            return None  # what orjson refuses, the reference path answers for
        if len(records) == 1 and isinstance(entry, dict) and body.lstrip(_SPACE)[:1] == b"{":
            add_kong_value(batch, entry, body, fmt, source=source, window=window)
        else:
            add_kong_value(batch, entry, None, fmt, source=source, window=window)
    return batch


_SPACE = b" \t\r\n"


def add_kong_value(
    batch: Batch,
    value: Any,
    raw: bytes | None,
    fmt: KongFormat,
    *,
    source: str,
    window: TimeWindow | None = None,
) -> None:
    """Add one parsed Kong entry, or each entry of an array, to ``batch``. ``raw`` is the
    entry's original bytes when known; otherwise, or when the entry carries a header to
    redact, the dead letter gets the entry re-serialized."""
    entries = value if isinstance(value, list) else [value]
    for entry in entries:
        try:
            batch.accepted.append(
                kong_record(entry, fmt, source=source, window=window, notes=batch.notes)
            )
        except ContractError as error:
            safe = redacted(entry, fmt.redact)
            kept = raw if raw is not None and safe is entry else tight(orjson.dumps(safe))
            batch.rejected.append(Rejected(kept, error))


def ndjson_body(
    body: bytes,
    *,
    source: str,
    window: TimeWindow | None = None,
    fast: bool = True,
    summaries: bool = True,
) -> Batch:
    """NDJSON snapshot events, one per line; blank lines are skipped. ``window``,
    ``fast=False`` and ``summaries``: as for ``kong_body``."""
    batch = Batch()
    parsed_any = False
    reader = _reader(DEFAULT_FORMAT) if fast else None
    earliest_ms, latest_ms = _bounds(window)
    for line in body.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        if (
            reader is not None
            and (record := reader.ndjson_line(line, source, earliest_ms, latest_ms, summaries))
            is not None
        ):
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
            batch.accepted.append(ndjson_record(data, source=source, window=window))
        except ContractError as error:
            batch.rejected.append(Rejected(line, error))
    if not parsed_any:
        if not batch.rejected:
            raise BodyError("empty body: expected snapshot events, one JSON object per line")
        raise BodyError(f"body is not NDJSON: no line is JSON ({batch.rejected[0].error})")
    return batch


def ndjson_record(data: Any, *, source: str, window: TimeWindow | None = None) -> Accepted:
    """Validate one parsed NDJSON line; an event without a ``source`` gets ``source``."""
    if isinstance(data, dict) and data.get("source") is None:
        data["source"] = source
    return snapshot_record(data, window)


_INDEX = re.compile(r"\[\d+\]")


def reason_label(error: ContractError) -> str:
    """A metric label for a rejection: the first bad field without list indexes (a small,
    fixed set: the contract's fields and the configured headers), or ``not_json`` /
    ``record`` for problems with the record as a whole."""
    problem = error.problems[0] if error.problems else FieldProblem("$", "")
    # An entry that is not JSON names the field its bad byte is in: any key a client sent.
    if problem.reason.startswith(NOT_JSON):
        return "not_json"
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
