"""Malformed records: the bytes a broken producer or proxy puts on a topic in place of a
snapshot event, each of a kind the contract must refuse (``MALFORMED_REASONS``): not JSON,
truncated, a required field missing, a value out of range or of the wrong type, an anchor
count that disagrees with the log.
"""

from __future__ import annotations

import random
from typing import Any, Final

import orjson

from anchorwatch.contracts.codec import encode
from anchorwatch.contracts.models import SnapshotEvent

MALFORMED_REASONS: Final = (
    "not_json",
    "truncated",
    "missing_field",
    "out_of_range",
    "wrong_type",
    "count_mismatch",
)

# Lines a broken producer or proxy really puts on a topic; none of them parse as JSON.
_NOT_JSON_LINES: Final = (
    b"upstream connect error or disconnect/reset before headers. reset reason: overflow",
    b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
    b"2025/11/29 08:00:01 [error] 1337#0: *42 lua entry thread aborted: runtime error",
    b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",  # a gzip header: compressed by mistake
    b"{'event_id': 'abc', 'doc_type': 'invoice'}",  # a Python repr, not JSON
)
_REQUIRED_FIELDS: Final = (
    "event_id",
    "event_time_ms",
    "doc_type",
    "snapshot_status",
    "anchor_count",
)


def malformed_line(rng: random.Random, event: SnapshotEvent) -> tuple[bytes, str]:
    """Bytes a broken producer might send in place of ``event``; none passes decode_snapshot."""
    reason = rng.choice(MALFORMED_REASONS)
    if reason == "not_json":
        return rng.choice(_NOT_JSON_LINES), reason
    raw = encode(event)
    if reason == "truncated":
        # Any proper prefix of a JSON object is unbalanced, hence invalid.
        return raw[: rng.randint(1, len(raw) - 1)], reason
    data = orjson.loads(raw)
    anchors: list[dict[str, Any]] = data["anchors"]
    if reason == "missing_field":
        del data[rng.choice(_REQUIRED_FIELDS)]
    elif reason == "out_of_range":
        if anchors:
            rng.choice(anchors)["drift_score"] = round(rng.uniform(1.05, 3.0), 4)
        else:
            data["event_time_ms"] //= 1000  # seconds where milliseconds belong
    elif reason == "wrong_type":
        if anchors:
            target = rng.choice(anchors)
            target["drift_score"] = str(target["drift_score"])
        else:
            data["anchor_count"] = str(data["anchor_count"])
    else:  # count_mismatch: the log lists more anchors than the gateway counted
        if not anchors:
            anchors.append(
                {
                    "anchor_id": "SECTION_001",
                    "position": 0,
                    "l2_norm": 4.2,
                    "cosine_angle": 0.9,
                    "kl_divergence": 0.03,
                    "drift_score": 0.3,
                    "recommendation": "none",
                }
            )
        data["anchor_count"] = len(anchors) - 1
    return orjson.dumps(data), reason
