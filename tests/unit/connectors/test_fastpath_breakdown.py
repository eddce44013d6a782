"""The compiled path writes the breakdown and the latency as the contract does, byte for byte.

``kinds`` and ``top_anchors`` (``contracts.breakdown``) are computed in Rust
(connectors/native/src/encode.rs) from the anchors it read; ``latency_ms`` comes from an
NDJSON line's own field or a Kong entry's ``latencies.request`` (src/latency.rs). These
tests hold both paths equal where the two could part: ties in drift and position that only
the id breaks (compared by code point, ids beyond ASCII included), every kind at once,
prefixes that are almost a kind, ids without ``_``, no anchors, disabled snapshots, ten
thousand anchors, and every odd value a latency can take in JSON.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anchorwatch.connectors import _native, records, validation
from anchorwatch.connectors.kong import DEFAULT_FORMAT
from anchorwatch.connectors.records import _ANY_TIME, kong_body, ndjson_body
from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.contracts.breakdown import KINDS, LATENCY_MAX_MS
from anchorwatch.demo.kong_entry import to_kong_entry
from tests.support.contracts import anchor, snapshot
from tests.support.fastpath import FORMATS, WINDOWS, assert_paths_agree

# Ids that are a kind, almost one (case, a leading "_", an accent), none, or beyond ASCII;
# few enough that ties in drift and position often fall to the id.
_IDS = st.sampled_from(
    [
        *(f"{kind}_001" for kind in KINDS),
        "SECTION_002",
        "SECTION",
        "SECTION_",
        "SECTION__x",
        "section_1",
        "_SECTION_1",
        "SECTIONS_1",
        "TABLE\u0301_1",
        "CLAUSE_001",
        "a b",
        "Z",
        "é_1",
        "\u00a0_x",
        "Ω",
        "😀_2",
        "\uff21_1",
    ]
) | st.text(
    st.characters(min_codepoint=0x20, exclude_characters="\x7f", exclude_categories=["Cs"]),
    min_size=1,
    max_size=6,
)
_DRIFTS = st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0, 0.30000000000000004]) | st.floats(0, 1)
_POSITIONS = st.integers(0, 3) | st.integers(0, 10**12)


@st.composite
def _events(draw: st.DrawFn) -> SnapshotEvent:
    anchors = [
        anchor(
            anchor_id=draw(_IDS),
            position=draw(_POSITIONS),
            drift_score=draw(_DRIFTS),
            recommendation=draw(st.sampled_from(["none", "re-sample"])),
        )
        for _ in range(draw(st.integers(0, 40)))
    ]
    disabled = not anchors and draw(st.booleans())
    data = snapshot(
        anchors=anchors,
        anchor_count=len(anchors) + draw(st.integers(0, 2)),
        snapshot_status="disabled" if disabled else "active",
        latency_ms=draw(st.none() | st.integers(0, LATENCY_MAX_MS) | st.sampled_from([0, 127])),
        model=draw(st.none() | st.just("summarizer-2.1")),
        source="gw",
    )
    return SnapshotEvent.model_validate(data)


def _event(**fields: Any) -> SnapshotEvent:
    return SnapshotEvent.model_validate(snapshot(source="gw", **fields))


def _compiled(line: bytes) -> bytes | None:
    """What the compiled path writes for an NDJSON line (a line without a source gets
    "x"); None where it leaves the line to the reference path."""
    accepted = records._reader(DEFAULT_FORMAT).ndjson_line(line, "x", *_ANY_TIME)
    if accepted is None:
        return None
    # Its summary, written in the same pass, is the one made from the record.
    assert accepted.summary == summary_of(accepted.value)
    return accepted.value


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events())
def test_the_compiled_path_writes_kinds_top_anchors_and_latency_as_the_contract_does(
    event: SnapshotEvent,
) -> None:
    assert _compiled(encode(event)) == encode(event)


def test_every_kind_at_once_in_kinds_order_whatever_the_log_order() -> None:
    ids = ["OTHER_1", "oops", *reversed([f"{k}_1" for k in KINDS[:-1]]), "TABLE_2", "TABLE"]
    anchors = [anchor(anchor_id=i, drift_score=0.1 * (n % 10)) for n, i in enumerate(ids)]
    event = _event(anchors=anchors, anchor_count=len(ids))
    written = _compiled(encode(event))
    assert written == encode(event)
    assert list(orjson.loads(written or b"{}")["kinds"]) == list(KINDS)


@pytest.mark.parametrize(
    ("ids", "top"),
    [
        (["\U0001f600", "\uff21", "z", "\u00e9", "~"], ["z", "~", "\u00e9"]),
        # UTF-16 order (Java's String.compareTo) would put U+10000 before U+FF21.
        (["\U0001f600", "\uff21", "\U00010000", "\u00e9"], ["\u00e9", "\uff21", "\U00010000"]),
    ],
)
def test_ties_in_drift_and_position_go_to_the_lower_id_by_code_point(
    ids: list[str], top: list[str]
) -> None:
    anchors = [anchor(anchor_id=i, position=7, drift_score=0.5) for i in ids]
    event = _event(anchors=anchors, anchor_count=len(anchors))
    written = orjson.loads(_compiled(encode(event)) or b"{}")
    assert [a["anchor_id"] for a in written["top_anchors"]] == top
    assert [a.anchor_id for a in event.top_anchors] == top


@pytest.mark.parametrize("drift", [0.5, "varied"])
def test_ten_thousand_anchors_are_summed_and_ranked_alike(drift: float | str) -> None:
    anchors = [
        anchor(
            anchor_id=f"{KINDS[i % 8]}_{i}",
            position=i % 97,
            drift_score=drift if isinstance(drift, float) else (i * 7919 % 10_007) / 10_007,
        )
        for i in range(10_000)
    ]
    event = _event(anchors=anchors, anchor_count=10_000)
    assert _compiled(encode(event)) == encode(event)


@pytest.mark.parametrize(
    "data",
    [
        snapshot(anchors=[], anchor_count=0),
        snapshot(anchors=[], anchor_count=5),
        snapshot(anchors=[], anchor_count=3, snapshot_status="disabled"),
        snapshot(latency_ms=0),
        snapshot(latency_ms=LATENCY_MAX_MS),
    ],
)
def test_events_without_anchors_or_at_the_latency_bounds_are_taken_by_the_compiled_path(
    data: dict[str, Any],
) -> None:
    event = SnapshotEvent.model_validate(data | {"source": "gw"})
    assert _compiled(encode(event)) == encode(event)


# ------------------------------------------------------------------------ latency values

# Every kind of JSON value a latency may be, as text.
_LATENCY_TEXTS = [
    "0", "1", "120", "3600000", "3600001", "-1", "-0", "0.0", "120.0", "120.5", "1e2",
    '"120"', '""', "true", "false", "null", "[]", "[120]", "{}", '{"ms": 1}',
    "9223372036854775807", "9223372036854775808", "18446744073709551616", "1e400",
]  # fmt: skip


@pytest.mark.parametrize("value", _LATENCY_TEXTS)
def test_an_ndjson_latency_is_checked_by_the_contract_on_both_paths(value: str) -> None:
    line = encode(_event())[:-1] + f',"latency_ms":{value}}}'.encode()
    other = encode(_event(event_id="neighbour"))
    assert_paths_agree(ndjson_body, line + b"\n" + other, source="gw")


@functools.lru_cache(maxsize=1)
def _entry_text() -> bytes:
    """An ordinary Kong entry's JSON text without ``latencies``."""
    event = _event(anchors=[anchor()], anchor_count=1)
    entry = to_kong_entry(event)
    del entry["latencies"]
    return orjson.dumps(entry)


def _kong_with(member: str) -> bytes:
    """A batch: an ordinary entry with ``member`` spliced in first, between two neighbours
    with a latency of their own."""
    entry = _entry_text()
    odd = b"{" + member.encode() + b"," + entry[1:]
    good = entry[:-1] + b',"latencies":{"request":7}}'
    return b"[" + good + b"," + odd + b"," + good.replace(b'"req-1"', b'"req-2"') + b"]"


@pytest.mark.parametrize(
    "member",
    [
        *(f'"latencies": {{"kong": 1, "request": {v}, "proxy": 2}}' for v in _LATENCY_TEXTS),
        '"latencies": {"request": 5, "request": 6}',  # Python keeps the last
        '"latencies": {"request": 5}, "latencies": {"request": 6}',
        '"latencies": {"request": 5}, "latencies": null',
        '"latencies": {"kong": 1}',
        '"latencies": {}',
        '"latencies": null',
        '"latencies": 120',
        '"latencies": "120"',
        '"latencies": [120]',
        '"latencies": {"request": "\\ud800"}',
        '"latencies": {"request": 5, "x": "\\ud800"}',
    ],
)
def test_a_kong_latency_is_read_alike_by_both_paths(member: str) -> None:
    for fmt in FORMATS[:2]:
        assert_paths_agree(kong_body, _kong_with(member), fmt, source="kong")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (-1, "greater than or equal to 0"),
        (LATENCY_MAX_MS + 1, "less than or equal to 3600000"),
        (2**64 - 1, "less than or equal to 3600000"),
        ("120", "expected integer milliseconds, got a string '120'"),
        (120.0, "expected integer milliseconds, got a number 120.0"),
        (0.5, "expected integer milliseconds, got a number 0.5"),
        (True, "expected integer milliseconds, got a boolean True"),
        ([120], "expected integer milliseconds, got an array"),
    ],
)
def test_a_bad_kong_latency_dead_letters_its_entry_alone_naming_latencies_request(
    value: Any, reason: str
) -> None:
    body = _kong_with(f'"latencies": {{"request": {orjson.dumps(value).decode()}}}')
    assert_paths_agree(kong_body, body, source="kong")
    batch = kong_body(body, source="kong")
    assert [orjson.loads(a.value)["latency_ms"] for a in batch.accepted] == [7, 7]
    (rejected,) = batch.rejected
    (problem,) = rejected.error.problems
    assert problem.field == "latencies.request"
    assert reason in problem.reason
    assert records.reason_label(rejected.error) == "latencies.request"


def test_kongs_latency_is_the_only_source_of_latency_never_a_clients_header() -> None:
    entry = orjson.loads(_entry_text())
    entry["request"]["headers"] |= {"x-latency-ms": "5", "latency_ms": "5", "latencies": "5"}
    entry["latency_ms"] = 5
    for latencies, expected in (({"request": 250, "proxy": 5}, 250), ({"proxy": 5}, None)):
        body = orjson.dumps([entry | {"latencies": latencies}])
        for fast in (True, False):
            (accepted,) = kong_body(body, source="kong", fast=fast).accepted
            assert orjson.loads(accepted.value).get("latency_ms") == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.none()
        | st.integers(-(2**64), 2**64)
        | st.floats()
        | st.text(max_size=3)
        | st.booleans(),
        min_size=1,
        max_size=4,
    ),
    WINDOWS,
)
def test_kong_batches_with_any_latencies_are_decided_alike(
    values: list[Any], window: validation.TimeWindow | None
) -> None:
    entry = orjson.loads(_entry_text())
    entries = []
    for i, value in enumerate(values):
        one = entry | {"latencies": {"request": value, "kong": 1}}
        one["request"] = one["request"] | {"id": f"kong-{i}"}
        entries.append(one)
    try:
        body = orjson.dumps(entries)
    except orjson.JSONEncodeError:
        return  # an integer beyond 64 bits: not JSON orjson writes
    assert_paths_agree(kong_body, body, source="kong", window=window)
    for accepted in kong_body(body, source="kong", window=window).accepted:
        assert accepted.summary == summary_of(accepted.value)


# ----------------------------------------------------------------- the contract's rules


def test_a_summary_layout_changed_in_python_alone_stops_the_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records.check_native_summary()  # as shipped: they agree
    monkeypatch.setattr(records, "summary_of", lambda value: b"v3" + summary_of(value))
    with pytest.raises(validation.ContractChanged, match=r"summary\.rs"):
        records.check_native_summary()


@pytest.mark.parametrize(
    ("name", "value"),
    [("KINDS", ["SECTION", "OTHER"]), ("TOP_ANCHORS_PER_EVENT", 5)],
)
def test_a_breakdown_rule_changed_in_python_alone_stops_the_import(
    monkeypatch: pytest.MonkeyPatch, name: str, value: Any
) -> None:
    native = orjson.loads(_native.contract())
    native[name] = value

    class Native:
        @staticmethod
        def contract() -> str:
            return orjson.dumps(native).decode()

    monkeypatch.setattr(validation, "_native", Native)
    with pytest.raises(validation.ContractChanged, match=rf"breakdown\.{name}"):
        validation.check_native_contract()
