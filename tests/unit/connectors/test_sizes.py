"""Record sizes and what rejected records keep alive, without a broker: the contract's
largest event against the configured limits, dead letters cut to fit, and rejects that do
not hold on to the frames (and the parsed body) that rejected them."""

from __future__ import annotations

import hashlib
import tracemalloc

import orjson
import pytest

from anchorwatch.connectors.publisher import (
    check_record_limit,
    contract_max_bytes,
    dead_letter_value,
)
from anchorwatch.connectors.records import kong_body, ndjson_body
from anchorwatch.contracts import ContractError, DeadLetter, FieldProblem, SnapshotEvent, decode
from anchorwatch.contracts import encode as encode_model
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import FRAMING_BYTES, record_limit
from anchorwatch.settings import TopicSettings

NOW_MS = 1_764_403_200_000


def _big_event(anchors: int = 10_000, text: str = "A") -> SnapshotEvent:
    """A valid event at the contract's anchor limit, with long texts."""
    anchor = {
        "anchor_id": (text * 200)[:200],
        "position": 2**63 - 1,
        "l2_norm": 1.2345678901234567e300,
        "cosine_angle": -0.12345678901234566,
        "kl_divergence": 1.2345678901234567e300,
        "drift_score": 0.12345678901234566,
        "recommendation": (text * 64)[:64],
    }
    return SnapshotEvent.model_validate(
        {
            "event_id": "e" * 200,
            "event_time_ms": NOW_MS,
            "doc_type": "d" * 512,
            "snapshot_status": "active",
            "anchor_count": 100_000,
            "anchors": [anchor] * anchors,
            "source": "s" * 200,
        }
    )


@pytest.mark.parametrize("text", ["A", '"', "\U0001f600"])
def test_the_contract_maximum_bounds_every_valid_event(text: str) -> None:
    event = _big_event(text=text)
    size = len(encode_model(event)) + len(event.doc_type.encode())
    assert size <= contract_max_bytes()
    # The chain holds with the default settings: the largest event fits the producer.
    assert contract_max_bytes() <= record_limit(TopicSettings())


def test_a_limit_below_the_contract_maximum_stops_the_service_naming_the_setting() -> None:
    check_record_limit(TopicSettings())
    with pytest.raises(AnchorwatchError) as caught:
        check_record_limit(TopicSettings(max_message_bytes=8 * 1024 * 1024))
    message = str(caught.value)
    assert "topics.max_message_bytes (ANCHORWATCH_TOPICS__MAX_MESSAGE_BYTES) is 8388608" in message
    assert str(contract_max_bytes() + FRAMING_BYTES) in message


ERROR = ContractError("NDJSON line", [FieldProblem("$", "not valid JSON: unexpected byte")])


@pytest.mark.parametrize(
    "raw",
    [
        bytes(range(1, 32)) * 100_000,  # control bytes: 6 bytes each in JSON
        b"\xff\xfe" * 1_000_000,  # not UTF-8: replaced, 3 bytes each
        b"x" * 3_000_000,
    ],
    ids=["control", "invalid-utf8", "ascii"],
)
def test_a_dead_letter_too_big_for_kafka_is_cut_with_size_sha256_and_reason(raw: bytes) -> None:
    limit = 1_000_000
    value = dead_letter_value(raw, ERROR, "ingest", NOW_MS, limit)
    assert len(value) <= limit
    letter = decode(DeadLetter, value)
    note = f" of {len(raw)} bytes; sha256 of all: {hashlib.sha256(raw).hexdigest()}]"
    assert letter.reason.startswith(str(ERROR))
    assert letter.reason.endswith(note)
    kept = int(letter.reason.rsplit("[raw cut to its first ", 1)[1].split(" ", 1)[0])
    assert 0 < kept < len(raw)
    assert letter.raw == raw[:kept].decode("utf-8", errors="replace")
    assert (letter.field, letter.source) == ("$", "ingest")
    # Close to the limit: it keeps as much as fits, not a token prefix.
    assert len(value) > limit * 0.9


def test_a_dead_letter_that_fits_is_kept_whole() -> None:
    raw = b"{not json" * 1000
    value = dead_letter_value(raw, ERROR, "ingest", NOW_MS, 1_000_000)
    letter = decode(DeadLetter, value)
    assert letter.raw == raw.decode()
    assert letter.reason == str(ERROR)


def _events() -> list[SnapshotEvent]:
    traffic = generate(TrafficConfig(seed=5, minutes=1, doc_types=2))
    return [r.event for r in traffic.records() if r.event is not None][:20]


def test_rejects_keep_no_traceback_and_so_no_frame_holding_the_parsed_body() -> None:
    entries = [to_kong_entry(e) for e in _events()]
    for entry in entries:
        entry["started_at"] = "yesterday"
    lines = [orjson.dumps(e.model_dump()) for e in _events()]
    lines = [line.replace(b'"drift_score":', b'"drift_score":-') for line in lines]
    batches = [
        kong_body(orjson.dumps(entries), source="kong"),
        kong_body(orjson.dumps(entries[0]), source="kong"),
        kong_body(orjson.dumps(entries), source="kong", fast=False),
        ndjson_body(b"\n".join([*lines, b"{broken"]), source="ingest"),
    ]
    for batch in batches:
        assert batch.rejected
        for rejected in batch.rejected:
            error = rejected.error
            # The traceback's frames hold the whole parsed body and the batch holding this
            # error: a cycle only a full collection frees (hundreds of MB per large body).
            assert error.__traceback__ is None
            assert error.__context__ is None
            assert error.__cause__ is None
            assert str(error)  # the message itself is kept


def _rejected_batch(entries: int) -> bytes:
    """A Kong batch whose every entry is rejected in a way the compiled reader cannot read
    (``started_at`` a string): the whole body goes to the Python path."""
    events = _events()
    batch = []
    for i in range(entries):
        entry = to_kong_entry(events[i % len(events)])
        entry["started_at"] = f"yesterday-{i}"
        batch.append(entry)
    return orjson.dumps(batch)


def test_a_large_rejected_batch_is_never_in_python_objects_whole() -> None:
    body = _rejected_batch(1500)  # about 5 MB
    tracemalloc.start()
    try:
        batch = kong_body(body, source="kong")
        _, peak = tracemalloc.get_traced_memory()
        letters = [
            dead_letter_value(r.raw, r.error, "kong", NOW_MS, 1 << 24) for r in batch.rejected
        ]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(batch.rejected) == 1500
    # Parsed whole, the batch took about ten times its size; read entry by entry, the
    # rejects' raw bytes, their errors and the split entries.
    assert peak < 4 * len(body), (peak, len(body))
    # What a request keeps until Kafka acknowledges: about the bytes themselves (orjson's
    # output alone kept 32 KB of capacity per 3 KB dead letter).
    kept = sum(map(len, letters)) + sum(len(r.raw) for r in batch.rejected)
    assert held < 2 * kept, (held, kept)
