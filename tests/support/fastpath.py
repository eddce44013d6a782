"""The compiled ingest fast path against the reference path (orjson + the pydantic contract),
shared by its property tests, the fuzz corpus replay and bench/fuzz_ingest.py: Kong formats
and ingest time windows to try, a batch's outcome, and the check that both paths agree.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from anchorwatch.connectors.kong import DEFAULT_FORMAT, KongFormat
from anchorwatch.connectors.records import Batch
from anchorwatch.connectors.validation import TimeWindow, summary_of
from anchorwatch.contracts import SnapshotSummary, decode_snapshot
from anchorwatch.contracts.avro import decode_summary


def outcome(batch: Batch) -> tuple[Any, ...]:
    return (
        [(a.event_id, a.doc_type, a.value) for a in batch.accepted],
        [(r.raw, str(r.error)) for r in batch.rejected],
        batch.notes,
    )


def assert_paths_agree(parse: Any, body: bytes, *args: Any, **kwargs: Any) -> None:
    """Both paths give the same outcome; and each accepted event's summary, made from its
    bytes, holds the contract's summary of it."""

    def run(fast: bool) -> Any:
        try:
            batch = parse(body, *args, fast=fast, **kwargs)
        except ValueError as exc:  # BodyError: the 400
            return str(exc)
        for a in batch.accepted:
            summary = SnapshotSummary.of(decode_snapshot(a.value))
            assert decode_summary(summary_of(a.value)) == summary
        return outcome(batch)

    assert run(True) == run(False)


# An ingest clock inside the generated times, so that some events fall outside the window.
WINDOWS = st.none() | st.builds(
    TimeWindow,
    st.integers(1_764_403_200_000 - 600_000, 1_764_403_200_000 + 3_600_000),
    st.sampled_from([0, 300_000]),
    st.sampled_from([60_000, 7 * 86_400_000]),
)


FORMATS = [
    DEFAULT_FORMAT,
    KongFormat(doc_type_locations=("response", "request")),
    KongFormat(
        doc_type_locations=("request", "response"),
        measurement_locations=("request", "response"),
        request_id_locations=("response",),
    ),
    KongFormat(request_id="x-anthropic-doc-type", doc_type="x-request-id"),
]
