"""The compiled fast path accepts exactly what the contract accepts, with the same bytes.

The fast path (connectors/native/src/lib.rs, called from records.py) reads JSON text with
serde_json and checks the contract's rules itself; whatever it does not accept goes the
reference path (orjson + the pydantic contract). These tests compare whole request bodies
through both paths, ``kong_body(...)`` against ``kong_body(..., fast=False)``, on JSON *text*
made to hit the places where serde_json and orjson + pydantic could differ: escapes and
control characters, a final newline against a ``$`` pattern, integers beyond 64 bits, floats
from 1e16 up (where the encoders print differently) or beyond the float range, duplicate
keys, unknown keys, header names in odd case, repeated headers, invalid UTF-8 and lone
surrogates where the fast path skips unread, nesting deeper than serde_json's limit.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors import _native, records, validation
from anchorwatch.connectors.kong import DEFAULT_FORMAT, KongFormat
from anchorwatch.connectors.records import (
    _ANY_TIME,
    _kong_body_fast,
    kong_body,
    ndjson_body,
)
from anchorwatch.connectors.validation import TimeWindow
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from tests.support.fastpath import FORMATS, WINDOWS, assert_paths_agree, with_model

_NUMBERS = st.sampled_from(
    [
        "0",
        "-0",
        "1",
        "1.0",
        "0.5",
        "-0.0",
        "-1",
        "1E+2",
        "2.5e-5",
        "1e15",
        "9999999999999998",
        "1e16",
        "1.5e16",
        "1e400",
        "-1e400",
        "1e-400",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
        "100000000000000000000000000000",
        "1.7976931348623157e308",
        "946684800000",
        "4102444799999",
        "4102444800000",
        "1764403200000.0",
    ]
) | st.floats(allow_nan=False, allow_infinity=False).map(lambda f: orjson.dumps(f).decode())
_STRINGS = st.sampled_from(
    [
        '""',
        '"a"',
        '"a\\n"',
        '"\\n"',
        '"\\u0000x"',
        '"x\x7f"',
        '"x\\u007f"',
        '"a\\\\b"',
        '"\\ud83d\\ude00"',
        '"\\u00a0"',
        '"re-sample"',
        '"none"',
        '"active"',
        '"disabled"',
        '"' + "x" * 201 + '"',
    ]
) | st.text(max_size=8).map(lambda t: orjson.dumps(t).decode())
# Doc types the contract normalises or refuses: zero-width, bidi, decomposed, blank, NEL.
_DOC_TYPES = st.sampled_from(
    [
        '"a\u200bb"',
        '"\u202einvoice"',
        '"e\u0301"',
        '"\u00e9"',
        '" "',
        '"\u3164"',
        '"\u0085x"',
        '"x\u2028"',
        '"<!channel> \\"DO\\" \\\\ report*"',
    ]
)
_WILD = _NUMBERS | _STRINGS | st.sampled_from(["null", "true", "false", "[]", "{}", '{"x":1e400}'])


def _obj(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{orjson.dumps(k).decode()}:{v}" for k, v in pairs) + "}"


@st.composite
def _fields(draw: st.DrawFn, typical: dict[str, st.SearchStrategy[str]]) -> list[tuple[str, str]]:
    """Mostly typical values; sometimes a wild one, a missing field, an unknown key, a
    duplicate key; in any order."""
    pairs = []
    for key, values in typical.items():
        roll = draw(st.integers(0, 19))
        if roll == 0:
            continue
        pairs.append((key, draw(_WILD if roll == 1 else values)))
    if draw(st.integers(0, 4)) == 0:
        pairs.append((draw(st.sampled_from([*typical, "unknown"])), draw(_WILD)))
    if draw(st.integers(0, 3)) == 0:
        pairs = draw(st.permutations(pairs))
    return pairs


_UNIT = st.floats(0, 1).map(lambda f: orjson.dumps(f).decode()) | st.sampled_from(["0", "1"])
_ANCHOR = {
    "anchor_id": st.sampled_from(['"SECTION_001"', '"ENTITY_7"', '"a b"']) | _STRINGS,
    "position": st.integers(0, 10**6).map(str),
    "l2_norm": st.floats(0, 1e17).map(lambda f: orjson.dumps(f).decode()),
    "cosine_angle": st.floats(-1, 1).map(lambda f: orjson.dumps(f).decode()),
    "kl_divergence": st.floats(0, 50).map(lambda f: orjson.dumps(f).decode()) | _NUMBERS,
    "drift_score": _UNIT,
    "recommendation": st.sampled_from(['"none"', '"re-sample"']) | _STRINGS,
}


@st.composite
def _anchor_log(draw: st.DrawFn) -> str:
    anchors = [_obj(draw(_fields(_ANCHOR))) for _ in range(draw(st.integers(0, 4)))]
    if len(anchors) == 1 and draw(st.booleans()):
        return anchors[0]  # one object, not an array
    return "[" + ",".join(anchors) + "]"


@st.composite
def _ndjson_line(draw: st.DrawFn) -> bytes:
    log = draw(_anchor_log())
    typical = {
        "event_id": st.sampled_from(['"req-1"', '"1-2-3"']) | _STRINGS,
        "event_time_ms": st.integers(946_684_800_000, 4_102_444_799_999).map(str),
        "doc_type": st.sampled_from(['"invoice"', '"medical_report"']) | _STRINGS | _DOC_TYPES,
        "snapshot_status": st.sampled_from(['"active"', '"disabled"']),
        "anchor_count": st.integers(0, 6).map(str),
        "anchors": st.just(log if log.startswith("[") else f"[{log}]"),
        "source": st.sampled_from(['"gw"', "null"]),
    }
    return _obj(draw(_fields(typical))).encode()


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ndjson_line(), min_size=1, max_size=3), WINDOWS)
def test_ndjson_lines_fast_or_not_give_the_same_events_bytes_and_rejections(
    lines: list[bytes], window: TimeWindow | None
) -> None:
    assert_paths_agree(ndjson_body, b"\n".join(lines), source="ndjson-test", window=window)


@functools.lru_cache(maxsize=1)
def _events() -> tuple[SnapshotEvent, ...]:
    traffic = generate(TrafficConfig(seed=3, minutes=2, doc_types=4))
    return tuple(r.event for r in traffic.records() if r.event is not None)


_HEADER = st.sampled_from(
    [
        "x-anthropic-doc-type",
        "x-anthropic-snapshot-status",
        "x-anthropic-anchor-count",
        "x-anthropic-snapshot-log",
        "x-request-id",
    ]
)


# Where the generator (and a real gateway) puts each header.
_HOME = {"x-anthropic-doc-type": "request", "x-request-id": "request"}


@st.composite
def _kong_entry(draw: st.DrawFn) -> dict[str, Any]:
    entry = to_kong_entry(draw(st.sampled_from(_events()[:30])))
    if draw(st.integers(0, 2)):
        entry["response"]["headers"]["x-anthropic-snapshot-log"] = draw(_anchor_log())
    for _ in range(draw(st.integers(0, 2))):
        name = draw(_HEADER)
        home = _HOME.get(name, "response")
        other = "response" if home == "request" else "request"
        headers: dict[str, Any] = entry[home]["headers"]
        value = headers.pop(name, None)
        change = draw(st.integers(0, 5))
        if change == 0:  # odd case, maybe next to the lower-case one
            headers[name.upper()] = value if value is not None else "7"
            if draw(st.booleans()) and value is not None:
                headers[name] = draw(st.sampled_from([value, " other "]))
        elif change == 1:  # repeated header
            headers[name] = [value, value] if draw(st.booleans()) else [value, "x"]
        elif change == 2:  # in the other location instead, or as well (a forgery)
            entry[other]["headers"][name] = value if value is not None else "1"
            if draw(st.booleans()) and value is not None:
                headers[name] = value
        elif change == 3:
            headers[name] = draw(
                st.sampled_from([None, 5, "", " 12 ", "١", [], {}, "a\u200b", "r" * 201])
            )
        elif change == 4 and name == "x-request-id":
            entry["response"]["headers"].pop(name, None)
            if draw(st.booleans()):
                entry["request"]["id"] = draw(st.sampled_from(["kong-id-1", " ", 3]))
        else:
            headers[name] = value
    if draw(st.integers(0, 5)) == 0:
        entry["started_at"] = draw(
            st.sampled_from(
                [1_764_403_200_000.0, 1_764_403_200_000.5, "1", None, True, 1e30, 2**64 - 1]
            )
        )
    if draw(st.integers(0, 9)) == 0:
        entry["request"]["headers"]["authorization"] = "Bearer secret"
    if draw(st.integers(0, 2)) == 0:
        entry = draw(with_model(entry))
    return entry


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_kong_entry(), min_size=1, max_size=4),
    st.booleans(),
    st.sampled_from(FORMATS),
    WINDOWS,
)
def test_kong_bodies_fast_or_not_give_the_same_events_bytes_and_rejections(
    entries: list[dict[str, Any]], single: bool, fmt: KongFormat, window: TimeWindow | None
) -> None:
    body = orjson.dumps(entries[0] if single else entries)
    assert_paths_agree(kong_body, body, fmt, source="kong-test", window=window)


@pytest.mark.parametrize(
    "body",
    [
        b'[{"latencies": {"request": 1e400}}]',
        b'[{"request": {"headers": {"x-anthropic-doc-type": "a\\u0000"}}}]',
        b'{"request": "not an object"}',
        b'[{"request": {"headers": []}}, 5]',
        b"[\xff]",
        b'["\xed\xa0\x80"]',
        b"[" * 1100 + b"]" * 1100,
        b"",
        b"[]",
        b"nul",
    ],
)
def test_bodies_the_fast_path_cannot_read_get_the_reference_answer(body: bytes) -> None:
    assert_paths_agree(kong_body, body, source="kong-test")


def _entry_text(change: str) -> bytes:
    """An ordinary entry's JSON text with ``change`` spliced in as its first key."""
    text = orjson.dumps(to_kong_entry(_events()[0]))
    return b"[{" + change.encode() + b"," + text[1:] + b"]"


@pytest.mark.parametrize(
    "change",
    [
        '"response": 5',  # a location that is not an object: the reference rejects
        '"response": {"headers": "x"}',
        '"response": {"headers": {"X-Anthropic-Doc-Type": "other"}}',
        '"response": {"headers": {"x-anthropic-doc-type": null}}',
        '"request": {"headers": {}}',  # a repeated key: the reference keeps the last
        '"started_at": 1',
        '"started_at": 1764403200000.0',
        '"ignored": "\\ud800"',  # a lone surrogate where the fast path skips
        '"ignored": "\\udc00\\ud800"',
        '"ignored": "\x01"',  # a raw control character inside a string
        '"ignored": ' + "[" * 200 + "]" * 200,  # deeper than serde_json's limit
        '"ignored": 1e400',
        '"ignored": -0',
        '"ignored": 18446744073709551616',
    ],
)
def test_entries_with_odd_parts_get_the_reference_answer(change: str) -> None:
    assert_paths_agree(kong_body, _entry_text(change), source="kong-test")


def test_headers_are_found_whatever_their_case_location_or_repetition() -> None:
    events = _events()[:3]
    entries = [to_kong_entry(e) for e in events]
    upper = entries[0]["request"]["headers"]
    entries[0]["request"]["headers"] = {k.upper(): v for k, v in upper.items()}
    moved = entries[1]["request"]["headers"]
    entries[1]["response"]["headers"]["x-anthropic-doc-type"] = moved.pop("x-anthropic-doc-type")
    repeated = entries[2]["response"]["headers"]
    repeated["x-anthropic-snapshot-status"] = [repeated["x-anthropic-snapshot-status"]] * 2
    fmt = KongFormat(doc_type_locations=("request", "response"))
    records = _reader_of(fmt).kong(orjson.dumps(entries), "kong", *_ANY_TIME)
    assert records is not None
    assert [r and r.value for r in records] == [
        encode(e.model_copy(update={"source": "kong"})) for e in events
    ]


def _reader_of(fmt: KongFormat) -> Any:
    return records._reader(fmt)


def test_the_fast_path_takes_ordinary_traffic_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Else the service silently runs at the reference path's speed."""

    def reference(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("an ordinary entry took the reference path")

    monkeypatch.setattr(records, "add_kong_value", reference)
    monkeypatch.setattr(records, "snapshot_record", reference)
    events = _events()[:200]
    body = orjson.dumps([to_kong_entry(e) for e in events])
    batch = _kong_body_fast(body, DEFAULT_FORMAT, source="kong", window=None)
    assert batch is not None
    assert [a.value for a in batch.accepted] == [
        encode(e.model_copy(update={"source": "kong"})) for e in events
    ]
    lines = ndjson_body(b"\n".join(encode(e) for e in events), source="x")
    assert [a.value for a in lines.accepted] == [encode(e) for e in events]


def _with_floats(event: SnapshotEvent, value: float) -> SnapshotEvent:
    anchors = [
        a.model_copy(update={"l2_norm": value, "kl_divergence": value}) for a in event.anchors
    ]
    return event.model_copy(update={"anchors": anchors})


@settings(max_examples=3000, deadline=None)
@given(
    st.floats(0, 1e16, exclude_max=True)
    | st.floats(0, 1e-3)
    | st.floats(1e14, 1e16, exclude_max=True)
)
def test_the_fast_path_writes_floats_as_orjson_does(value: float) -> None:
    event = _with_floats(next(e for e in _events() if e.anchors), value)
    accepted = _reader_of(DEFAULT_FORMAT).ndjson_line(encode(event), "x", *_ANY_TIME)
    assert accepted is not None
    assert accepted.value == encode(event)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_the_fast_path_sums_drift_as_python_does(drifts: list[float]) -> None:
    """mean_drift comes from Python's sum(), whose algorithm changed in 3.12."""
    event = next(e for e in _events() if e.anchors)
    template = event.anchors[0]
    anchors = [template.model_copy(update={"drift_score": d}) for d in drifts]
    event = event.model_copy(update={"anchors": anchors, "anchor_count": len(anchors)})
    accepted = _reader_of(DEFAULT_FORMAT).ndjson_line(encode(event), "x", *_ANY_TIME)
    assert accepted is not None
    assert accepted.value == encode(event)


def test_floats_the_encoders_print_differently_take_the_reference_path() -> None:
    event = _with_floats(next(e for e in _events() if e.anchors), 1e16)
    assert orjson.dumps(1e16) == b"1e+16"
    assert _reader_of(DEFAULT_FORMAT).ndjson_line(encode(event), "x", *_ANY_TIME) is None
    assert ndjson_body(encode(event), source="x").accepted[0].value == encode(event)


def test_a_contract_constraint_the_compiled_path_does_not_know_fails_at_import() -> None:
    from typing import Annotated

    from annotated_types import MultipleOf

    with pytest.raises(validation.ContractChanged, match="MultipleOf"):
        validation.describe_field(Annotated[int, MultipleOf(2)], True)
    with pytest.raises(validation.ContractChanged, match="pattern"):
        validation.describe_field(Annotated[str, _pattern("^[a-z]+$")], True)


def test_a_bound_changed_in_the_model_alone_stops_the_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validation.check_native_contract()  # as shipped: they agree
    native = orjson.loads(_native.contract())
    native["AnchorSnapshot"]["drift_score"]["le"] = 2.0

    class Native:
        @staticmethod
        def contract() -> str:
            return orjson.dumps(native).decode()

    monkeypatch.setattr(validation, "_native", Native)
    with pytest.raises(validation.ContractChanged, match=r"AnchorSnapshot\.drift_score"):
        validation.check_native_contract()


def _pattern(pattern: str) -> Any:
    from pydantic.fields import FieldInfo

    metadata = FieldInfo._collect_metadata({"pattern": pattern})
    return metadata[0]


def test_an_anchor_count_of_thousands_of_digits_is_a_rejection_not_a_crash() -> None:
    entry = to_kong_entry(_events()[0])
    entry["response"]["headers"]["x-anthropic-anchor-count"] = "1" * 5000
    for fast in (True, False):
        batch = kong_body(orjson.dumps([entry]), source="kong-test", fast=fast)
        assert batch.rejected[0].error.first_field == "response.headers.x-anthropic-anchor-count"


def test_a_number_beyond_the_float_range_in_an_ignored_key_is_not_json_either_way() -> None:
    event = _events()[0]
    line = encode(event)[:-1] + b',"newer_field":1e400}'
    for fast in (True, False):
        with pytest.raises(ValueError, match="not NDJSON"):
            ndjson_body(line, source="x", fast=fast)


def test_the_fast_path_escapes_strings_as_orjson_does() -> None:
    """recommendation and source may hold any character; the fast path writes them."""
    event = next(e for e in _events() if e.anchors)
    every = "".join(map(chr, range(0x20))) + '\x7f"\\/é\u2028😀'
    anchors = [event.anchors[0].model_copy(update={"recommendation": every[:64]})]
    for text in (every, every[::-1], "plain"):
        odd = event.model_copy(update={"anchors": anchors, "anchor_count": 1, "source": text[:200]})
        accepted = _reader_of(DEFAULT_FORMAT).ndjson_line(encode(odd), "x", *_ANY_TIME)
        assert accepted is not None
        assert accepted.value == encode(odd)


def test_model_changes_the_compiled_path_cannot_see_stop_the_import() -> None:
    """Validators, serializers, aliases and configuration change what the model accepts or
    writes, where a field-by-field comparison of bounds would see nothing."""
    from pydantic import ConfigDict, Field, field_serializer, field_validator

    class Stripping(SnapshotEvent):
        model_config = ConfigDict(str_strip_whitespace=True)

    class Validating(SnapshotEvent):
        @field_validator("doc_type")
        @classmethod
        def _lower(cls, value: str) -> str:
            return value.lower()

    class Serializing(SnapshotEvent):
        @field_serializer("doc_type")
        def _upper(self, value: str) -> str:
            return value.upper()

    class Aliased(SnapshotEvent):
        source: str | None = Field(default=None, max_length=200, alias="origin")

    class Defaulted(SnapshotEvent):
        source: str | None = Field(default="gateway", max_length=200)

    for model, what in [
        (Stripping, "model_config"),
        (Validating, "field_validators"),
        (Serializing, "field_serializers"),
        (Aliased, "alias"),
    ]:
        with pytest.raises(validation.ContractChanged, match=what):
            validation.describe(model)
    assert validation.describe(Defaulted)["source"]["default"] == "gateway"
    assert validation.describe(SnapshotEvent)["source"]["default"] is None


def _kong_entry_with(response: dict[str, str | None], request_id: str | None = None) -> bytes:
    """An ordinary entry (with anchors), its response headers changed (None: removed)."""
    entry = to_kong_entry(next(e for e in _events() if e.anchors))
    headers = entry["response"]["headers"]
    for name, value in response.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    if request_id is not None:
        entry["request"]["headers"]["x-request-id"] = request_id
    return orjson.dumps([entry])


@pytest.mark.parametrize(
    ("response", "accepted"),
    [
        # active with anchors counted: the snapshot log is required
        ({"x-anthropic-snapshot-log": None}, False),
        ({"x-anthropic-snapshot-log": None, "x-anthropic-anchor-count": "0"}, True),
        (
            {
                "x-anthropic-snapshot-log": None,
                "x-anthropic-anchor-count": "3",
                "x-anthropic-snapshot-status": "disabled",
            },
            True,
        ),
    ],
)
def test_an_entry_without_its_snapshot_log_gets_one_answer(
    response: dict[str, str | None], accepted: bool
) -> None:
    body = _kong_entry_with(response)
    reference = kong_body(body, source="kong-test", fast=False)
    assert len(reference.accepted) == int(accepted)
    fast = _reader_of(DEFAULT_FORMAT).kong(body, "kong-test", *_ANY_TIME)
    assert fast is not None
    assert fast[0] == (reference.accepted[0] if accepted else None)


@pytest.mark.parametrize("request_id", ["req-7\u00a0", "\u3000req-7", "req-7\u2003", "req-7\u0085"])
def test_a_header_with_unicode_space_at_an_end_is_stripped_as_python_strips_it(
    request_id: str,
) -> None:
    """Python's str.strip() takes non-ASCII spaces too; the compiled reader leaves such a
    value to the reference rather than keep them."""
    body = _kong_entry_with({}, request_id=request_id)
    reference = kong_body(body, source="kong-test", fast=False)
    assert [a.event_id for a in reference.accepted] == ["req-7"]
    assert _reader_of(DEFAULT_FORMAT).kong(body, "kong-test", *_ANY_TIME) == [None]
    assert_paths_agree(kong_body, body, source="kong-test")
