"""`anchorwatch ingest replay FILE|-`: a file of NDJSON snapshot events or Kong log entries
through the same validation as the HTTP service, into the same topics.

Kong files hold one log entry per line (what Kong's file-log plugin writes, and `anchorwatch
generate --format kong`), or one http-log batch (a JSON array) per line. ``auto`` decides by
the first line that is JSON: an array, or an object with a ``request`` key, means Kong.
Every line that does not fit goes to the dead-letter topic with its reason; the replay stops
at the first record Kafka does not acknowledge (rerunning it duplicates what was written
before that point; ``event_id`` is the key to deduplicate).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from anchorwatch.connectors.kong import KongFormat
from anchorwatch.connectors.publisher import DeliveryError, SnapshotPublisher
from anchorwatch.connectors.records import (
    Batch,
    Format,
    Rejected,
    add_kong_value,
    ndjson_record,
    reason_label,
)
from anchorwatch.contracts import ContractError, FieldProblem

ReplayFormat = Literal["auto", "kong", "ndjson"]


@dataclass
class ReplaySummary:
    lines: int = 0
    accepted: int = 0
    rejected: int = 0
    delivered: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    format: Format | None = None
    elapsed_s: float = 0.0


def detect_format(value: Any) -> Format:
    if isinstance(value, list) or (isinstance(value, dict) and "request" in value):
        return "kong"
    return "ndjson"


def replay(
    lines: Iterable[bytes],
    publisher: SnapshotPublisher,
    *,
    fmt: ReplayFormat,
    kong_format: KongFormat,
    source: str,
    progress: Callable[[int], object] = lambda _n: None,
) -> ReplaySummary:
    """Validate and produce every line; flush; return the counts. Raises DeliveryError when
    Kafka does not acknowledge a record (checked as reports come in, and at the end)."""
    summary = ReplaySummary(format=None if fmt == "auto" else fmt)
    started = time.perf_counter()
    for line in lines:
        progress(len(line))
        body = line.strip()
        if not body:
            continue
        summary.lines += 1
        batch = Batch()
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            error = ContractError("record", [FieldProblem("$", f"not valid JSON: {exc}")])
            batch.rejected.append(Rejected(body, error))
        else:
            if summary.format is None:
                summary.format = detect_format(value)
            if summary.format == "kong":
                add_kong_value(
                    batch,
                    value,
                    body if isinstance(value, dict) else None,
                    kong_format,
                    source=source,
                )
            else:
                try:
                    batch.accepted.append(ndjson_record(value, source=source))
                except ContractError as error:
                    batch.rejected.append(Rejected(body, error))
        for record in batch.accepted:
            publisher.publish_record(record)
        for r in batch.rejected:
            publisher.reject(r.raw, r.error)
            summary.reasons[reason_label(r.error)] += 1
        summary.accepted += len(batch.accepted)
        summary.rejected += len(batch.rejected)
        if publisher.stats.failed:
            # Stop at the first failure instead of pushing the rest into a dead broker.
            raise DeliveryError(
                f"Kafka did not acknowledge {publisher.stats.failed} record(s) "
                f"({publisher.stats.errors}); stopped after {summary.lines} lines"
            )
    summary.delivered = publisher.flush().delivered
    summary.elapsed_s = time.perf_counter() - started
    return summary
