"""Kong http-log entries -> snapshot events: the mapping, and every way an entry is refused."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from anchorwatch.connectors.kong import KongFormat, fallback_event_id, kong_record
from anchorwatch.contracts import ContractError, SnapshotEvent, decode_snapshot, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import KongHeaderNames, to_kong_entry

LOG = "x-anthropic-snapshot-log"
COUNT = "x-anthropic-anchor-count"
DOC = "x-anthropic-doc-type"
STATUS = "x-anthropic-snapshot-status"


@functools.lru_cache(maxsize=1)
def _events() -> tuple[SnapshotEvent, ...]:
    traffic = generate(TrafficConfig(seed=3, minutes=6, doc_types=5, background_fault_rate=0.1))
    return tuple(r.event for r in traffic.records() if r.event is not None)


def _with_anchors(n: int) -> SnapshotEvent:
    return next(e for e in _events() if len(e.anchors) >= n)


def _entry(event: SnapshotEvent | None = None) -> dict[str, Any]:
    return to_kong_entry(event or _with_anchors(3))


def _as_kong(event: SnapshotEvent, source: str = "kong") -> bytes:
    """What the service should write for ``event`` received through Kong."""
    return encode(event.model_copy(update={"source": source}))


def test_every_generated_entry_maps_to_its_event_exactly() -> None:
    events = _events()
    assert any(e.snapshot_status == "disabled" for e in events)
    assert any(e.anchor_count == 0 for e in events)
    for event in events:
        record = kong_record(to_kong_entry(event), source="kong")
        assert record.value == _as_kong(event)
        assert (record.event_id, record.doc_type) == (event.event_id, event.doc_type)


def test_header_names_are_case_insensitive() -> None:
    event = _with_anchors(2)
    entry = _entry(event)
    for location, names in (("request", (DOC, "x-request-id")), ("response", (STATUS, COUNT, LOG))):
        headers = entry[location]["headers"]
        for name in names:
            upper = name.upper() if name != LOG else "X-Anthropic-Snapshot-LOG"
            headers[upper] = headers.pop(name)
    assert kong_record(entry, source="kong").value == _as_kong(event)


def test_repeated_headers_that_agree_are_one_value_and_a_split_log_is_joined() -> None:
    event = _with_anchors(4)
    entry = _entry(event)
    entry["request"]["headers"][DOC] = [event.doc_type, f" {event.doc_type} "]  # not a value
    headers = entry["response"]["headers"]
    headers[COUNT] = [str(event.anchor_count)]
    anchors = [a.model_dump(mode="json") for a in event.anchors]
    # One header per part of the log, in order: an array, then single objects.
    headers[LOG] = [orjson.dumps(anchors[:2]).decode()] + [
        orjson.dumps(a).decode() for a in anchors[2:]
    ]
    assert kong_record(entry, source="kong").value == _as_kong(event)


def test_repeated_headers_that_disagree_are_refused_naming_both_values() -> None:
    entry = _entry()
    entry["request"]["headers"][DOC] = ["invoice", "nda"]
    with pytest.raises(ContractError) as info:
        kong_record(entry, source="kong")
    assert str(info.value) == (
        f"invalid Kong http-log entry: request.headers.{DOC}: "
        "conflicting values in a repeated header: 'invoice', 'nda'"
    )


def test_header_names_and_where_each_is_trusted_are_configurable() -> None:
    event = _with_anchors(2)
    names = KongHeaderNames(
        doc_type="x-gw-doc",
        snapshot_status="x-gw-status",
        anchor_count="x-gw-anchors",
        snapshot_log="x-gw-log",
        request_id="x-gw-id",
    )
    entry = to_kong_entry(event, headers=names)
    fmt = KongFormat(
        doc_type="x-gw-doc",
        snapshot_status="x-gw-status",
        anchor_count="x-gw-anchors",
        snapshot_log="x-gw-log",
        request_id="x-gw-id",
    )
    assert kong_record(entry, fmt, source="gw").value == _as_kong(event, "gw")
    # A gateway whose plugin writes the measurements into the logged request headers: the
    # operator says so, and only then are they read there.
    for name in ("x-gw-status", "x-gw-anchors", "x-gw-log"):
        entry["request"]["headers"][name] = entry["response"]["headers"].pop(name)
    with pytest.raises(ContractError) as info:
        kong_record(entry, fmt, source="gw")
    assert "response.headers.x-gw-status: required header is missing" in str(info.value)
    on_request = dataclasses.replace(fmt, measurement_locations=("request",))
    assert kong_record(entry, on_request, source="gw").value == _as_kong(event, "gw")
    # The doc type where the operator says: here, the response first.
    entry["response"]["headers"]["x-gw-doc"] = "from-response"
    both = dataclasses.replace(on_request, doc_type_locations=("response", "request"))
    assert kong_record(entry, both, source="gw").doc_type == "from-response"
    assert kong_record(entry, on_request, source="gw").doc_type == event.doc_type


def test_event_id_from_the_header_else_kongs_request_id_else_a_stable_hash() -> None:
    entry = _entry()
    assert kong_record(entry, source="kong").event_id == entry["request"]["headers"]["x-request-id"]
    del entry["request"]["headers"]["x-request-id"]
    del entry["response"]["headers"]["x-request-id"]
    entry["request"]["id"] = "9ec9264afbbbad5fe5c64877d92eeb04"  # Kong >= 3.5 logs its own
    assert kong_record(entry, source="kong").event_id == "9ec9264afbbbad5fe5c64877d92eeb04"
    del entry["request"]["id"]
    first = kong_record(entry, source="kong").event_id
    assert first.startswith("kong-")
    assert len(first) == 37
    # The same entry, keys in another order (as a retry may serialize it): the same id.
    reordered = orjson.loads(orjson.dumps(dict(reversed(list(entry.items())))))
    assert kong_record(reordered, source="kong").event_id == first == fallback_event_id(entry)
    entry["started_at"] += 1
    assert kong_record(entry, source="kong").event_id != first


def test_started_at_as_an_integral_double_is_accepted() -> None:
    event = _with_anchors(1)
    entry = _entry(event)
    entry["started_at"] = float(event.event_time_ms)  # Kong's cjson writes doubles
    assert kong_record(entry, source="kong").value == _as_kong(event)


def test_disabled_snapshot_without_a_log_is_accepted() -> None:
    event = next(e for e in _events() if e.snapshot_status == "disabled")
    entry = _entry(event)
    del entry["response"]["headers"][LOG]
    assert kong_record(entry, source="kong").value == _as_kong(event)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(entry: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target = entry
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value

    return mutate


_DELETE = object()
H = "request/headers/"
R = "response/headers/"


def _log_with(**changes: Any) -> str:
    anchors = [a.model_dump(mode="json") for a in _with_anchors(3).anchors[:3]]
    anchors[2].update(changes)
    return orjson.dumps(anchors).decode()


REFUSALS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("not an object", lambda e: None, "$: expected a JSON object, got an array"),
    ("count not integer", _set(R + COUNT, "twelve"), f"{COUNT}: not an integer: 'twelve'"),
    ("count negative", _set(R + COUNT, "-1"), f"{COUNT}: not an integer: '-1'"),
    ("count too large", _set(R + COUNT, "100001"), f"{COUNT}: Input should be less than"),
    ("doc type missing", _set(H + DOC, _DELETE), f"{DOC}: required header is missing"),
    ("doc type empty", _set(H + DOC, " "), f"{DOC}: String should have at least 1 character"),
    ("doc type control", _set(H + DOC, "a\x07b"), f"{DOC}: U+0007 (Cc) not allowed"),
    ("status missing", _set(R + STATUS, _DELETE), f"{STATUS}: required header is missing"),
    ("status unknown", _set(R + STATUS, "paused"), f"{STATUS}: Input should be 'active'"),
    ("count missing", _set(R + COUNT, _DELETE), f"{COUNT}: required header is missing"),
    ("header a number", _set(H + DOC, 7), f"{DOC}: expected a string or a list of strings"),
    ("header empty list", _set(H + DOC, []), f"{DOC}: expected a string or a list of strings"),
    ("log missing", _set(R + LOG, _DELETE), f"{LOG}: required header is missing (snapshot"),
    ("log not JSON", _set(R + LOG, "[{'drift': 1}]"), f"{LOG}: not valid JSON"),
    ("log a number", _set(R + LOG, "0.5"), f"{LOG}: expected a JSON array of anchor objects"),
    ("log part not a string", _set(R + LOG, ["[]", 1]), f"{LOG}[1]: expected a JSON string"),
    (
        "anchor out of range",
        _set(R + LOG, _log_with(drift_score=1.5)),
        f"{LOG}[2].drift_score: Input should be less than or equal to 1",
    ),
    (
        "anchor wrong type",
        _set(R + LOG, _log_with(drift_score="0.5")),
        f"{LOG}[2].drift_score: Input should be a valid number",
    ),
    (
        "anchor field missing",
        _set(R + LOG, _log_with(anchor_id=None)),
        f"{LOG}[2].anchor_id: Input should be a valid string",
    ),
    ("more anchors than counted", _set(R + COUNT, "2"), f"{LOG}: the log lists 3 anchors"),
    (
        "disabled with anchors",
        _set(R + STATUS, "disabled"),
        f"{LOG}: must be empty when snapshot_status is 'disabled'",
    ),
    ("started_at missing", _set("started_at", _DELETE), "started_at: required field is missing"),
    (
        "started_at in seconds",
        _set("started_at", 1_764_403_200),
        "started_at: Input should be greater than or equal to 946684800000",
    ),
    (
        "started_at fractional",
        _set("started_at", 1_764_403_200_000.5),
        "started_at: expected integer epoch milliseconds, got a number 1764403200000.5",
    ),
    ("started_at text", _set("started_at", "2025-11-29"), "started_at: expected integer epoch"),
    ("request not an object", _set("request", "GET /"), "request: expected a JSON object"),
    ("headers not an object", _set("request/headers", []), "request.headers: expected a JSON"),
]


@pytest.mark.parametrize(
    ("mutate", "expected"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refusals_name_the_entry_field_and_the_reason(
    mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    entry: Any = copy.deepcopy(_entry(_with_anchors(3)))
    entry["response"]["headers"][COUNT] = "3"
    entry["response"]["headers"][LOG] = _log_with()
    if expected.startswith("$"):
        entry = [entry]
    else:
        mutate(entry)
    with pytest.raises(ContractError) as info:
        kong_record(entry, source="kong")
    assert expected in str(info.value)
    assert str(info.value).startswith("invalid Kong http-log entry: ")
    # The dead letter's field is the first problem's path, inside the Kong entry.
    field = info.value.first_field
    assert field == "$" or field.split(".")[0] in ("request", "response", "started_at")


def test_the_event_written_is_the_contract_event() -> None:
    event = _with_anchors(5)
    written = decode_snapshot(kong_record(_entry(event), source="kong").value)
    assert written == event.model_copy(update={"source": "kong"})
