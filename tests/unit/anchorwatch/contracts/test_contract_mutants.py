"""What mutation testing (`make mutate`, docs/testing.md) found the contract tests did not
pin down in anchorwatch/contracts: the codec's error messages and kinds, the doc type rule's
edges (a name NFC makes longer, combining marks alone), the verdict id's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from anchorwatch.contracts import (
    SCHEMA_VERSION,
    ContractError,
    FieldProblem,
    SnapshotEvent,
    decode_baseline,
    decode_drift_event,
    decode_snapshot,
    decode_verdict,
    decode_window,
    encode,
    schemas,
    validate,
    verdict_id,
)
from anchorwatch.contracts.models import doc_type_text
from tests.support.contracts import sample_records


def _records() -> dict[str, BaseModel]:
    return sample_records()


T0 = 1_764_403_200_000


def _event(**changes: Any) -> dict[str, Any]:
    base = {
        "event_id": "req-1",
        "event_time_ms": T0,
        "doc_type": "invoice",
        "snapshot_status": "active",
        "anchor_count": 0,
    }
    return base | changes


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ([], "an array"),
        ("x", "a string"),
        (None, "null"),
        (True, "a boolean"),
        (3, "a number"),
        (2.5, "a number"),
        ((1,), "tuple"),
    ],
)
def test_a_record_that_is_not_an_object_is_refused_naming_what_it_is(value: Any, kind: str) -> None:
    with pytest.raises(ContractError) as caught:
        validate(SnapshotEvent, value)
    assert str(caught.value) == f"invalid SnapshotEvent: $: expected a JSON object, got {kind}"
    assert caught.value.record == "SnapshotEvent"
    assert caught.value.first_field == "$"


def test_an_error_names_its_record_and_each_problem_in_order() -> None:
    with pytest.raises(ContractError) as caught:
        validate(SnapshotEvent, {"event_id": "x", "doc_type": 5})
    error = caught.value
    assert error.record == "SnapshotEvent"
    assert [p.field for p in error.problems] == [
        "event_time_ms",
        "doc_type",
        "snapshot_status",
        "anchor_count",
    ]
    assert error.problems[0].reason == "required field is missing"
    assert str(error) == "invalid SnapshotEvent: " + "; ".join(str(p) for p in error.problems)
    assert "; doc_type: Input should be a valid string; snapshot_status: " in str(error)


def test_the_anchor_count_rule_names_anchors_with_both_figures() -> None:
    anchor = {
        "anchor_id": "A",
        "position": 0,
        "l2_norm": 1.0,
        "cosine_angle": 0.0,
        "kl_divergence": 0.0,
        "drift_score": 0.5,
        "recommendation": "none",
    }
    with pytest.raises(ContractError) as caught:
        validate(SnapshotEvent, _event(anchor_count=1, anchors=[anchor, anchor]))
    assert caught.value.problems == [
        FieldProblem("anchors", "the log lists 2 anchors but anchor_count is 1")
    ]


def test_text_that_is_not_json_is_refused_naming_the_record() -> None:
    with pytest.raises(ContractError) as caught:
        decode_snapshot(b"{not json")
    assert caught.value.record == "SnapshotEvent"
    assert str(caught.value).startswith("invalid SnapshotEvent: $: not valid JSON: ")


def test_a_doc_type_that_nfc_makes_longer_than_the_limit_is_refused() -> None:
    # U+0958 is excluded from composition: NFC writes it as two code points.
    assert doc_type_text("\u0958" * 256) == "\u0915\u093c" * 256
    with pytest.raises(ValidationError) as caught:
        SnapshotEvent.model_validate(_event(doc_type="\u0958" * 257))
    (problem,) = caught.value.errors()
    assert problem["type"] == "doc_type_length"
    assert problem["msg"] == "longer than 512 characters"


@pytest.mark.parametrize(
    ("doc_type", "code", "message"),
    [
        ("a\u200bb", "doc_type_char", "U+200B (Cf) not allowed"),
        ("x\u2028", "doc_type_char", "U+2028 (Zl) not allowed"),
        ("\u0301", "doc_type_blank", "only whitespace or invisible characters"),  # Mn alone
        ("\u20dd", "doc_type_blank", "only whitespace or invisible characters"),  # Me alone
        ("\u3164 \u2800", "doc_type_blank", "only whitespace or invisible characters"),
    ],
)
def test_a_doc_type_refused_says_why(doc_type: str, code: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SnapshotEvent.model_validate(_event(doc_type=doc_type))
    (problem,) = caught.value.errors()
    assert (problem["type"], problem["msg"]) == (code, message)


def test_a_doc_type_with_a_mark_on_a_letter_is_kept_in_nfc() -> None:
    assert doc_type_text("e\u0301") == "\u00e9"
    assert doc_type_text("a\u20dd") == "a\u20dd"


def test_a_verdict_id_is_v1_and_32_hex_digits_of_its_inputs() -> None:
    vid = verdict_id("invoice", T0, "2")
    assert vid.startswith("v1-")
    assert len(vid) == 35
    assert int(vid[3:], 16) >= 0
    assert vid == verdict_id("invoice", T0, "2")
    others = {verdict_id("invoice", T0 + 1, "2"), verdict_id("invoices", T0, "2"),
              verdict_id("invoice", T0, "3")}  # fmt: skip
    assert vid not in others
    assert len(others) == 3


def test_encode_leaves_out_what_is_none() -> None:
    event = SnapshotEvent.model_validate(_event())
    assert event.source is None
    written = orjson.loads(encode(event))
    assert "source" not in written
    assert written["anchors"] == []
    with_source = orjson.loads(encode(event.model_copy(update={"source": "gw"})))
    assert with_source["source"] == "gw"


@pytest.mark.parametrize("name", ["window-aggregate", "verdict", "baseline", "drift-event"])
def test_each_record_decodes_from_its_own_bytes_and_refuses_another_kind(name: str) -> None:
    records = _records()
    decoder = {
        "window-aggregate": decode_window,
        "verdict": decode_verdict,
        "baseline": decode_baseline,
        "drift-event": decode_drift_event,
    }[name]
    record = records[name]
    assert decoder(encode(record)) == record
    assert decoder(encode(record).decode()) == record
    other = "baseline" if name != "baseline" else "verdict"
    with pytest.raises(ContractError) as caught:
        decoder(encode(records[other]))
    assert caught.value.record == type(record).__name__


def test_write_all_writes_each_schema_and_can_write_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schemas, "SCHEMA_DIR", tmp_path / "schemas")
    for _ in range(2):  # the directory exists the second time
        paths = schemas.write_all()
        assert [p.name for p in paths] == [
            f"{name}.v{SCHEMA_VERSION}.schema.json" for name in schemas.CONTRACTS
        ]
        for name, path in zip(schemas.CONTRACTS, paths, strict=True):
            assert path.read_text(encoding="utf-8") == schemas.render(name)
