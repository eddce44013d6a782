"""The ingest hot path agrees with the contract: same verdict, same bytes, same errors."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorwatch.connectors.validation import snapshot_record
from anchorwatch.contracts import ContractError, SnapshotEvent, encode, validate
from anchorwatch.generator import TrafficConfig, generate


def _model_outcome(data: Any) -> bytes | str:
    try:
        return encode(validate(SnapshotEvent, data))
    except ContractError as error:
        return str(error)


def _fast_outcome(data: Any) -> bytes | str:
    try:
        return snapshot_record(data).value
    except ContractError as error:
        return str(error)


def test_generated_traffic_valid_and_malformed_gets_the_contracts_verdict_and_bytes() -> None:
    traffic = generate(
        TrafficConfig(seed=5, minutes=8, malformed_rate=0.2, background_fault_rate=0.2)
    )
    outcomes = {"accepted": 0, "rejected": 0}
    for record in traffic.records():
        try:
            data = orjson.loads(record.raw)
        except orjson.JSONDecodeError:
            continue
        fast = _fast_outcome(orjson.loads(record.raw))
        assert fast == _model_outcome(data)
        if record.event is None:
            assert isinstance(fast, str)
            outcomes["rejected"] += 1
        else:
            assert fast == encode(record.event)
            outcomes["accepted"] += 1
    assert outcomes["accepted"] > 500
    assert outcomes["rejected"] > 50


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
    # Each path gets its own copy: neither may depend on the other's mutations.
    expected = _model_outcome(copy.deepcopy(data))
    assert _fast_outcome(data) == expected


@pytest.mark.parametrize("value", [[], "x", 3, None, True])
def test_a_record_that_is_not_an_object_is_refused_like_the_contract_does(value: Any) -> None:
    assert _fast_outcome(value) == _model_outcome(value)
    assert "expected a JSON object" in str(_fast_outcome(value))
