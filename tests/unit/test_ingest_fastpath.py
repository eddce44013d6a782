"""The msgspec fast path accepts exactly what the contract accepts, with the same bytes.

The fast path (connectors/validation.py, records.py, kong.py) reads JSON text with msgspec
into types derived from the pydantic contract; whatever it does not accept goes the
reference path (orjson + the contract). These tests compare whole request bodies through
both paths, ``kong_body(...)`` against ``kong_body(..., fast=False)``, on JSON *text* made to
hit the places where msgspec and orjson + pydantic differ: escapes and control characters,
a final newline against a ``$`` pattern, integers beyond 64 bits, floats from 1e16 up (where
the encoders print differently) or beyond the float range, duplicate keys, unknown keys,
header names in odd case, repeated headers.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors import records, validation
from anchorwatch.connectors.kong import DEFAULT_FORMAT, KongFormat
from anchorwatch.connectors.records import Batch, _kong_body_fast, kong_body, ndjson_body
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.generator import TrafficConfig, generate, to_kong_entry

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
        "doc_type": st.sampled_from(['"invoice"', '"medical_report"']) | _STRINGS,
        "snapshot_status": st.sampled_from(['"active"', '"disabled"']),
        "anchor_count": st.integers(0, 6).map(str),
        "anchors": st.just(log if log.startswith("[") else f"[{log}]"),
        "source": st.sampled_from(['"gw"', "null"]),
    }
    return _obj(draw(_fields(typical))).encode()


def _outcome(batch: Batch) -> tuple[list[tuple[str, str, bytes]], list[tuple[bytes, str]]]:
    return (
        [(a.event_id, a.doc_type, a.value) for a in batch.accepted],
        [(r.raw, str(r.error)) for r in batch.rejected],
    )


def _beyond_float_range(body: bytes) -> bool:
    """orjson refuses a number in ``body`` (or a line of it) as beyond the float range."""
    for text in (body, *body.split(b"\n")):
        try:
            orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if "infinity" in str(exc):
                return True
    return False


def _same(parse: Any, body: bytes, *args: Any, **kwargs: Any) -> None:
    def run(fast: bool) -> Any:
        try:
            return _outcome(parse(body, *args, fast=fast, **kwargs))
        except ValueError as exc:  # BodyError: the 400
            return str(exc)

    fast = run(True)
    if _beyond_float_range(body):
        # The one documented difference: the fast path does not read keys the contract
        # ignores, so such a number there does not make the record "not JSON".
        return
    assert fast == run(False)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_ndjson_line(), min_size=1, max_size=3))
def test_ndjson_lines_fast_or_not_give_the_same_events_bytes_and_rejections(
    lines: list[bytes],
) -> None:
    _same(ndjson_body, b"\n".join(lines), source="ndjson-test")


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


@st.composite
def _kong_entry(draw: st.DrawFn) -> dict[str, Any]:
    entry = to_kong_entry(draw(st.sampled_from(_events()[:30])))
    headers: dict[str, Any] = entry["request"]["headers"]
    if draw(st.integers(0, 2)):
        headers["x-anthropic-snapshot-log"] = draw(_anchor_log())
    for _ in range(draw(st.integers(0, 2))):
        name = draw(_HEADER)
        value = headers.pop(name, None)
        change = draw(st.integers(0, 5))
        if change == 0:  # odd case, maybe next to the lower-case one
            headers[name.upper()] = value if value is not None else "7"
            if draw(st.booleans()) and value is not None:
                headers[name] = draw(st.sampled_from([value, " other "]))
        elif change == 1:  # repeated header
            headers[name] = [value, value] if draw(st.booleans()) else [value, "x"]
        elif change == 2:  # in the response instead
            entry["response"]["headers"][name] = value
        elif change == 3:
            headers[name] = draw(st.sampled_from([None, 5, "", " 12 ", "١", [], {}]))
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
    return entry


_FORMATS = [
    DEFAULT_FORMAT,
    KongFormat(locations=("response", "request")),
    KongFormat(locations=("request",), request_id="x-anthropic-doc-type", doc_type="x-request-id"),
]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_kong_entry(), min_size=1, max_size=4), st.booleans(), st.sampled_from(_FORMATS))
def test_kong_bodies_fast_or_not_give_the_same_events_bytes_and_rejections(
    entries: list[dict[str, Any]], single: bool, fmt: KongFormat
) -> None:
    body = orjson.dumps(entries[0] if single else entries)
    _same(kong_body, body, fmt, source="kong-test")


@pytest.mark.parametrize(
    "body",
    [
        # A number beyond the float range where msgspec does not read it: the fast path may
        # take the entry, but must then agree once an entry needs the reference path.
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
def test_bodies_msgspec_reads_differently_get_the_reference_answer(body: bytes) -> None:
    _same(kong_body, body, source="kong-test")


def test_the_fast_path_takes_ordinary_traffic_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Else the service silently runs at the reference path's speed."""

    def reference(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("an ordinary entry took the reference path")

    monkeypatch.setattr(records, "add_kong_value", reference)
    monkeypatch.setattr(records, "kong_record_fast", reference)  # the dict reading
    events = _events()[:200]
    body = orjson.dumps([to_kong_entry(e) for e in events])
    batch = _kong_body_fast(body, DEFAULT_FORMAT, source="kong")
    assert batch is not None
    assert [a.value for a in batch.accepted] == [
        encode(e.model_copy(update={"source": "kong"})) for e in events
    ]
    for event in events:
        assert validation.snapshot_json(encode(event), source="x") is not None


@settings(max_examples=2000, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: abs(f) < 1e16)
    | st.text()
    | st.integers(-(2**63), 2**63 - 1)
)
def test_msgspec_writes_what_orjson_writes_for_every_value_the_fast_types_accept(
    value: Any,
) -> None:
    assert msgspec.json.encode(value) == orjson.dumps(value)


def test_the_fast_types_refuse_what_the_encoders_print_differently() -> None:
    assert msgspec.json.encode(1e16) != orjson.dumps(1e16)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"anchor_id":"a","position":1,"l2_norm":1e16,"cosine_angle":0,'
            b'"kl_divergence":0,"drift_score":0,"recommendation":"none"}',
            type=validation.FastAnchor,
        )


def test_a_contract_constraint_the_derivation_does_not_know_fails_at_import() -> None:
    from annotated_types import MultipleOf

    with pytest.raises(validation.ContractChanged, match="MultipleOf"):
        validation._meta(int, [MultipleOf(2)], patterns=True)
    with pytest.raises(validation.ContractChanged, match="pattern"):
        validation._meta(str, [_pattern("^[a-z]+$")], patterns=True)


def _pattern(pattern: str) -> Any:
    from pydantic.fields import FieldInfo

    info = FieldInfo.from_annotation(str)
    metadata = FieldInfo._collect_metadata({"pattern": pattern})
    assert info is not None
    return metadata[0]


def test_an_anchor_count_of_thousands_of_digits_is_a_rejection_not_a_crash() -> None:
    entry = to_kong_entry(_events()[0])
    entry["request"]["headers"]["x-anthropic-anchor-count"] = "1" * 5000
    for fast in (True, False):
        batch = kong_body(orjson.dumps([entry]), source="kong-test", fast=fast)
        assert batch.rejected[0].error.first_field == "request.headers.x-anthropic-anchor-count"


def test_a_number_beyond_the_float_range_in_an_ignored_key_is_ignored_with_the_key() -> None:
    event = _events()[0]
    line = encode(event)[:-1] + b',"newer_field":1e400}'
    batch = ndjson_body(line, source="x")
    assert [a.value for a in batch.accepted] == [encode(event)]
    # The reference path refuses the line as not JSON (orjson's limit, not the contract's).
    with pytest.raises(ValueError, match="infinity"):
        ndjson_body(line, source="x", fast=False)
