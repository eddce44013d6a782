"""The snapshot event's optional `model`: bounded and validated like a doc type, absent
means unknown, and a reader of the v1 contract without it keeps working. One model
(SnapshotEvent) carries it, through ingest's compiled path too."""

from __future__ import annotations

import json

import jsonschema
import orjson
import pytest

from anchorwatch.contracts import (
    ContractError,
    SnapshotEvent,
    SnapshotSummary,
    decode,
    decode_snapshot,
    encode,
    schemas,
)
from anchorwatch.contracts.models import _Contract
from tests.support.contracts import snapshot


def _schema() -> jsonschema.Draft202012Validator:
    path = schemas.schema_path("snapshot-event")
    return jsonschema.Draft202012Validator(json.loads(path.read_text()))


def test_absent_is_unknown_and_writes_nothing() -> None:
    event = decode(SnapshotEvent, orjson.dumps(snapshot()))
    assert event.model is None
    assert encode(event) == encode(decode_snapshot(orjson.dumps(snapshot())))
    _schema().validate(orjson.loads(encode(event)))


def test_there_is_one_model() -> None:
    assert schemas.CONTRACTS["snapshot-event"] is SnapshotEvent


def test_a_model_round_trips_and_fits_the_schema() -> None:
    event = decode(SnapshotEvent, orjson.dumps(snapshot(model="summarizer-2.1")))
    assert event.model == "summarizer-2.1"
    wire = orjson.loads(encode(event))
    assert wire["model"] == "summarizer-2.1"
    _schema().validate(wire)
    assert decode(SnapshotEvent, encode(event)) == event


def test_a_v1_reader_ignores_the_field() -> None:
    # A reader's model without the field (the summary here) skips it, as every v1 reader
    # skips unknown keys.
    wire = encode(decode_snapshot(orjson.dumps(snapshot(model="summarizer-2.1"))))
    assert orjson.loads(wire)["model"] == "summarizer-2.1"
    summary = decode(V1Summary, wire)
    assert "model" not in summary.model_dump()
    assert summary.mean_drift == decode(SnapshotSummary, wire).mean_drift


class V1Summary(_Contract):
    """A reader built on the summary as it was before the model and the breakdown."""

    event_id: str
    doc_type: str
    mean_drift: float


def test_the_ingest_fast_path_mirrors_the_field() -> None:
    # connectors/native mirrors SnapshotEvent field by field and stops the service on a
    # difference: it knows `model`, and writes it where contracts.encode does.
    from anchorwatch.connectors import records
    from anchorwatch.connectors.kong import DEFAULT_FORMAT
    from anchorwatch.connectors.validation import check_native_contract

    check_native_contract()
    assert "model" in SnapshotEvent.model_fields
    line = orjson.dumps(snapshot(model="summarizer-2.1", source="gw"))
    fast = records._reader(DEFAULT_FORMAT).ndjson_line(line, "gw", 0, 2**62)
    assert fast is not None
    assert fast.value == encode(decode_snapshot(line))


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("", "String should have at least 1 character"),
        ("m" * 129, "String should have at most 128 characters"),
        ("m" * 10_000, "String should have at most 128 characters"),
        ("v2\x00", "U+0000 (Cc) not allowed"),
        ("v2\u200b", "U+200B (Cf) not allowed"),
        ("\u3164", "only whitespace or invisible characters"),
        (2.1, "Input should be a valid string"),
        (["v2"], "Input should be a valid string"),
    ],
)
def test_a_bad_model_is_refused_naming_the_field(model: object, fragment: str) -> None:
    with pytest.raises(ContractError) as caught:
        decode(SnapshotEvent, orjson.dumps(snapshot(model=model)))
    assert caught.value.first_field == "model"
    assert fragment in str(caught.value)
    assert len(str(caught.value)) < 300  # the value itself is not echoed


def test_model_versions_are_nfc_normalised() -> None:
    decomposed = decode(SnapshotEvent, orjson.dumps(snapshot(model="re\u0301sume\u0301")))
    assert decomposed.model == "r\u00e9sum\u00e9"


def test_the_schema_bounds_the_model_too() -> None:
    assert not _schema().is_valid(
        snapshot(
            model="m" * 129, mean_drift=0.1, max_drift=0.1, max_kl_divergence=0.1, resample_count=0
        )
    )
