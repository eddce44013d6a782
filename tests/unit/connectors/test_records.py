"""Request bodies -> accepted records and rejects: Kong bodies, NDJSON, garbage."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorwatch.connectors.publisher import dead_letter
from anchorwatch.connectors.records import (
    Batch,
    BodyError,
    Rejected,
    kong_body,
    ndjson_body,
    reason_label,
    reason_summary,
)
from anchorwatch.contracts import ContractError, FieldProblem, SnapshotEvent, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry


@functools.lru_cache(maxsize=1)
def _events() -> tuple[SnapshotEvent, ...]:
    traffic = generate(TrafficConfig(seed=9, minutes=3, doc_types=4))
    return tuple(r.event for r in traffic.records() if r.event is not None)


def test_a_kong_batch_maps_each_entry_and_keeps_bad_entries_raw() -> None:
    events = _events()[:10]
    entries: list[Any] = [to_kong_entry(e) for e in events]
    entries[4]["response"]["headers"]["x-anthropic-anchor-count"] = "many"
    entries.append("not an entry")
    batch = kong_body(orjson.dumps(entries), source="kong")
    assert len(batch) == 11
    assert [a.value for a in batch.accepted] == [
        encode(e.model_copy(update={"source": "kong"})) for i, e in enumerate(events) if i != 4
    ]
    assert [orjson.loads(r.raw) for r in batch.rejected] == [entries[4], "not an entry"]
    assert [r.error.first_field for r in batch.rejected] == [
        "response.headers.x-anthropic-anchor-count",
        "$",
    ]


def test_a_single_kong_entry_keeps_the_exact_body_as_the_raw_reject() -> None:
    entry = to_kong_entry(_events()[0])
    del entry["started_at"]
    body = b"  " + orjson.dumps(entry, option=orjson.OPT_INDENT_2) + b"\n"
    batch = kong_body(body, source="kong")
    assert batch.accepted == []
    assert batch.rejected[0].raw == body
    assert batch.rejected[0].error.first_field == "started_at"


def test_secrets_in_headers_never_reach_the_dead_letter_copy() -> None:
    entry = to_kong_entry(_events()[0])
    entry["request"]["headers"]["X-Api-Key"] = "sk-ant-secret"
    entry["request"]["headers"]["cookie"] = ["session=secret"]
    entry["response"]["headers"]["set-cookie"] = "id=secret"
    entry["response"]["headers"]["x-anthropic-anchor-count"] = "?"
    for body in (orjson.dumps(entry), orjson.dumps([entry])):
        rejected = kong_body(body, source="kong").rejected[0]
        assert b"secret" not in rejected.raw
        kept = orjson.loads(rejected.raw)
        assert kept["request"]["headers"]["X-Api-Key"] == "REDACTED"
        assert kept["response"]["headers"]["set-cookie"] == "REDACTED"
        # Everything else is the entry as received.
        kept["request"]["headers"].update(
            {"X-Api-Key": "sk-ant-secret", "cookie": ["session=secret"]}
        )
        kept["response"]["headers"]["set-cookie"] = "id=secret"
        assert kept == entry


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty body"),
        (b" \n\t", "empty body"),
        (b"hello", "body is not JSON: unexpected character"),
        (b'{"request": ', "body is not JSON"),
        (b"42", "expected a Kong log entry (a JSON object) or an array of them, got a number"),
        (b'"text"', "got a string"),
        (b"null", "got null"),
        (b"\xff\xfe{}", "body is not JSON"),
    ],
)
def test_a_kong_body_that_is_not_json_entries_is_a_body_error(body: bytes, message: str) -> None:
    with pytest.raises(BodyError) as info:
        kong_body(body, source="kong")
    assert message in str(info.value)


def test_an_empty_kong_batch_is_nothing_to_do() -> None:
    assert len(kong_body(b"[]", source="kong")) == 0


def test_ndjson_lines_are_validated_one_by_one() -> None:
    events = _events()[:3]
    with_source = encode(events[0])  # the generator's events say source "generator"
    without = orjson.loads(encode(events[1]))
    del without["source"]
    body = b"\r\n".join(
        [with_source, b"", orjson.dumps(without), b"{not json", b"[1]", encode(events[2])[:-1]]
    )
    batch = ndjson_body(body + b"\n\n", source="ndjson-http")
    assert [a.value for a in batch.accepted] == [
        with_source,
        encode(events[1].model_copy(update={"source": "ndjson-http"})),
    ]
    assert [r.raw for r in batch.rejected] == [b"{not json", b"[1]", encode(events[2])[:-1]]
    assert [reason_label(r.error) for r in batch.rejected] == ["not_json", "record", "not_json"]


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"", "empty body"), (b"\n\r\n  \n", "empty body"), (b"hello\nworld", "no line is JSON")],
)
def test_an_ndjson_body_without_any_json_line_is_a_body_error(body: bytes, message: str) -> None:
    with pytest.raises(BodyError) as info:
        ndjson_body(body, source="x")
    assert message in str(info.value)


def _rejected(field: str, reason: str = "bad") -> Rejected:
    return Rejected(b"{}", ContractError("R", [FieldProblem(field, reason)]))


def test_reason_labels_are_a_small_fixed_set() -> None:
    assert reason_label(_rejected("anchors[12].drift_score").error) == "anchors[].drift_score"
    assert (
        reason_label(_rejected("request.headers.x-anthropic-snapshot-log[3].position").error)
        == "request.headers.x-anthropic-snapshot-log[].position"
    )
    assert reason_label(_rejected("$", "not valid JSON: x").error) == "not_json"
    assert reason_label(_rejected("$", "expected a JSON object").error) == "record"


def test_the_reason_summary_lists_the_first_distinct_reasons_with_counts() -> None:
    rejected = [
        _rejected("anchors[0].drift_score", "too high"),
        _rejected("doc_type", "missing"),
        _rejected("anchors[5].drift_score", "too low"),
        *[_rejected(f"f{i}") for i in range(6)],
    ]
    summary = reason_summary(rejected)
    assert summary[:2] == [
        {"field": "anchors[0].drift_score", "reason": "too high", "count": 2},
        {"field": "doc_type", "reason": "missing", "count": 1},
    ]
    assert len(summary) == 5


# ----------------------------------------------------------------- garbage never crashes

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what JSON parsers hand over
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["request", "headers", "started_at", "x-anthropic-doc-type", "id", "a"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def _mangled_entry(data: st.DataObject) -> Any:
    """A real Kong entry with a few values replaced by arbitrary JSON."""
    entry: dict[str, Any] = to_kong_entry(data.draw(st.sampled_from(_events()[:20])))
    for _ in range(data.draw(st.integers(1, 3))):
        section = data.draw(st.sampled_from(["request", "response", "top"]))
        target: Any = entry.get(section, entry)
        if isinstance(target, dict) and isinstance(target.get("headers"), dict):
            target = target["headers"]
        if not isinstance(target, dict) or not target:
            continue
        key = data.draw(st.sampled_from(sorted(target)))
        target[key] = data.draw(_json)
    return entry


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | _json.map(orjson.dumps))
def test_garbage_bodies_are_a_body_error_or_a_batch_never_a_crash(body: bytes) -> None:
    for parse in (kong_body, ndjson_body):
        try:
            batch = parse(body, source="fuzz")
        except BodyError:  # the one exception a body may raise: a 400
            continue
        for r in batch.rejected:
            assert r.error.problems
            assert isinstance(r.raw, bytes)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mangled_kong_entries_are_accepted_or_rejected_with_a_field(data: st.DataObject) -> None:
    entries = [_mangled_entry(data) for _ in range(data.draw(st.integers(1, 3)))]
    batch = kong_body(orjson.dumps(entries), source="fuzz")
    assert len(batch) == len(entries)
    for r in batch.rejected:
        assert r.error.first_field
        assert len(str(r.error)) > len("invalid Kong http-log entry: ")


def test_a_record_with_thousands_of_problems_still_gets_a_dead_letter() -> None:
    event = orjson.loads(encode(_events()[0]))
    event["anchors"] = [{"drift_score": 5}] * 3000
    event["anchor_count"] = 3000
    batch = ndjson_body(orjson.dumps(event), source="x" * 300)
    error = batch.rejected[0].error
    assert len(str(error)) > 100_000
    letter = dead_letter(batch.rejected[0].raw, error, "x" * 300, 1_764_403_200_000)
    assert len(letter.reason) == 2_000
    assert letter.reason.endswith("...")
    assert letter.field == "anchors[0].anchor_id"
    assert orjson.loads(letter.raw) == event


def test_without_summaries_the_records_are_the_same_and_the_summary_is_made_on_demand() -> None:
    """A service writing no summaries topic skips making them; nothing else changes, and a
    summary asked for anyway is the compiled path's, byte for byte."""
    events = _events()[:40]
    kong = orjson.dumps([to_kong_entry(e) for e in events])
    lines = b"\n".join(encode(e) for e in events)
    readers: list[Callable[[bool], Batch]] = [
        lambda summaries: kong_body(kong, source="kong", summaries=summaries),
        lambda summaries: ndjson_body(lines, source="nd", summaries=summaries),
    ]
    for read in readers:
        with_summaries, without = read(True), read(False)
        assert len(without.accepted) == len(events)
        assert [a[:3] for a in without.accepted] == [a[:3] for a in with_summaries.accepted]
        assert all(a.summary is None for a in without.accepted)
        assert all(a.summary is not None for a in with_summaries.accepted)
        assert [a.summary_record() for a in without.accepted] == [
            a.summary for a in with_summaries.accepted
        ]
