"""The summaries topic's binary form: ``SnapshotSummary`` in Avro's single-object encoding
(schemas/snapshot-summary.v1.avsc), what anchorwatch's connectors write there. The drift job
decodes it field by field without tokenising text (jobs/jvm BinarySummaryDecoder); it reads the
JSON form of the contract too, so a producer of its own may write either."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any, Final

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from anchorwatch.contracts.models import SnapshotSummary

SCHEMA_FILE: Final = Path(__file__).parent / "schemas" / "snapshot-summary.v1.avsc"
#: The single-object encoding's marker (Avro specification, "Single-object encoding").
MARKER: Final = b"\xc3\x01"


def _load_schema() -> tuple[Any, bytes]:
    """The parsed schema and the header of every record: marker, then fingerprint."""
    schema = fastavro.parse_schema(json.loads(SCHEMA_FILE.read_text()))
    crc = int(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"), 16)
    return schema, MARKER + crc.to_bytes(8, "little")


_SCHEMA, _HEADER = _load_schema()


def summary_fingerprint() -> bytes:
    """The 8 bytes after the marker: the schema's CRC-64-AVRO fingerprint, little-endian."""
    return _HEADER[len(MARKER) :]


def encode_summary(fields: dict[str, Any]) -> bytes:
    """One summaries-topic record of ``fields`` (the summary's, as JSON would carry them).

    Written here rather than by ``fastavro.schemaless_writer``, which takes several times as
    long per record on the ingest path; tests/unit/anchorwatch/contracts/test_avro.py holds
    the bytes equal to fastavro's."""
    source = fields["source"]
    return b"".join((
        _HEADER,
        _string(fields["event_id"]),
        _long(fields["event_time_ms"]),
        _string(fields["doc_type"]),
        _string(fields["snapshot_status"]),
        _long(fields["anchor_count"]),
        b"\x00" if source is None else b"\x02" + _string(source),
        _DOUBLES.pack(fields["mean_drift"], fields["max_drift"], fields["max_kl_divergence"]),
        _long(fields["resample_count"]),
    ))  # fmt: skip


_DOUBLES: Final = struct.Struct("<ddd")
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


def is_avro_summary(raw: bytes) -> bool:
    return raw.startswith(_HEADER)


def decode_summary(raw: bytes) -> SnapshotSummary:
    """A summaries-topic record in its binary form, checked against the contract."""
    if not raw.startswith(_HEADER):
        raise ValueError("not a snapshot-summary in Avro single-object encoding (header)")
    body = io.BytesIO(raw[len(_HEADER) :])
    fields = fastavro.schemaless_reader(body, _SCHEMA, _SCHEMA)
    if body.read(1):
        raise ValueError("bytes left after the snapshot-summary record")
    return SnapshotSummary.model_validate(fields)
