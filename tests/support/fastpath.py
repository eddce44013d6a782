"""The compiled ingest fast path against the reference path (orjson + the pydantic contract),
shared by its property tests, the fuzz corpus replay and bench/fuzz_ingest.py: Kong formats
and ingest time windows to try, a batch's outcome, and the check that both paths agree.
"""

from __future__ import annotations

from typing import Any

import orjson
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


MODEL_HEADER = "x-model-version"

FORMATS = [
    DEFAULT_FORMAT,
    KongFormat(doc_type_locations=("response", "request")),
    KongFormat(
        doc_type_locations=("request", "response"),
        measurement_locations=("request", "response"),
        request_id_locations=("response",),
    ),
    KongFormat(request_id="x-anthropic-doc-type", doc_type="x-request-id"),
    # Where the model version comes from (the default: the request body's `model`).
    KongFormat(model_from=f"header:{MODEL_HEADER}"),
    KongFormat(model_from="route"),
    KongFormat(model_from="service"),
    KongFormat(model_from="header:x-anthropic-doc-type"),  # one header, two fields
]

# Model versions, good, bad and odd, for the places a Kong entry's model comes from.
_MODELS = st.sampled_from(
    [
        "summarizer-2.1",
        " v2 ",
        "m" * 128,
        "m" * 129,
        "m" * 10_000,
        "",
        "v\x07",
        "v\u200b2",
        "modèle",
        "e\u0301",  # decomposed: NFC makes it one character
        None,
        5,
        ["a", "a"],
        ["a", "b"],
        {"x": 1},
    ]
)
_BODY_TEXTS = st.sampled_from(
    [
        "not json",
        '{"model": "a", "model": "b"}',
        '{"model": "a\\ud800"}',
        "[1]",
        '"x"',
        "",
        '{"model": 1e400}',
        '{"model": "m\\u0007"}',
        ' {"model": "v-1"} ',
        '{"model":"a"}x',
    ]
)


@st.composite
def with_model(draw: st.DrawFn, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with a model version where ``KongFormat.model_from`` may look for it: the
    request body (an object, its JSON text, text that is not JSON), the model header, the
    route's or service's name."""
    value = draw(_MODELS)
    place = draw(st.integers(0, 5))
    if place == 0:
        entry["request"]["body"] = {"model": value, "messages": [{"role": "user"}]}
    elif place == 1:
        entry["request"]["body"] = orjson.dumps({"max_tokens": 5, "model": value}).decode()
    elif place == 2:
        entry["request"]["body"] = draw(_BODY_TEXTS | st.sampled_from([5, None, ["m"]]))
    elif place == 3:
        entry["request"]["headers"][MODEL_HEADER] = value
    elif place == 4:
        entry["route"] = {"name": value, "paths": ["/v1"]} if draw(st.booleans()) else value
    else:
        entry["service"] = {"host": "h", "name": value}
    return entry
