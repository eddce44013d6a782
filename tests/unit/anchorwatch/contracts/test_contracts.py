from __future__ import annotations

import json

import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorwatch.contracts import (
    AnchorSnapshot,
    ContractError,
    DriftEvent,
    SnapshotEvent,
    WindowAggregate,
    decode,
    decode_snapshot,
    encode,
    schemas,
    verdict_id,
)
from tests.support.contracts import T0, anchor, snapshot

# Also read from here by test_contract_mutants.py (kept for it).
from tests.support.contracts import sample_records as sample_records


def test_snapshot_round_trip_and_derived_figures() -> None:
    event = decode_snapshot(orjson.dumps(snapshot()))
    assert event.mean_drift == pytest.approx((0.87 + 0.41) / 2)
    assert event.max_drift == 0.87
    assert event.max_kl_divergence == 0.2
    assert event.resample_count == 1
    wire = orjson.loads(encode(event))
    assert wire["mean_drift"] == pytest.approx(0.64)
    assert decode_snapshot(encode(event)) == event


def test_derived_figures_on_the_wire_are_recomputed_not_trusted() -> None:
    event = decode_snapshot(orjson.dumps(snapshot(mean_drift=0.01, resample_count=99)))
    assert event.mean_drift == pytest.approx(0.64)
    assert event.resample_count == 1


def test_no_anchors_means_zero_drift() -> None:
    event = decode_snapshot(orjson.dumps(snapshot(anchor_count=0, anchors=[])))
    assert (event.mean_drift, event.max_drift, event.resample_count) == (0.0, 0.0, 0)


@pytest.mark.parametrize(
    ("record", "field", "fragment"),
    [
        (b"{not json", "$", "not valid JSON"),
        (b"[1, 2]", "$", "expected a JSON object, got an array"),
        (
            orjson.dumps({k: v for k, v in snapshot().items() if k != "doc_type"}),
            "doc_type",
            "required field is missing",
        ),
        (orjson.dumps(snapshot(doc_type="")), "doc_type", "at least 1 character"),
        (orjson.dumps(snapshot(doc_type="a\nb")), "doc_type", "doc_type: U+000A (Cc) not allowed"),
        (
            orjson.dumps(snapshot(doc_type="a\u200bb")),
            "doc_type",
            "doc_type: U+200B (Cf) not allowed",
        ),
        (orjson.dumps(snapshot(doc_type="\u202einvoice")), "doc_type", "U+202E (Cf) not allowed"),
        (orjson.dumps(snapshot(doc_type="x\u2028")), "doc_type", "U+2028 (Zl) not allowed"),
        (orjson.dumps(snapshot(doc_type="x\u0085")), "doc_type", "U+0085 (Cc) not allowed"),
        (orjson.dumps(snapshot(doc_type=" \u3000 ")), "doc_type", "only whitespace or invisible"),
        (orjson.dumps(snapshot(doc_type="\u3164")), "doc_type", "only whitespace or invisible"),
        (orjson.dumps(snapshot(doc_type="\u0301")), "doc_type", "only whitespace or invisible"),
        (orjson.dumps(snapshot(snapshot_status="paused")), "snapshot_status", "'active' or"),
        (orjson.dumps(snapshot(event_time_ms=1_764_403_200)), "event_time_ms", "greater than"),
        (orjson.dumps(snapshot(event_time_ms="1764403200000")), "event_time_ms", "integer"),
        (orjson.dumps(snapshot(anchor_count=-1)), "anchor_count", "greater than or equal"),
        (
            orjson.dumps(snapshot(anchors=[anchor(drift_score=1.7)], anchor_count=1)),
            "anchors[0].drift_score",
            "less than or equal to 1",
        ),
        (
            orjson.dumps(snapshot(anchors=[anchor(drift_score="0.5")], anchor_count=1)),
            "anchors[0].drift_score",
            "valid number",
        ),
        (
            orjson.dumps(snapshot(anchors=[anchor(cosine_angle=1.5)], anchor_count=1)),
            "anchors[0].cosine_angle",
            "less than or equal",
        ),
        (
            orjson.dumps(snapshot(anchor_count=1)),
            "anchors",
            "lists 2 anchors but anchor_count is 1",
        ),
        (
            orjson.dumps(snapshot(snapshot_status="disabled")),
            "anchors",
            "must be empty when snapshot_status is 'disabled'",
        ),
    ],
)
def test_bad_records_name_the_field_and_reason(record: bytes, field: str, fragment: str) -> None:
    with pytest.raises(ContractError) as info:
        decode_snapshot(record)
    assert info.value.first_field == field
    assert fragment in str(info.value)


def test_doc_types_are_nfc_normalised_so_one_name_is_one_doc_type() -> None:
    decomposed = decode_snapshot(orjson.dumps(snapshot(doc_type="cafe\u0301")))
    composed = decode_snapshot(orjson.dumps(snapshot(doc_type="caf\u00e9")))
    assert decomposed.doc_type == composed.doc_type == "caf\u00e9"
    # Odd but visible text is a doc type: escaping it is the renderer's job.
    odd = '<!channel> "DO" \\ report*'
    assert decode_snapshot(orjson.dumps(snapshot(doc_type=odd))).doc_type == odd


def test_every_problem_is_reported_not_just_the_first() -> None:
    bad = snapshot(doc_type="", anchor_count="x", anchors=[anchor(drift_score=2.0)])
    with pytest.raises(ContractError) as info:
        decode_snapshot(orjson.dumps(bad))
    fields = {p.field for p in info.value.problems}
    assert {"doc_type", "anchor_count", "anchors[0].drift_score"} <= fields


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    event = decode_snapshot(orjson.dumps(snapshot(added_in_v2={"x": 1})))
    assert "added_in_v2" not in orjson.loads(encode(event))


def test_checked_in_schemas_match_the_models() -> None:
    for name in schemas.CONTRACTS:
        assert schemas.schema_path(name).read_text() == schemas.render(name), (
            f"{name}: run `anchorwatch contracts schemas --write`"
        )


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schemas.schema_path(name).read_text())
    return jsonschema.Draft202012Validator(schema)


def test_encoded_records_validate_against_their_checked_in_schema() -> None:
    for name, record in sample_records().items():
        _validator(name).validate(orjson.loads(encode(record)))
        assert decode(type(record), encode(record)) == record


def test_schema_rejects_what_the_model_rejects() -> None:
    wire = orjson.loads(encode(sample_records()["snapshot-event"]))
    wire["anchors"][0]["drift_score"] = 1.5
    assert not _validator("snapshot-event").is_valid(wire)


def test_verdict_id_is_deterministic_and_distinguishes_inputs() -> None:
    assert verdict_id("nda", T0, "1") == verdict_id("nda", T0, "1")
    ids = {
        verdict_id("nda", T0, "1"),
        verdict_id("nda", T0 + 60_000, "1"),
        verdict_id("nda", T0, "2"),
        verdict_id("nda ", T0, "1"),
    }
    assert len(ids) == 4


#: (doc type, window start, job version) -> the id the code gave it when this was written.
#: The non-ASCII doc types are escapes, so that no editor's Unicode normalisation changes
#: the input: "ü" as one code point (NFC), and a CJK doc type with Slack markup in it.
VERDICT_IDS = [
    ("invoice", 1_764_403_200_000, "5", "v1-fe6185433dd5bb32f252e3afccefcd11"),
    ("Rechnung f\u00fcr Kunden", 1_764_403_260_000, "5", "v1-1fb214e07b7e137e37782cd402da77a4"),
    ("\u8acb\u6c42\u66f8 <!here>", 1_764_406_800_000, "4", "v1-e38d72c814d97de4886b1a231e03db1b"),
]


@pytest.mark.parametrize(("doc_type", "window_start_ms", "job_version", "expected"), VERDICT_IDS)
def test_verdict_id_known_answers(
    doc_type: str, window_start_ms: int, job_version: str, expected: str
) -> None:
    """The ids pinned, as the code produced them when this test was written. The Kafka
    sinks are at-least-once and consumers deduplicate verdicts by id, the alerting service
    first (its recent verdict ids, kept across restarts: ``alerting.recent_verdict_ids``).
    An upgrade that changed how an id is made (the hash, the separator, the encoding, the
    prefix) would give a verdict re-read across the upgrade (a replay, a redelivery) an id
    that was never seen, and deduplication would break across it. Changing ids needs a
    plan for that, not just new expected values here."""
    assert verdict_id(doc_type, window_start_ms, job_version) == expected


def test_cross_field_rules() -> None:
    with pytest.raises(ContractError, match="window_end_ms"):
        decode(
            WindowAggregate,
            orjson.dumps(
                {
                    "doc_type": "a",
                    "window_start_ms": T0,
                    "window_end_ms": T0,
                    "request_count": 1,
                    "mean_drift": 0.1,
                }
            ),
        )
    ev = orjson.loads(encode(sample_records()["drift-event"]))
    ev["event_type"] = "ANCHOR_DRIFT_RESOLVED"
    with pytest.raises(ContractError) as info:
        decode(DriftEvent, orjson.dumps(ev))
    assert info.value.first_field == "resolved_at_ms"


anchor_strategy = st.builds(
    AnchorSnapshot,
    anchor_id=st.text(
        st.characters(min_codepoint=32, max_codepoint=0x2FFF, exclude_characters="\x7f"),
        min_size=1,
        max_size=20,
    ),
    position=st.integers(0, 10**6),
    l2_norm=st.floats(0, 100),
    cosine_angle=st.floats(-1, 1),
    kl_divergence=st.floats(0, 50),
    drift_score=st.floats(0, 1),
    recommendation=st.sampled_from(["none", "re-sample", "re-anchor"]),
)


@settings(max_examples=200, deadline=None)
@given(
    anchors=st.lists(anchor_strategy, max_size=8),
    extra=st.integers(0, 5),
    doc_type=st.text(
        st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=0, max_size=59
    ).map(lambda text: "d" + text),
    t=st.integers(946_684_800_000, 4_102_444_799_999),
)
def test_round_trip_property(
    anchors: list[AnchorSnapshot], extra: int, doc_type: str, t: int
) -> None:
    event = SnapshotEvent(
        event_id="e",
        event_time_ms=t,
        doc_type=doc_type,
        snapshot_status="active",
        anchor_count=len(anchors) + extra,
        anchors=anchors,
    )
    wire = encode(event)
    again = decode_snapshot(wire)
    assert again == event
    assert 0.0 <= again.mean_drift <= 1.0
    _validator("snapshot-event").validate(orjson.loads(wire))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_garbage_never_escapes_as_anything_but_contract_error(raw: bytes) -> None:
    try:
        decode_snapshot(raw)
    except ContractError as exc:
        problems = exc.problems
    else:
        return  # garbage that happens to be a valid record
    assert problems
    assert all(p.field and p.reason for p in problems)
