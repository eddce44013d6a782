"""Every rule of the snapshot contract, one fixed case at a time, through both ingest paths.

The compiled reader (connectors/native, ``_native.SnapshotReader``) and the reference path
(orjson + the pydantic ``SnapshotEvent``) must agree on each field's type and bounds and on
each cross-field rule. Each rule has a case on the valid side of its bound (the compiled
reader must accept it itself, with the reference's bytes: a bound tightened in one path
fails) and one just past it (the reference names the field and the compiled reader refuses:
a check dropped from one path fails). Fixed cases, no randomness: a dropped rule fails every
run (the randomised comparisons in connectors/test_fastpath.py let some slip through).

Where the compiled reader deliberately leaves a valid record to the reference path (a -0.0,
a float the two encoders print differently, a non-ASCII doc type), the case says so.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import orjson
import pytest

from anchorwatch.connectors import records
from anchorwatch.connectors.kong import DEFAULT_FORMAT
from anchorwatch.connectors.records import _ANY_TIME, kong_body, ndjson_record
from anchorwatch.connectors.validation import Accepted
from anchorwatch.contracts import ContractError, SnapshotEvent, decode_snapshot, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.demo.malformed import MALFORMED_REASONS

SOURCE: Final = "contract-rules"
T0: Final = 1_764_403_200_000
MISSING: Final = object()


def _reader() -> Any:
    return records._reader(DEFAULT_FORMAT)


def _anchor(i: int = 0, **changes: Any) -> dict[str, Any]:
    base = {
        "anchor_id": f"SECTION_{i:03d}",
        "position": 100 * i,
        "l2_norm": 4.25,
        "cosine_angle": 0.5,
        "kl_divergence": 0.125,
        "drift_score": 0.25,
        "recommendation": "none",
    }
    return base | changes


def _event(**changes: Any) -> dict[str, Any]:
    base = {
        "event_id": "req-1",
        "event_time_ms": T0,
        "doc_type": "invoice",
        "snapshot_status": "active",
        "anchor_count": 3,
        "anchors": [_anchor(0), _anchor(1, recommendation="re-sample")],
        "source": "gw",
    }
    return base | changes


def _set(path: str, value: Any) -> dict[str, Any]:
    """The base event with one field (``anchors[1].drift_score``) set, or removed (MISSING)."""
    data = _event()
    target: dict[str, Any] = data
    key = path
    if path.startswith("anchors["):
        index, key = path.removeprefix("anchors[").split("].")
        target = data["anchors"][int(index)]
    if value is MISSING:
        del target[key]
    else:
        target[key] = value
    return data


@dataclass(frozen=True)
class Case:
    name: str
    data: dict[str, Any]
    # None: valid. Else the field the reference names first.
    refused: str | None = None
    # Valid, but the compiled reader leaves it to the reference path (on purpose).
    defers: bool = False

    def __str__(self) -> str:
        return self.name


def ok(name: str, data: dict[str, Any], *, defers: bool = False) -> Case:
    return Case(name, data, None, defers)


def bad(name: str, data: dict[str, Any], field: str) -> Case:
    return Case(name, data, field)


def a_ok(name: str, field: str, value: Any, *, defers: bool = False) -> Case:
    """A valid value of the second anchor's ``field``."""
    return ok(name, _set(f"anchors[1].{field}", value), defers=defers)


def a_bad(name: str, field: str, value: Any) -> Case:
    """A value of the second anchor's ``field`` the contract refuses."""
    return bad(name, _set(f"anchors[1].{field}", value), f"anchors[1].{field}")


def _anchors(n: int) -> list[dict[str, Any]]:
    return [_anchor(i % 1000) for i in range(n)]


E = 946_684_800_000  # EpochMillis: 2000-01-01 <= t < 2100-01-01
L = 4_102_444_800_000

EVENT_CASES: Final = [
    ok("base", _event()),
    # event_id: Identifier, 1..200 code points, no control character
    bad("event_id missing", _set("event_id", MISSING), "event_id"),
    bad("event_id a number", _set("event_id", 7), "event_id"),
    bad("event_id null", _set("event_id", None), "event_id"),
    bad("event_id empty", _set("event_id", ""), "event_id"),
    ok("event_id one char", _set("event_id", "x")),
    ok("event_id 200 chars", _set("event_id", "i" * 200)),
    ok("event_id 200 two-byte chars", _set("event_id", "é" * 200)),
    bad("event_id 201 chars", _set("event_id", "i" * 201), "event_id"),
    bad("event_id with a newline", _set("event_id", "a\nb"), "event_id"),
    bad("event_id with NUL", _set("event_id", "\x00"), "event_id"),
    bad("event_id with unit separator", _set("event_id", "a\x1fb"), "event_id"),
    bad("event_id with DEL", _set("event_id", "a\x7fb"), "event_id"),
    ok("event_id with space and tilde", _set("event_id", " a~b ")),
    # event_time_ms: strict int, 946684800000 <= t < 4102444800000
    bad("event_time_ms missing", _set("event_time_ms", MISSING), "event_time_ms"),
    bad("event_time_ms a float", _set("event_time_ms", float(T0)), "event_time_ms"),
    bad("event_time_ms a string", _set("event_time_ms", str(T0)), "event_time_ms"),
    bad("event_time_ms a boolean", _set("event_time_ms", True), "event_time_ms"),
    ok("event_time_ms lowest", _set("event_time_ms", E)),
    bad("event_time_ms below", _set("event_time_ms", E - 1), "event_time_ms"),
    bad("event_time_ms in seconds", _set("event_time_ms", T0 // 1000), "event_time_ms"),
    ok("event_time_ms highest", _set("event_time_ms", L - 1)),
    bad("event_time_ms at the end", _set("event_time_ms", L), "event_time_ms"),
    # doc_type: 1..512 characters, doc_type_text
    bad("doc_type missing", _set("doc_type", MISSING), "doc_type"),
    bad("doc_type a number", _set("doc_type", 1), "doc_type"),
    bad("doc_type empty", _set("doc_type", ""), "doc_type"),
    ok("doc_type 512 chars", _set("doc_type", "d" * 512)),
    bad("doc_type 513 chars", _set("doc_type", "d" * 513), "doc_type"),
    bad("doc_type blank", _set("doc_type", "   "), "doc_type"),
    ok("doc_type padded", _set("doc_type", " a ")),
    ok("doc_type printable ASCII ends", _set("doc_type", "!~")),
    bad("doc_type with a tab", _set("doc_type", "a\tb"), "doc_type"),
    bad("doc_type with DEL", _set("doc_type", "a\x7f"), "doc_type"),
    bad("doc_type zero-width", _set("doc_type", "a\u200bb"), "doc_type"),
    bad("doc_type bidi override", _set("doc_type", "\u202einvoice"), "doc_type"),
    bad("doc_type Hangul filler", _set("doc_type", "\u3164"), "doc_type"),
    ok("doc_type non-ASCII", _set("doc_type", "facture_é"), defers=True),
    # snapshot_status: "active" | "disabled"
    bad("snapshot_status missing", _set("snapshot_status", MISSING), "snapshot_status"),
    bad("snapshot_status other", _set("snapshot_status", "paused"), "snapshot_status"),
    bad("snapshot_status capitalised", _set("snapshot_status", "Active"), "snapshot_status"),
    bad("snapshot_status a number", _set("snapshot_status", 1), "snapshot_status"),
    # anchor_count: strict int, 0..100000
    bad("anchor_count missing", _set("anchor_count", MISSING), "anchor_count"),
    bad("anchor_count a string", _set("anchor_count", "3"), "anchor_count"),
    bad("anchor_count a float", _set("anchor_count", 3.0), "anchor_count"),
    bad("anchor_count negative", _event(anchor_count=-1, anchors=[]), "anchor_count"),
    ok("anchor_count zero", _event(anchor_count=0, anchors=[])),
    ok("anchor_count highest", _set("anchor_count", 100_000)),
    bad("anchor_count above", _set("anchor_count", 100_001), "anchor_count"),
    # anchors: a list of at most 10000, default []
    ok("anchors missing", _set("anchors", MISSING)),
    ok("anchors empty", _event(anchors=[])),
    bad("anchors null", _set("anchors", None), "anchors"),
    bad("anchors an object", _set("anchors", {}), "anchors"),
    bad("anchors item not an object", _set("anchors", [5]), "anchors[0]"),
    ok("anchors 10000", _event(anchor_count=10_000, anchors=_anchors(10_000))),
    bad("anchors 10001", _event(anchor_count=10_001, anchors=_anchors(10_001)), "anchors"),
    # source: optional, 0..200 characters
    ok("source missing", _set("source", MISSING)),
    ok("source null", _set("source", None)),
    ok("source empty", _set("source", "")),
    ok("source 200 chars", _set("source", "s" * 200)),
    ok("source 200 two-byte chars", _set("source", "é" * 200)),
    bad("source 201 chars", _set("source", "s" * 201), "source"),
    bad("source a number", _set("source", 5), "source"),
    ok("source with control characters", _set("source", "a\nb\x00")),
    # model: optional, 1..128 characters, model_version_text (a doc type's rules)
    ok("model null", _set("model", None)),
    ok("model", _set("model", "summarizer-2.1")),
    ok("model 128 chars", _set("model", "m" * 128)),
    ok("model padded, punctuation", _set("model", ' <!channel> "v2" \\ x* ')),
    bad("model 129 chars", _set("model", "m" * 129), "model"),
    bad("model 10000 chars", _set("model", "m" * 10_000), "model"),
    bad("model empty", _set("model", ""), "model"),
    bad("model blank", _set("model", "   "), "model"),
    bad("model with a tab", _set("model", "v\t2"), "model"),
    bad("model with NUL", _set("model", "v2\x00"), "model"),
    bad("model with DEL", _set("model", "v2\x7f"), "model"),
    bad("model zero-width", _set("model", "v\u200b2"), "model"),
    bad("model a number", _set("model", 2.1), "model"),
    ok("model non-ASCII", _set("model", "modèle-2"), defers=True),
    ok("model decomposed", _set("model", "e\u0301" * 64), defers=True),
    bad("model 129 chars, 128 in NFC", _set("model", "e\u0301" + "m" * 127), "model"),
    # SnapshotEvent._anchors_fit_count
    ok("anchors as many as anchor_count", _set("anchor_count", 2)),
    bad("anchors one more than anchor_count", _set("anchor_count", 1), "anchors"),
    bad("anchors with anchor_count zero", _set("anchor_count", 0), "anchors"),
    ok("disabled without anchors", _event(snapshot_status="disabled", anchors=[])),
    ok("disabled, anchors missing", _set("snapshot_status", "disabled") | {"anchors": []}),
    bad("disabled with anchors", _set("snapshot_status", "disabled"), "anchors"),
    ok("active without anchors", _event(anchors=[])),
    # Unknown and derived keys: ignored, the derived ones recomputed.
    ok("unknown key", _event(newer_field={"x": [1, 2]})),
    ok("derived figures sent", _event(mean_drift=0.99, max_drift=7, resample_count=100)),
]

ANCHOR_CASES: Final = [
    # anchor_id: Identifier
    a_bad("anchor_id missing", "anchor_id", MISSING),
    a_bad("anchor_id empty", "anchor_id", ""),
    a_bad("anchor_id a number", "anchor_id", 3),
    a_ok("anchor_id 200 chars", "anchor_id", "a" * 200),
    a_ok("anchor_id 200 two-byte chars", "anchor_id", "é" * 200),
    a_bad("anchor_id 201 chars", "anchor_id", "a" * 201),
    a_bad("anchor_id newline", "anchor_id", "A\n"),
    a_bad("anchor_id DEL", "anchor_id", "A\x7f"),
    a_ok("anchor_id with space", "anchor_id", "A 1"),
    # position: strict int >= 0
    a_bad("position missing", "position", MISSING),
    a_ok("position zero", "position", 0),
    a_bad("position negative", "position", -1),
    a_bad("position a float", "position", 1.0),
    a_bad("position a string", "position", "1"),
    # l2_norm: float >= 0 (an integer is a float)
    a_bad("l2_norm missing", "l2_norm", MISSING),
    a_ok("l2_norm zero", "l2_norm", 0.0),
    a_ok("l2_norm an integer", "l2_norm", 3),
    a_ok("l2_norm large", "l2_norm", 9_999_999_999_999_998.0),
    a_ok("l2_norm printed differently", "l2_norm", 1e16, defers=True),
    a_ok("l2_norm minus zero", "l2_norm", -0.0, defers=True),
    a_bad("l2_norm negative", "l2_norm", -1e-9),
    a_bad("l2_norm a string", "l2_norm", "4.2"),
    a_bad("l2_norm a boolean", "l2_norm", True),
    # cosine_angle: -1 <= x <= 1
    a_bad("cosine missing", "cosine_angle", MISSING),
    a_ok("cosine lowest", "cosine_angle", -1.0),
    a_ok("cosine highest", "cosine_angle", 1.0),
    a_ok("cosine integer -1", "cosine_angle", -1),
    a_bad("cosine below", "cosine_angle", -1.0000001),
    a_bad("cosine above", "cosine_angle", 1.0000001),
    a_bad("cosine null", "cosine_angle", None),
    # kl_divergence: float >= 0
    a_bad("kl missing", "kl_divergence", MISSING),
    a_ok("kl zero", "kl_divergence", 0.0),
    a_ok("kl large", "kl_divergence", 1e15),
    a_bad("kl negative", "kl_divergence", -0.001),
    a_bad("kl barely negative", "kl_divergence", -5e-324),
    a_bad("kl a string", "kl_divergence", "0.1"),
    # drift_score: 0 <= x <= 1
    a_bad("drift missing", "drift_score", MISSING),
    a_ok("drift zero", "drift_score", 0.0),
    a_ok("drift one", "drift_score", 1.0),
    a_ok("drift integer one", "drift_score", 1),
    a_bad("drift negative", "drift_score", -0.01),
    a_bad("drift above one", "drift_score", 1.01),
    a_bad("drift barely above one", "drift_score", 1.0000000000000002),
    a_bad("drift a string", "drift_score", "0.5"),
    # recommendation: any text of 1..64 characters
    a_bad("recommendation missing", "recommendation", MISSING),
    a_bad("recommendation empty", "recommendation", ""),
    a_ok("recommendation 64 chars", "recommendation", "r" * 64),
    a_ok("recommendation 64 two-byte chars", "recommendation", "é" * 64),
    a_bad("recommendation 65 chars", "recommendation", "r" * 65),
    a_ok("recommendation with control characters", "recommendation", "a\n\x00"),
    a_bad("recommendation a number", "recommendation", 1),
    # An anchor's unknown keys are ignored.
    a_ok("anchor unknown key", "note", {"deep": [1]}),
]

CASES: Final = EVENT_CASES + ANCHOR_CASES


def _reference(data: dict[str, Any]) -> Accepted | ContractError:
    try:
        return ndjson_record(copy.deepcopy(data), source=SOURCE)
    except ContractError as error:
        return error


def _compiled(data: dict[str, Any]) -> Accepted | None:
    accepted: Accepted | None = _reader().ndjson_line(orjson.dumps(data), SOURCE, *_ANY_TIME)
    return accepted


@pytest.mark.parametrize("case", CASES, ids=str)
def test_each_rule_gets_one_verdict_from_both_paths(case: Case) -> None:
    reference, compiled = _reference(case.data), _compiled(case.data)
    if case.refused is not None:
        assert isinstance(reference, ContractError), "the reference accepted it"
        assert reference.first_field == case.refused, str(reference)
        assert compiled is None, "the compiled reader accepted what the contract refuses"
        return
    assert isinstance(reference, Accepted), str(reference)
    if case.defers:
        assert compiled is None, "expected the compiled reader to leave this to the reference"
    else:
        assert compiled is not None, "the compiled reader refused a valid record"
        assert compiled == reference


def _kong_body(data: dict[str, Any]) -> bytes:
    """A Kong entry carrying ``data``'s status, count and anchors as the gateway would."""
    entry = to_kong_entry(SnapshotEvent.model_validate(_event()))
    headers = entry["response"]["headers"]
    headers["x-anthropic-snapshot-status"] = data["snapshot_status"]
    headers["x-anthropic-anchor-count"] = str(data["anchor_count"])
    headers["x-anthropic-snapshot-log"] = orjson.dumps(data["anchors"]).decode()
    return orjson.dumps([entry])


# The cases a Kong entry can carry as they are: the anchors (in the snapshot log header)
# and the rules between them, the status and the count.
KONG_CASES: Final = [
    *ANCHOR_CASES,
    *(
        c
        for c in EVENT_CASES
        if c.name.startswith(("anchors ", "disabled", "active"))
        and isinstance(c.data.get("anchors"), list)
    ),
]


@pytest.mark.parametrize("case", KONG_CASES, ids=str)
def test_each_anchor_rule_gets_one_verdict_from_both_paths_in_a_kong_entry(case: Case) -> None:
    body = _kong_body(case.data)
    reference = kong_body(body, source=SOURCE, fast=False)
    compiled = _reader().kong(body, SOURCE, *_ANY_TIME)
    assert compiled is not None
    assert len(compiled) == 1
    if case.refused is not None:
        assert reference.accepted == []
        assert len(reference.rejected) == 1
        assert compiled[0] is None, "the compiled reader accepted what the contract refuses"
        return
    assert len(reference.accepted) == 1, reference.rejected
    if case.defers:
        assert compiled[0] is None
    else:
        assert compiled[0] == reference.accepted[0]


def test_the_derived_figures_are_the_anchors_mean_maxima_and_resample_count() -> None:
    anchors = [
        _anchor(0, drift_score=0.25, kl_divergence=0.5, recommendation="re-sample"),
        _anchor(1, drift_score=0.875, kl_divergence=2.5, recommendation="none"),
        _anchor(2, drift_score=0.375, kl_divergence=0.25, recommendation="re-sample"),
        _anchor(3, drift_score=0.5, kl_divergence=1.0, recommendation="Re-sample"),
    ]
    data = _event(anchor_count=4, anchors=anchors)
    derived = {"mean_drift": 0.5, "max_drift": 0.875, "max_kl_divergence": 2.5, "resample_count": 2}
    empty = {"mean_drift": 0.0, "max_drift": 0.0, "max_kl_divergence": 0.0, "resample_count": 0}
    for event, figures in ((data, derived), (_event(anchors=[]), empty)):
        reference, compiled = _reference(event), _compiled(event)
        assert isinstance(reference, Accepted)
        assert compiled == reference
        written = orjson.loads(compiled.value)
        assert {k: written[k] for k in figures} == figures
        assert [type(written[k]) for k in figures] == [float, float, float, int]


def test_the_record_is_written_in_the_contracts_field_order() -> None:
    data = _event(anchors=[_anchor(0)], anchor_count=1, model="summarizer-2.1", latency_ms=120)
    shuffled = dict(reversed(list(data.items())))
    shuffled["anchors"] = [dict(reversed(list(_anchor(0).items())))]
    compiled = _compiled(shuffled)
    assert compiled is not None
    assert compiled.value == encode(SnapshotEvent.model_validate(data))
    assert list(orjson.loads(compiled.value)) == [
        *SnapshotEvent.model_fields,
        *SnapshotEvent.model_computed_fields,
    ]


def test_the_generators_malformed_traffic_is_refused_by_both_paths_and_the_rest_taken() -> None:
    traffic = generate(TrafficConfig(seed=17, minutes=6, malformed_rate=0.3))
    refused: Counter[str] = Counter()
    taken = 0
    reader = _reader()
    for record in traffic.records():
        compiled = reader.ndjson_line(record.raw, SOURCE, *_ANY_TIME)
        if record.event is None:
            assert compiled is None, (record.malformed_reason, record.raw)
            with pytest.raises(ContractError):
                decode_snapshot(record.raw)
            refused[str(record.malformed_reason)] += 1
        else:
            assert compiled is not None, record.raw
            assert compiled.value == encode(record.event)
            taken += 1
    assert set(refused) == set(MALFORMED_REASONS)
    assert min(refused.values()) >= 20
    assert taken > 500


@pytest.mark.parametrize(
    ("time_ms", "taken"), [(E - 1, False), (E, True), (L - 1, True), (L, False)]
)
def test_the_compiled_reader_holds_the_contracts_times_whatever_window_it_is_given(
    time_ms: int, taken: bool
) -> None:
    """The ingest window normally lies well inside the contract's years; the reader's own
    bounds must hold when a caller's does not."""
    line = orjson.dumps(_event(event_time_ms=time_ms))
    accepted = _reader().ndjson_line(line, SOURCE, 0, 2**62)
    assert (accepted is not None) is taken


@pytest.mark.parametrize(("earliest", "latest"), [(T0 + 1, T0 + 5), (T0 - 5, T0 - 1)])
def test_the_compiled_reader_leaves_times_outside_the_window_to_the_reference(
    earliest: int, latest: int
) -> None:
    line = orjson.dumps(_event())
    assert _reader().ndjson_line(line, SOURCE, earliest, latest) is None
    assert _reader().ndjson_line(line, SOURCE, T0, T0) is not None
