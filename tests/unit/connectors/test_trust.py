"""Untrusted input at the front door: who may set which header, one bad entry among good
ones, request ids that are not usable, doc types that hide text, event times from the
future or past the topic's retention. Every case runs through both the compiled fast path
and the reference path, which must agree."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from anchorwatch.connectors.kong import KongFormat, fallback_event_id
from anchorwatch.connectors.kong_split import path_at, split_entries
from anchorwatch.connectors.records import Batch, BodyError, kong_body, ndjson_body, reason_label
from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.connectors.validation import TimeWindow
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.settings import TopicSettings
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.topics import topic_specs
from tests.support.kong import (
    COUNT,
    DOC,
    LOG,
    RID,
    STATUS,
    five_entry_batch,
    generated_event,
    generated_events,
    latin1_user_agent_entry,
)

MINUTE = 60_000


def _as_kong(event: SnapshotEvent, **update: Any) -> bytes:
    return encode(event.model_copy(update={"source": "kong", **update}))


def _both(body: bytes, fmt: KongFormat | None = None, **kwargs: Any) -> Batch:
    """The batch of ``body``, after checking that both paths read it the same."""
    args = () if fmt is None else (fmt,)
    fast = kong_body(body, *args, source="kong", fast=True, **kwargs)
    reference = kong_body(body, *args, source="kong", fast=False, **kwargs)
    assert [(a.event_id, a.doc_type, a.value) for a in fast.accepted] == [
        (a.event_id, a.doc_type, a.value) for a in reference.accepted
    ]
    assert [(r.raw, str(r.error)) for r in fast.rejected] == [
        (r.raw, str(r.error)) for r in reference.rejected
    ]
    assert fast.notes == reference.notes
    return fast


def _reasons(batch: Batch) -> list[str]:
    return [str(p) for r in batch.rejected for p in r.error.problems[:1]]


# ---------------------------------------------------------------- measurements: the response's


def test_a_client_cannot_forge_the_drift_measurement_on_its_request() -> None:
    event = generated_event(3)
    entry = to_kong_entry(event)
    forged = [{**a.model_dump(mode="json"), "drift_score": 0.99} for a in event.anchors]
    entry["request"]["headers"].update(
        {STATUS: "active", COUNT: str(event.anchor_count), LOG: orjson.dumps(forged).decode()}
    )
    batch = _both(orjson.dumps([entry]))
    # The upstream's measurement, not the client's, is stored.
    assert [a.value for a in batch.accepted] == [_as_kong(event)]
    assert batch.notes.ignored == {STATUS: 1, COUNT: 1, LOG: 1}


def test_a_client_cannot_hide_real_drift_by_declaring_the_snapshot_disabled() -> None:
    event = generated_event(2)
    entry = to_kong_entry(event)
    entry["request"]["headers"][STATUS] = "disabled"
    batch = _both(orjson.dumps(entry))
    assert [a.value for a in batch.accepted] == [_as_kong(event)]
    assert orjson.loads(batch.accepted[0].value)["snapshot_status"] == "active"
    assert batch.notes.ignored == {STATUS: 1}


def test_measurements_only_on_the_request_are_missing_not_used() -> None:
    entry = to_kong_entry(generated_event(2))
    for name in (STATUS, COUNT, LOG):
        entry["request"]["headers"][name] = entry["response"]["headers"].pop(name)
    batch = _both(orjson.dumps([entry]))
    assert batch.accepted == []
    assert _reasons(batch) == [f"response.headers.{STATUS}: required header is missing"]
    assert batch.notes.ignored == {STATUS: 1, COUNT: 1, LOG: 1}


def test_ignored_headers_are_counted_by_the_service() -> None:
    entry = to_kong_entry(generated_event(2))
    entry["request"]["headers"]["X-Anthropic-Snapshot-Status"] = "disabled"
    settings = IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},  # nothing there: 503
        ingest={"max_event_age_s": 10 * 365 * 86_400, "insecure_no_auth": True},
    )
    service = IngestService(settings)

    async def main() -> None:
        async with TestClient(TestServer(service.app())) as client:
            r = await client.post("/v1/kong", data=orjson.dumps([entry, entry]))
            assert r.status == 503
            metrics = await (await client.get("/metrics")).text()
            assert (
                'anchorwatch_ingest_headers_ignored_total{header="x-anthropic-snapshot-status"} 2.0'
                in metrics
            )

    try:
        asyncio.run(main())
    finally:
        service.producer.close(0)


# ---------------------------------------------------------------- one bad entry, not the batch


def _batch_with(bad: bytes, *, good: int = 3, at: int = 1) -> tuple[bytes, list[SnapshotEvent]]:
    events = list(generated_events()[:good])
    parts = [orjson.dumps(to_kong_entry(e)) for e in events]
    parts.insert(at, bad)
    return b"[" + b",\n ".join(parts) + b"]", events


@pytest.mark.parametrize(
    ("bad", "field", "reason"),
    [
        (latin1_user_agent_entry(), "request.headers.user-agent", "byte 0xfc is not UTF-8"),
        (b'{"started_at": 1, "latencies": {"request": NaN}}', "latencies.request", "unexpected"),
        (
            b'{"request": {"headers": {"x": ' + b"[" * 1100 + b"]" * 1100 + b"}}}",
            "request.headers.x" + "[0]" * 1022,
            "depth limit exceeded",
        ),
    ],
    ids=["latin-1 header", "NaN", "too deep"],
)
def test_an_entry_that_is_not_json_is_dead_lettered_alone(
    bad: bytes, field: str, reason: str
) -> None:
    body, events = _batch_with(bad)
    batch = _both(body)
    assert [a.value for a in batch.accepted] == [_as_kong(e) for e in events]
    (rejected,) = batch.rejected
    problem = rejected.error.problems[0]
    assert problem.field == field
    assert reason in problem.reason
    assert "(entry 1 of the batch, byte " in problem.reason
    assert reason_label(rejected.error) == "not_json"  # never a client's key as a label
    assert b"sk-secret" not in rejected.raw


def test_the_dead_letter_of_an_entry_that_is_not_json_keeps_its_bytes_but_secrets() -> None:
    bad = latin1_user_agent_entry()
    body, _ = _batch_with(bad, at=0)
    (rejected,) = _both(body).rejected
    assert rejected.raw == bad.replace(b'"sk-secret"', b'"REDACTED"')
    assert "entry 0 of the batch" in str(rejected.error)


def test_a_single_entry_that_is_not_json_is_a_dead_letter_not_a_400() -> None:
    batch = _both(latin1_user_agent_entry())
    assert batch.accepted == []
    assert batch.rejected[0].error.first_field == "request.headers.user-agent"


@pytest.mark.parametrize(
    "body",
    [
        b'[{"a": 1}, {"b": "never closed}]',
        b'[{"a": 1}, {"b": 2]',
        b'[{"a": 1}, {"b": 2}',
        b'[{"a": NaN}, ]',
        b'[{"a": NaN}] trailing',
        b'{"a": NaN} {"b": 1}',
        b"\xff\xfe",
    ],
)
def test_a_body_whose_top_level_is_broken_is_a_400(body: bytes) -> None:
    for fast in (True, False):
        with pytest.raises(BodyError, match="body is not JSON"):
            kong_body(body, source="kong", fast=fast)


def test_entries_are_split_at_top_level_commas_only() -> None:
    body = b' [ {"a": "x,]\\"}", "b": [1, {"c": 2}]} ,7, "s,"\n, [] ] '
    assert split_entries(body) == [b'{"a": "x,]\\"}", "b": [1, {"c": 2}]}', b"7", b'"s,"', b"[]"]
    assert split_entries(b"[]") == []
    assert split_entries(b"[ ]") == []


def test_path_at_names_the_field_around_a_byte() -> None:
    raw = b'{"request": {"headers": {"a": "1", "user-agent": "M\xfcller"}}, "tries": [{}, {"ip": 1'
    assert path_at(raw, raw.index(b"\xfc")) == "request.headers.user-agent"
    assert path_at(raw, len(raw) - 1) == "tries[1].ip"
    assert path_at(raw, 0) == "$"


# ---------------------------------------------------------------- request ids


def test_a_repeated_request_id_with_different_values_falls_back_not_rejected() -> None:
    event = generated_event(2)
    entry = to_kong_entry(event)
    entry["request"]["headers"][RID] = ["id-a", "id-b"]
    entry["request"]["id"] = "kong-request-7"
    batch = _both(orjson.dumps([entry]))
    assert [a.value for a in batch.accepted] == [_as_kong(event, event_id="kong-request-7")]
    assert batch.notes.request_id_fallbacks == {"conflict": 1}
    # Without Kong's own id: a hash of the entry, the same on every retry of the batch.
    del entry["request"]["id"]
    again = _both(orjson.dumps([entry]))
    assert again.accepted[0].event_id == fallback_event_id(entry)
    assert _both(orjson.dumps([entry])).accepted[0].event_id == again.accepted[0].event_id


def test_a_request_id_in_two_casings_is_a_repeated_header() -> None:
    event = generated_event(2)
    entry = to_kong_entry(event)
    entry["request"]["headers"]["X-Request-Id"] = "other-id"
    entry["request"]["id"] = "kong-request-8"
    batch = _both(orjson.dumps([entry]))
    assert batch.accepted[0].event_id == "kong-request-8"
    assert batch.notes.request_id_fallbacks == {"conflict": 1}


def test_a_request_id_the_contract_refuses_falls_back() -> None:
    entry = to_kong_entry(generated_event(2))
    entry["request"]["headers"][RID] = "r" * 201
    batch = _both(orjson.dumps([entry]))
    assert batch.accepted[0].event_id == fallback_event_id(entry)
    assert batch.notes.request_id_fallbacks == {"invalid": 1}


# ---------------------------------------------------------------- doc types


@pytest.mark.parametrize(
    ("doc_type", "reason"),
    [
        ("invoice\u200b", "U+200B (Cf) not allowed"),
        ("\u202einvoice", "U+202E (Cf) not allowed"),
        ("in\u00advoice", "U+00AD (Cf) not allowed"),
        ("in\u2029voice", "U+2029 (Zp) not allowed"),
        ("\u3164", "only whitespace or invisible characters"),
        ("\u2800\u2800", "only whitespace or invisible characters"),
    ],
)
def test_doc_types_that_hide_or_reorder_text_are_refused_naming_the_code_point(
    doc_type: str, reason: str
) -> None:
    entry = to_kong_entry(generated_event(1))
    entry["request"]["headers"][DOC] = doc_type
    batch = _both(orjson.dumps([entry]))
    assert _reasons(batch) == [f"request.headers.{DOC}: {reason}"]


def test_doc_types_are_nfc_normalised_on_both_paths() -> None:
    event = generated_event(1)
    entry = to_kong_entry(event)
    entry["request"]["headers"][DOC] = "facture-re\u0301sume\u0301"
    batch = _both(orjson.dumps([entry]))
    assert batch.accepted[0].doc_type == "facture-r\u00e9sum\u00e9"
    line = orjson.loads(encode(event))
    line["doc_type"] = "facture-re\u0301sume\u0301"
    for fast in (True, False):
        lines = ndjson_body(orjson.dumps(line), source="x", fast=fast)
        assert lines.accepted[0].doc_type == "facture-r\u00e9sum\u00e9"


def test_the_doc_type_in_two_casings_with_different_values_is_a_conflict() -> None:
    entry = to_kong_entry(generated_event(1))
    entry["request"]["headers"]["X-Anthropic-Doc-Type"] = "not-" + entry["request"]["headers"][DOC]
    batch = _both(orjson.dumps([entry]))
    (reason,) = _reasons(batch)
    assert reason.startswith(f"request.headers.{DOC}: conflicting values in a repeated header")
    # The same value in two casings is one value.
    entry["request"]["headers"]["X-Anthropic-Doc-Type"] = entry["request"]["headers"][DOC]
    assert len(_both(orjson.dumps([entry])).accepted) == 1


# ---------------------------------------------------------------- event times


def _window(now_ms: int) -> TimeWindow:
    return TimeWindow(now_ms, 5 * MINUTE, 7 * 24 * 60 * MINUTE)


def test_an_event_from_2099_cannot_move_the_watermark() -> None:
    event = generated_event(1)
    entries = [to_kong_entry(event), to_kong_entry(event.model_copy(update={"event_id": "late"}))]
    entries[1]["started_at"] = 4_070_908_800_000  # 2099-01-01
    batch = _both(orjson.dumps(entries), window=_window(event.event_time_ms))
    assert [a.value for a in batch.accepted] == [_as_kong(event)]
    (reason,) = _reasons(batch)
    assert reason.startswith("started_at: 4070908800000 is ")
    assert "ahead of the ingest clock" in reason
    assert "ingest.max_future_skew_s" in reason


@pytest.mark.parametrize(
    ("offset_ms", "accepted"),
    [
        (5 * MINUTE, True),  # skew allowed: clocks differ
        (5 * MINUTE + 1, False),
        (-7 * 24 * 60 * MINUTE, True),
        (-7 * 24 * 60 * MINUTE - 1, False),  # the topic would delete it at once
    ],
)
def test_event_times_must_lie_in_the_window_on_both_formats(offset_ms: int, accepted: bool) -> None:
    event = generated_event(1)
    window = _window(event.event_time_ms - offset_ms)
    kong = _both(orjson.dumps([to_kong_entry(event)]), window=window)
    assert len(kong.accepted) == accepted
    for fast in (True, False):
        lines = ndjson_body(encode(event), source="x", window=window, fast=fast)
        assert len(lines.accepted) == accepted
        if not accepted:
            assert lines.rejected[0].error.first_field == "event_time_ms"
    if not accepted:
        assert kong.rejected[0].error.first_field == "started_at"


def test_the_default_event_age_is_the_snapshots_topics_retention() -> None:
    ingest = IngestSettings.load().ingest
    (snapshots,) = (s for s in topic_specs(TopicSettings()) if s.name == "anchorwatch.snapshots")
    assert ingest.max_event_age_s * 1000 == int(snapshots.config["retention.ms"])


# ---------------------------------------------------------------- the five-entry batch


def test_a_five_entry_batch_keeps_three_and_dead_letters_two_naming_the_field() -> None:
    body, expected = five_entry_batch()
    batch = _both(body, window=_window(expected[0].event_time_ms))
    assert [a.value for a in batch.accepted] == [_as_kong(e) for e in expected]
    assert [r.error.first_field for r in batch.rejected] == [
        f"response.headers.{LOG}[0].drift_score",
        f"request.headers.{DOC}",
    ]
    assert batch.notes.request_id_fallbacks == {"conflict": 1}
