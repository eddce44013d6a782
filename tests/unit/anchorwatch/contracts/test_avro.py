"""The summaries topic's binary form against the Avro library and the contract: v2 written,
v1 and v2 read."""

from __future__ import annotations

import io
import json
from typing import Any, Final

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorwatch.contracts import SnapshotSummary
from anchorwatch.contracts.avro import (
    MARKER,
    SCHEMA_FILE,
    SCHEMA_FILE_V1,
    decode_summary,
    encode_summary,
    summary_fingerprint,
)
from anchorwatch.contracts.breakdown import KINDS

_SCHEMA = fastavro.parse_schema(json.loads(SCHEMA_FILE.read_text()))
_SCHEMA_V1 = fastavro.parse_schema(json.loads(SCHEMA_FILE_V1.read_text()))
_INT = st.integers(-(2**31), 2**31 - 1)
_LONG = st.integers(-(2**63), 2**63 - 1)
_KIND = st.fixed_dictionaries(
    {"anchor_count": _LONG, "mean_drift": st.floats(), "max_drift": st.floats()}
)
_TOP = st.fixed_dictionaries(
    {"anchor_id": st.text(), "position": _LONG, "drift_score": st.floats()}
)
_FIELDS = st.fixed_dictionaries({
    "event_id": st.text(), "event_time_ms": _LONG,
    "doc_type": st.text(), "snapshot_status": st.text(), "anchor_count": _INT,
    "source": st.none() | st.text(), "model": st.none() | st.text(),
    "latency_ms": st.none() | _INT, "mean_drift": st.floats(), "max_drift": st.floats(),
    "max_kl_divergence": st.floats(), "resample_count": _INT,
    "kinds": st.dictionaries(st.sampled_from(KINDS) | st.text(), _KIND, max_size=9),
    "top_anchors": st.lists(_TOP, max_size=4),
})  # fmt: skip


def _by_fastavro(fields: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _SCHEMA, fields)
    return out.getvalue()


@settings(max_examples=500, deadline=None)
@given(_FIELDS)
def test_a_summary_is_byte_for_byte_what_the_avro_library_writes(fields: dict[str, Any]) -> None:
    """Any values, edge cases included (every long, any text, NaN): the same bytes, after
    the single-object header."""
    record = encode_summary(fields)
    header = MARKER + summary_fingerprint()
    assert record[: len(header)] == header
    assert record[len(header) :] == _by_fastavro(fields)


def test_the_schema_has_the_contracts_fields_in_order() -> None:
    """What a producer of its own reads in the .avsc is the contract: same names, same order
    (the binary form has no names, so the order is the format), the optional one a union."""
    names = [f["name"] for f in json.loads(SCHEMA_FILE.read_text())["fields"]]
    assert names == list(SnapshotSummary.model_fields)
    kinds = {f["name"]: f["type"] for f in json.loads(SCHEMA_FILE.read_text())["fields"]}
    assert kinds["source"] == ["null", "string"]


def test_a_summary_decodes_back_to_the_contract() -> None:
    summary = SnapshotSummary(
        event_id="e-1", event_time_ms=1_764_403_200_000, doc_type="invoice",
        snapshot_status="disabled", anchor_count=0, source=None, mean_drift=0.0,
        max_drift=0.0, max_kl_divergence=0.0, resample_count=0,
    )  # fmt: skip
    assert decode_summary(encode_summary(summary.model_dump())) == summary


def test_a_summary_with_its_breakdown_decodes_back_to_the_contract() -> None:
    summary = SnapshotSummary.model_validate({
        "event_id": "e-2", "event_time_ms": 1_764_403_200_000, "doc_type": "invoice",
        "snapshot_status": "active", "anchor_count": 3, "source": "kong", "model": "m-2",
        "latency_ms": 1_840, "mean_drift": 0.5, "max_drift": 0.9, "max_kl_divergence": 0.1,
        "resample_count": 1,
        "kinds": {"SECTION": {"anchor_count": 2, "mean_drift": 0.3, "max_drift": 0.5},
                  "TABLE": {"anchor_count": 1, "mean_drift": 0.9, "max_drift": 0.9}},
        "top_anchors": [{"anchor_id": "TABLE_001", "position": 40, "drift_score": 0.9},
                        {"anchor_id": "SECTION_002", "position": 5, "drift_score": 0.5}],
    })  # fmt: skip
    assert decode_summary(encode_summary(summary.model_dump())) == summary


def test_a_v1_record_still_decodes_without_model_latency_or_breakdown() -> None:
    """What the connectors wrote before v2: read with its own schema, the new fields their
    defaults."""
    fields = {**_ONE, "event_time_ms": 1_764_403_200_000}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _SCHEMA_V1, fields)
    fingerprint_v1 = bytes.fromhex("e5a6bb2226cf1a64")
    summary = decode_summary(MARKER + fingerprint_v1 + out.getvalue())
    assert summary.model_dump() == {
        **fields,
        "model": None,
        "latency_ms": None,
        "kinds": {},
        "top_anchors": [],
    }


def test_a_v1_reader_resolves_a_v2_record() -> None:
    """A consumer that knows only v1 decodes a v2 record with the writer's schema resolved
    against its own (Avro's schema resolution): the fields it knows, the rest dropped."""
    fields = {**_ONE, "model": "m-1", "latency_ms": 12,
              "kinds": {"OTHER": {"anchor_count": 1, "mean_drift": 0.5, "max_drift": 0.5}},
              "top_anchors": [{"anchor_id": "X", "position": 0, "drift_score": 0.5}]}  # fmt: skip
    record = encode_summary(fields)
    body = io.BytesIO(record[len(MARKER) + 8 :])
    assert fastavro.schemaless_reader(body, _SCHEMA, _SCHEMA_V1) == _ONE


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"event_id": "e-1"}', "header"),
        (MARKER + b"\x00" * 8, "header"),
    ],
)
def test_a_record_without_the_header_is_refused_naming_it(raw: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_summary(raw)


_ONE: Final = {
    "event_id": "e", "event_time_ms": 1, "doc_type": "d", "snapshot_status": "active",
    "anchor_count": 1, "source": None, "mean_drift": 0.5, "max_drift": 0.5,
    "max_kl_divergence": 0.0, "resample_count": 0,
}  # fmt: skip


def test_bytes_after_the_record_are_refused() -> None:
    with pytest.raises(ValueError, match="bytes left"):
        decode_summary(encode_summary(_ONE) + b"\x00")
