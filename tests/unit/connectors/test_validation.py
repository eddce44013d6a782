"""The ingest hot path agrees with the contract: same verdict, same bytes, same errors.

The compiled reader (``_native.SnapshotReader``, as records.py calls it) against the
reference (the pydantic contract, as ``ndjson_record`` applies it): whatever the reference
refuses, the compiled reader must refuse; whatever it accepts, the compiled reader writes
byte for byte, or leaves to the reference path where it has a documented doubt (a -0.0, a
float the two encoders print differently, a doc type beyond printable ASCII).
"""

from __future__ import annotations

import copy
from typing import Any, Final

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors import records, validation
from anchorwatch.connectors.kong import DEFAULT_FORMAT
from anchorwatch.connectors.records import _ANY_TIME, ndjson_record
from anchorwatch.connectors.validation import snapshot_record, summary_of
from anchorwatch.contracts import ContractError, SnapshotEvent, SnapshotSummary, encode
from anchorwatch.contracts.avro import decode_summary, encode_summary
from anchorwatch.demo.generator import TrafficConfig, generate

SOURCE: Final = "validation-test"


def _model_outcome(data: Any) -> bytes | str:
    try:
        return ndjson_record(data, source=SOURCE).value
    except ContractError as error:
        return str(error)


def _fast_outcome(data: Any) -> bytes | None:
    """What the compiled reader writes for ``data``'s JSON text; None where it leaves the
    record to the reference path."""
    text = orjson.dumps(data)
    accepted = records._reader(DEFAULT_FORMAT).ndjson_line(text, SOURCE, *_ANY_TIME)
    return None if accepted is None else accepted.value


def _writable(data: Any) -> bool:
    try:
        orjson.dumps(data)
    except TypeError:
        return False
    return True


# serde_json and orjson print floats alike below this (snapshot.rs, FLOAT_BELOW).
_FLOAT_BELOW: Final = 1e16


def _compiled_may_defer(data: dict[str, Any]) -> bool:
    """A valid record the compiled reader leaves to the reference path on purpose (snapshot.rs:
    plain_float, plain_doc_type)."""
    doc_type = data.get("doc_type")
    if isinstance(doc_type, str) and not all(" " <= c <= "~" for c in doc_type):
        return True
    for anchor in data.get("anchors") or []:
        for key in ("l2_norm", "cosine_angle", "kl_divergence", "drift_score"):
            value = anchor.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = float(value)
                if abs(value) >= _FLOAT_BELOW or (value == 0.0 and str(value)[0] == "-"):
                    return True
    return False


def test_generated_traffic_valid_and_malformed_gets_the_contracts_verdict_and_bytes() -> None:
    traffic = generate(
        TrafficConfig(seed=5, minutes=8, malformed_rate=0.2, background_fault_rate=0.2)
    )
    reader = records._reader(DEFAULT_FORMAT)
    outcomes = {"accepted": 0, "rejected": 0}
    for record in traffic.records():
        fast = reader.ndjson_line(record.raw, SOURCE, *_ANY_TIME)
        if record.event is None:
            assert fast is None, record.raw
            assert isinstance(_model_outcome(_loads_or_none(record.raw)), str)
            outcomes["rejected"] += 1
        else:
            assert fast is not None, record.raw
            assert fast.value == encode(record.event) == _model_outcome(orjson.loads(record.raw))
            outcomes["accepted"] += 1
    assert outcomes["accepted"] > 500
    assert outcomes["rejected"] > 50


def _loads_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # not JSON: any non-object gets the same refusal


def test_the_record_carries_id_and_doc_type() -> None:
    event = next(r.event for r in generate(TrafficConfig(minutes=1)).records() if r.event)
    record = snapshot_record(orjson.loads(encode(event)))
    assert (record.event_id, record.doc_type) == (event.event_id, event.doc_type)


def test_derived_fields_sent_by_a_client_are_recomputed_not_trusted() -> None:
    event = next(r.event for r in generate(TrafficConfig(minutes=1)).records() if r.event)
    data = orjson.loads(encode(event))
    data["mean_drift"] = 0.99
    data["resample_count"] = 1234
    data["unknown_newer_field"] = {"x": 1}
    assert snapshot_record(data).value == encode(event)


_wild = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1, 0, -1, 1.0000001, 2**63, "", "a\x00b", "\x7f", "x" * 513]),
    st.integers(),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
_name = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\x7f"))


@st.composite
def _anchor(draw: st.DrawFn) -> dict[str, Any]:
    unit = st.floats(0, 1) | st.sampled_from([0, 1, -0.0, 0.0, 1.0])
    return {
        "anchor_id": draw(_name.filter(bool).map(lambda t: t[:200])),
        "position": draw(st.integers(0, 10**9)),
        "l2_norm": draw(st.floats(0, 1e6) | st.sampled_from([0, 3, -0.0])),
        "cosine_angle": draw(st.floats(-1, 1) | st.sampled_from([-1, 0, 1, -0.0])),
        "kl_divergence": draw(st.floats(0, 50) | st.sampled_from([0, -0.0])),
        "drift_score": draw(unit),
        "recommendation": draw(st.sampled_from(["none", "re-sample"]) | _name.filter(bool)),
    }


@st.composite
def _event(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event, then at most a few perturbations: a field replaced by anything, a
    field removed, an unknown key added."""
    anchors = draw(st.lists(_anchor(), max_size=5))
    data: dict[str, Any] = {
        "event_id": draw(_name.filter(bool).map(lambda t: t[:200])),
        "event_time_ms": draw(
            st.integers(946_684_800_000, 4_102_444_799_999)
            | st.sampled_from([946_684_800_000, 4_102_444_799_999])
        ),
        "doc_type": draw(_name.filter(bool)),
        "snapshot_status": "active" if anchors else draw(st.sampled_from(["active", "disabled"])),
        "anchor_count": len(anchors) + draw(st.integers(0, 3)),
        "anchors": anchors,
    }
    if draw(st.booleans()):
        data["source"] = draw(st.none() | _name.map(lambda t: t[:200]))
    for _ in range(draw(st.integers(0, 2))):
        target = data
        in_an_anchor = draw(st.booleans())
        if anchors and in_an_anchor:
            target = draw(st.sampled_from(anchors))
        key = draw(st.sampled_from([*target, "unknown"]))
        if draw(st.booleans()):
            target[key] = draw(_wild)
        else:
            target.pop(key, None)
    return data


@settings(max_examples=600, deadline=None)
@given(_event())
def test_any_record_gets_the_same_verdict_bytes_and_errors_as_the_contract(
    data: dict[str, Any],
) -> None:
    # An integer beyond 64 bits: orjson reads such a number as a float, so no JSON text
    # gives this dict (and it has none to give the compiled reader).
    assume(_writable(data))
    # Each path gets its own copy: neither may depend on the other's mutations.
    expected = _model_outcome(copy.deepcopy(data))
    fast = _fast_outcome(data)
    if isinstance(expected, str):
        assert fast is None, f"the compiled reader accepted what the contract refuses: {expected}"
    elif fast is None:
        assert _compiled_may_defer(data), "the compiled reader refused a valid record"
    else:
        assert fast == expected


@pytest.mark.parametrize("value", [[], "x", 3, None, True])
def test_a_record_that_is_not_an_object_is_refused_like_the_contract_does(value: Any) -> None:
    assert _fast_outcome(value) is None
    assert "expected a JSON object" in str(_model_outcome(value))


# Text that looks like the structure summary_of cuts at, in every string of the event.
_TRICKY = st.sampled_from(
    [
        "]", '],"', ',"anchors":[', '],"mean_drift":', "\\", '\\"', '"]', "}]", "é]\u2028",
        ',"kinds":{', '],"kinds":{"', '}},"top_anchors":[', "SECTION_", "TABLE", "_",
    ]
)  # fmt: skip
_TEXT = st.lists(_TRICKY | st.text(min_size=1, max_size=3), min_size=1, max_size=4).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_TEXT, _TEXT, st.floats(0, 1)), max_size=5),
    _TEXT,
    st.none() | _TEXT,
    st.none() | st.just("summarizer-2.1"),
    st.none() | st.integers(0, 3_600_000),
)
def test_a_summary_holds_the_event_without_its_anchors_whatever_its_strings_hold(
    anchors: list[tuple[str, str, float]],
    event_id: str,
    source: str | None,
    model: str | None,
    latency_ms: int | None,
) -> None:
    data = {
        "event_id": event_id, "event_time_ms": 1_764_403_200_000, "doc_type": "invoice",
        "snapshot_status": "active", "anchor_count": len(anchors), "source": source,
        "model": model, "latency_ms": latency_ms,
        "anchors": [{"anchor_id": a, "position": 1, "l2_norm": 1.0, "cosine_angle": 0.5,
                     "kl_divergence": 0.25, "drift_score": d, "recommendation": r}
                    for a, r, d in anchors],
    }  # fmt: skip
    try:
        event = SnapshotEvent.model_validate(data)
    except ValueError:
        assume(False)  # a string the contract refuses (control characters, too long)
    # The cut JSON is the summary (the top anchors, which follow the anchors, hold the
    # same strings), whatever the Avro form carries of it.
    cut = validation._without_anchors(encode(event))
    assert SnapshotSummary.model_validate_json(cut) == SnapshotSummary.of(event)
    summary = summary_of(encode(event))
    assert decode_summary(summary) == SnapshotSummary.of(event)
    assert summary == encode_summary(SnapshotSummary.of(event).model_dump())
