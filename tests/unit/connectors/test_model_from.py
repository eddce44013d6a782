"""The model version on every event ingest writes: where a Kong entry's comes from
(``KongFormat.model_from``, ``ingest.model_from``), NDJSON's own ``model``, bounded and
checked as the contract checks it, by both paths alike; a bad one dead-letters its entry
alone."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from anchorwatch.connectors import records
from anchorwatch.connectors.kong import DEFAULT_FORMAT, KongFormat
from anchorwatch.connectors.records import _ANY_TIME, kong_body, ndjson_body
from anchorwatch.connectors.settings import IngestOptions
from anchorwatch.contracts import decode_snapshot, encode
from anchorwatch.demo.kong_entry import to_kong_entry
from tests.support.contracts import snapshot
from tests.support.fastpath import MODEL_HEADER, assert_paths_agree

HEADER = KongFormat(model_from=f"header:{MODEL_HEADER}")
ROUTE = KongFormat(model_from="route")
SERVICE = KongFormat(model_from="service")


def _entry(i: int = 0, **changes: Any) -> dict[str, Any]:
    entry = to_kong_entry(decode_snapshot(orjson.dumps(snapshot(event_id=f"req-{i}"))))
    entry["request"].update(changes.pop("request", {}))
    return entry | changes


def _models(body: bytes, fmt: KongFormat = DEFAULT_FORMAT) -> list[str | None]:
    """The model of each accepted event; both paths agree, and the fast path decides each
    entry itself (a valid ASCII model never costs the reference path)."""
    assert_paths_agree(kong_body, body, fmt, source="kong")
    fast = records._reader(fmt).kong(body, "kong", *_ANY_TIME)
    assert fast is not None
    assert None not in fast
    batch = kong_body(body, fmt, source="kong")
    assert not batch.rejected
    return [orjson.loads(a.value).get("model") for a in batch.accepted]


@pytest.mark.parametrize(
    ("fmt", "request_changes", "changes", "model"),
    [
        (DEFAULT_FORMAT, {"body": {"model": "claude-2.1", "messages": []}}, {}, "claude-2.1"),
        (DEFAULT_FORMAT, {"body": '{"max_tokens": 9, "model": "claude-2.1"}'}, {}, "claude-2.1"),
        (DEFAULT_FORMAT, {"body": "name=value&model=x"}, {}, None),  # not JSON: no model
        (DEFAULT_FORMAT, {"body": '["model"]'}, {}, None),
        (DEFAULT_FORMAT, {"body": {"model": None}}, {}, None),
        (DEFAULT_FORMAT, {}, {}, None),  # Kong logs no body by default
        (HEADER, {"headers": {"host": "h", "X-Model-Version": " v-7 "}}, {}, "v-7"),
        (HEADER, {"headers": {"host": "h", MODEL_HEADER: ["v-7", "v-7"]}}, {}, "v-7"),
        (HEADER, {"body": {"model": "not-this"}}, {}, None),
        (ROUTE, {}, {}, "llm-messages"),
        (ROUTE, {}, {"route": None}, None),
        (SERVICE, {}, {}, "anthropic-messages"),
        (SERVICE, {}, {"service": {"name": "summarizer-2.1"}}, "summarizer-2.1"),
    ],
)
def test_the_model_comes_from_where_model_from_says(
    fmt: KongFormat, request_changes: dict[str, Any], changes: dict[str, Any], model: str | None
) -> None:
    entry = _entry(request=request_changes, **changes)
    if fmt is HEADER and "headers" in request_changes:
        entry["request"]["headers"] = _entry()["request"]["headers"] | request_changes["headers"]
    assert _models(orjson.dumps([entry, _entry(1)]), fmt)[0] == model


def test_the_model_is_written_where_the_contract_writes_it() -> None:
    body = orjson.dumps(_entry(request={"body": {"model": "claude-2.1"}}))
    (accepted,) = kong_body(body, source="kong").accepted
    event = decode_snapshot(accepted.value)
    assert event.model == "claude-2.1"
    assert accepted.value == encode(event)
    assert list(orjson.loads(accepted.value))[7] == "model"  # after source, before figures


def test_a_thousand_distinct_models_from_one_client_are_all_accepted() -> None:
    """A model is a bounded value of its event, nothing more: ingest keeps no state per
    model, so a client naming a new one on every request costs it nothing."""
    entries = [_entry(i, request={"body": {"model": f"model-{i:04d}"}}) for i in range(1000)]
    models = _models(orjson.dumps(entries))
    assert models == [f"model-{i:04d}" for i in range(1000)]
    assert records._reader.cache_info().currsize <= 16  # readers by format, not by model


BAD = [
    ("m" * 10_000, "String should have at most 128 characters"),
    ("m" * 129, "String should have at most 128 characters"),
    ("gpt\x07", "U+0007 (Cc) not allowed"),
    ("gpt\nsecret", "U+000A (Cc) not allowed"),
    ("gpt\u202e4", "U+202E (Cf) not allowed"),
    ("", "String should have at least 1 character"),
    (7, "expected a string, got a number"),
]


@pytest.mark.parametrize(("model", "reason"), BAD)
def test_a_bad_model_dead_letters_its_entry_alone_naming_model(model: Any, reason: str) -> None:
    bad = _entry(1, request={"body": {"model": model}})
    body = orjson.dumps([_entry(0), bad, _entry(2)])
    assert_paths_agree(kong_body, body, DEFAULT_FORMAT, source="kong")
    batch = kong_body(body, source="kong")
    assert [a.event_id for a in batch.accepted] == ["req-0", "req-2"]
    (rejected,) = batch.rejected
    (problem,) = rejected.error.problems
    assert problem.field == "request.body.model"
    assert problem.reason.startswith("model: ")
    assert reason in problem.reason
    assert len(str(rejected.error)) < 300  # the value itself is not echoed


@pytest.mark.parametrize("fmt", [HEADER, ROUTE])
def test_a_bad_model_from_a_header_or_the_route_names_model_too(fmt: KongFormat) -> None:
    bad = _entry(1, route={"name": "r\x00"})
    bad["request"]["headers"][MODEL_HEADER] = "m" * 10_000
    body = orjson.dumps([_entry(0), bad])
    assert_paths_agree(kong_body, body, fmt, source="kong")
    (rejected,) = kong_body(body, fmt, source="kong").rejected
    (problem,) = rejected.error.problems
    where = f"request.headers.{MODEL_HEADER}" if fmt is HEADER else "route.name"
    assert problem.field == where
    assert problem.reason.startswith("model: ")


@pytest.mark.parametrize(("model", "reason"), BAD[:4])
def test_ndjson_events_carry_their_model_by_both_paths(model: Any, reason: str) -> None:
    lines = [snapshot(event_id="a", model="summarizer-2.1"), snapshot(event_id="b", model=model)]
    body = b"\n".join(orjson.dumps(line) for line in lines)
    assert_paths_agree(ndjson_body, body, source="gw")
    batch = ndjson_body(body, source="gw")
    assert [orjson.loads(a.value)["model"] for a in batch.accepted] == ["summarizer-2.1"]
    (rejected,) = batch.rejected
    assert rejected.error.first_field == "model"
    assert reason in str(rejected.error)


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("request_body_model", "request_body_model"),
        ("route", "route"),
        ("service", "service"),
        ("header:X-Model-Version", "header:x-model-version"),
    ],
)
def test_the_setting_names_a_place(value: str, stored: str) -> None:
    assert IngestOptions(model_from=value).model_from == stored


@pytest.mark.parametrize("value", ["body", "header:", "header:a b", "Route", "consumer"])
def test_the_setting_refuses_other_places(value: str) -> None:
    with pytest.raises(ValidationError, match="model_from"):
        IngestOptions(model_from=value)


def test_the_reader_refuses_an_unknown_place() -> None:
    with pytest.raises(ValueError, match="unknown model_from"):
        records._reader(KongFormat(model_from="consumer"))
