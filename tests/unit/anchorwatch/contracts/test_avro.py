"""The summaries topic's binary form against the Avro library and the contract."""

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
    decode_summary,
    encode_summary,
    summary_fingerprint,
)

_SCHEMA = fastavro.parse_schema(json.loads(SCHEMA_FILE.read_text()))
_INT = st.integers(-(2**31), 2**31 - 1)
_FIELDS = st.fixed_dictionaries({
    "event_id": st.text(), "event_time_ms": st.integers(-(2**63), 2**63 - 1),
    "doc_type": st.text(), "snapshot_status": st.text(), "anchor_count": _INT,
    "source": st.none() | st.text(), "mean_drift": st.floats(), "max_drift": st.floats(),
    "max_kl_divergence": st.floats(), "resample_count": _INT,
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
