"""The summaries topic's binary form: ``SnapshotSummary`` in Avro's single-object encoding
(schemas/snapshot-summary.v2.avsc), what anchorwatch's connectors write there. The drift job
decodes it field by field without tokenising text (jobs/jvm BinarySummaryDecoder); it reads the
JSON form of the contract too, so a producer of its own may write either.

Versions. v2 adds ``model``, ``latency_ms`` and the breakdown (``kinds``, ``top_anchors``),
each with a default, and has a fingerprint of its own. The connectors write v2; the drift job
and ``decode_summary`` read both (a v1 record: no model, no latency, no breakdown). A consumer
of its own that knows only v1 keeps working by resolving schemas as Avro intends: it looks the
writer's schema up by the record's fingerprint (both files ship in this package), decodes with
it and resolves the result against its v1 reader schema, which drops the fields it does not
know. One that instead compares the fingerprint with v1's only (as the drift job before v2 did)
refuses v2 records: upgrade it before the connectors. The JSON form needs nothing: readers
ignore unknown keys (the contracts' ``extra="ignore"``).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any, Final

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from anchorwatch.contracts.models import SnapshotSummary

_SCHEMAS: Final = Path(__file__).parent / "schemas"
#: The schema the connectors write.
SCHEMA_FILE: Final = _SCHEMAS / "snapshot-summary.v2.avsc"
#: The schema of summaries written before the model, the latency and the breakdown.
SCHEMA_FILE_V1: Final = _SCHEMAS / "snapshot-summary.v1.avsc"
#: The single-object encoding's marker (Avro specification, "Single-object encoding").
MARKER: Final = b"\xc3\x01"


def _load_schema(path: Path) -> tuple[Any, bytes]:
    """The parsed schema and the header of every record: marker, then fingerprint."""
    schema = fastavro.parse_schema(json.loads(path.read_text()))
    crc = int(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"), 16)
    return schema, MARKER + crc.to_bytes(8, "little")


_SCHEMA, _HEADER = _load_schema(SCHEMA_FILE)
_SCHEMA_V1, _HEADER_V1 = _load_schema(SCHEMA_FILE_V1)


def summary_fingerprint() -> bytes:
    """The 8 bytes after the marker: the v2 schema's CRC-64-AVRO fingerprint, little-endian."""
    return _HEADER[len(MARKER) :]


def encode_summary(fields: dict[str, Any]) -> bytes:
    """One summaries-topic record (v2) of ``fields`` (the summary's, as JSON would carry
    them; ``model``, ``latency_ms``, ``kinds`` and ``top_anchors`` may be missing: none).

    Written here rather than by ``fastavro.schemaless_writer``, which takes several times as
    long per record on the ingest path; tests/unit/anchorwatch/contracts/test_avro.py holds
    the bytes equal to fastavro's."""
    return b"".join((
        _HEADER,
        _string(fields["event_id"]),
        _long(fields["event_time_ms"]),
        _string(fields["doc_type"]),
        _string(fields["snapshot_status"]),
        _long(fields["anchor_count"]),
        _optional_string(fields.get("source")),
        _optional_string(fields.get("model")),
        b"\x00" if (latency := fields.get("latency_ms")) is None else b"\x02" + _long(latency),
        _DOUBLES.pack(fields["mean_drift"], fields["max_drift"], fields["max_kl_divergence"]),
        _long(fields["resample_count"]),
        _kinds(fields.get("kinds") or {}),
        _top_anchors(fields.get("top_anchors") or []),
    ))  # fmt: skip


_DOUBLES: Final = struct.Struct("<ddd")
_TWO_DOUBLES: Final = struct.Struct("<dd")
_DOUBLE: Final = struct.Struct("<d")
# The one-byte varints (-64..63), ready made: lengths and counts are mostly these.
_SMALL: Final = {n: bytes(((n << 1) ^ (n >> 63),)) for n in range(-64, 64)}


def _long(n: int) -> bytes:
    """Avro's int and long: zig-zag, then a base-128 varint, low groups first."""
    small = _SMALL.get(n)
    if small is not None:
        return small
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return _long(len(data)) + data


def _optional_string(text: str | None) -> bytes:
    """A ["null", "string"] union: branch 0, or branch 1 and the string."""
    return b"\x00" if text is None else b"\x02" + _string(text)


def _kinds(kinds: dict[str, dict[str, Any]]) -> bytes:
    """A map as one block (its count, the entries) and the empty block that ends it."""
    if not kinds:
        return b"\x00"
    entries = (
        _string(kind)
        + _long(f["anchor_count"])
        + _TWO_DOUBLES.pack(f["mean_drift"], f["max_drift"])
        for kind, f in kinds.items()
    )
    return _long(len(kinds)) + b"".join(entries) + b"\x00"


def _top_anchors(anchors: list[dict[str, Any]]) -> bytes:
    """An array as one block, like a map."""
    if not anchors:
        return b"\x00"
    items = (
        _string(a["anchor_id"]) + _long(a["position"]) + _DOUBLE.pack(a["drift_score"])
        for a in anchors
    )
    return _long(len(anchors)) + b"".join(items) + b"\x00"


def is_avro_summary(raw: bytes) -> bool:
    return raw.startswith(_HEADER) or raw.startswith(_HEADER_V1)


def decode_summary(raw: bytes) -> SnapshotSummary:
    """A summaries-topic record in its binary form (v2, or v1: no model, latency or
    breakdown), checked against the contract."""
    if raw.startswith(_HEADER):
        schema, header = _SCHEMA, _HEADER
    elif raw.startswith(_HEADER_V1):
        schema, header = _SCHEMA_V1, _HEADER_V1
    else:
        raise ValueError("not a snapshot-summary in Avro single-object encoding (header)")
    body = io.BytesIO(raw[len(header) :])
    fields = fastavro.schemaless_reader(body, schema, schema)
    if body.read(1):
        raise ValueError("bytes left after the snapshot-summary record")
    return SnapshotSummary.model_validate(fields)
