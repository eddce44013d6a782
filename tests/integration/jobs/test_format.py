"""The anchorwatch-json format's byte scanner against Flink's JSON decoder, on a real topic
read by the embedded mini-cluster: every record of a corpus (realistic snapshots, records
that are subtly or grossly malformed, and seeded mutations of both) decodes to the same row
with `decoder` 'scanner' (the default, what the drift job reads with) as with 'jackson'
(Flink's decoder for every record, the format before the scanner), and the malformed ones
come out as payload rows, which the drift job dead-letters. The JSON columns (`kinds`,
`top_anchors`: the value's text) hold the same JSON value either way, its own bytes from the
scanner, Flink's compact re-writing from its decoder."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import orjson
import pytest

from anchorwatch.demo import slice as flow
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs import drift_job
from anchorwatch.jobs.settings import JobSettings
from tests.support.kafka import ordered_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GOOD = {
    "event_id": "e-1", "event_time_ms": 1_764_403_201_262, "doc_type": "invoice",
    "snapshot_status": "active", "anchor_count": 2,
    "anchors": [{"anchor_id": "A", "position": 1, "kl_divergence": 0.07, "note": "x\"y\\z"},
                {"anchor_id": "B", "nested": [[], {}, [1, -2.5e-3, True, False, None]]}],
    "mean_drift": 0.4339, "max_drift": 0.5569, "max_kl_divergence": 0.0759, "resample_count": 0,
}  # fmt: skip
_GOOD = orjson.dumps(GOOD)


def _with(text: bytes, old: bytes, new: bytes) -> bytes:
    assert old in text
    return text.replace(old, new, 1)


#: Records whose outcome the test states, not only compares.
MALFORMED = [
    b"", b"null", b"[]", b'"text"', b"42", b"{", b"not json at all",
    _with(_GOOD, b'"position":1,', b'"position":1,,'),  # a stray comma in the anchors
    _with(_GOOD, b'"anchor_id":"B"', b'"anchor_id":"B'),  # an unterminated string
    _with(_GOOD, b"-0.0025", b"-0.0025e-"),  # a number without exponent digits
    _with(_GOOD, b"-0.0025", b"01"),  # a leading zero
    _with(_GOOD, b"true", b"tru"),
    _with(_GOOD, b'"note":"x', b'"note":"\\q'),  # an unknown escape
    _with(_GOOD, b'"note":"x', b'"note":"\xff'),  # invalid UTF-8 in a skipped value
    _GOOD[:-1],  # the closing brace missing
]  # fmt: skip

#: Well-formed, decoded as Flink does (the scanner hands them to Flink's decoder).
UNUSUAL = [
    _with(_GOOD, b'"doc_type":"invoice"', b'"doc_type":"inv\\u00f6ice"'),  # an escape
    _with(_GOOD, b'"doc_type":"invoice"', b'"doc_type":"inv\xc3\xb6ice"'),  # non-ASCII
    _with(_GOOD, b'"anchor_count":2', b'"anchor_count":2.9'),  # a float for an INT
    _with(_GOOD, b'"anchor_count":2', b'"anchor_count":"7"'),  # a string for an INT
    _with(_GOOD, b'"anchor_count":2', b'"anchor_count":99999999999'),  # out of range
    _with(_GOOD, b'"mean_drift":0.4339', b'"mean_drift":"0.25"'),
    _with(_GOOD, b'"mean_drift":0.4339', b'"mean_drift":null'),
    _with(_GOOD, b'"doc_type":"invoice"', b'"doc_type":{"a":[1]}'),  # an object for a STRING
    _with(_GOOD, b'"event_id":"e-1"', b'"event_id":"e-1","event_id":"e-2"'),  # a duplicate
    _with(_GOOD, b'"event_id"', b'"ev\\u0065nt_id"'),  # an escaped name
    _with(_GOOD, b'"event_time_ms":1764403201262', b'"event_time_ms":-9223372036854775808'),
    _with(_GOOD, b'"max_drift":0.5569', b'"max_drift":1E400'),
    _with(_GOOD, b'"max_drift":0.5569', b'"max_drift":-0'),
    _with(_GOOD, b'"note":"x', b'"note":"\x01x'),  # a raw control character (Flink allows it)
    b' \n\t{"event_id":"ws"}  trailing text Flink never reads',
    b"{}",
    # The JSON columns: spaced and spelled otherwise, escaped, duplicated, not containers.
    _with(_GOOD, b'"resample_count":0', b'"resample_count":0,"kinds" : { "SECTION" : '
          b'{"anchor_count":1, "mean_drift":5e-1,"max_drift":0.50 } },"top_anchors":[ ]'),
    _with(_GOOD, b'"resample_count":0', b'"resample_count":0,"top_anchors":[{"anchor_id":'
          b'"A\\u005f\\"1","position":-0,"drift_score":1E400}]'),
    _with(_GOOD, b'"resample_count":0', b'"resample_count":0,"kinds":{"LIST":{"a":1},'
          b'"LIST":{"a":[2,{}]}}'),
    _with(_GOOD, b'"resample_count":0', b'"resample_count":0,"kinds":"{}","top_anchors":7'),
    _with(_GOOD, b'"resample_count":0', b'"resample_count":0,"kinds":{"SECTION":1e-7},'
          b'"model":"m-1","latency_ms":120'),
]  # fmt: skip

#: Mutations keep to ASCII and valid UTF-8: with invalid UTF-8 in a field *name*, Flink's
#: decoder itself answers differently depending on the names it has seen before.
_PIECES = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"0", b"-", b".", b"e",
           b"null", b"true", b"\\u00e9", b"\xc3\xa9", b"01", b"1.", b"-0", b"1e5", b"\\n",
           b'"event_id":"dup",', b'"anchor_count":3.5,', b'"mean_drift":"0.5",',
           b'"resample_count":2147483648,', b'"doc_type":12,']  # fmt: skip


def _mutate(record: bytes, rnd: random.Random) -> bytes:
    for _ in range(rnd.randint(1, 3)):
        at = rnd.randrange(len(record) + 1)
        op = rnd.randrange(3)
        if op == 0:
            record = record[:at] + record[at + rnd.randint(1, 4) :]
        elif op == 1:
            record = record[:at] + rnd.choice(_PIECES) + record[at:]
        else:
            record = record[:at]
    return record


def corpus() -> tuple[list[bytes], int]:
    """The records in order, and how many realistic snapshots follow the first."""
    traffic = generate(TrafficConfig(seed=11, minutes=2, doc_types=8, rate_scale=0.5))
    real = [r.raw for r in traffic.records() if r.event is not None][:400]
    rnd = random.Random(7)
    mutated = [_mutate(rnd.choice([*real, _GOOD]), rnd) for _ in range(3_000)]
    return [_GOOD, *real, *MALFORMED, *UNUSUAL, *mutated], len(real)


_COLUMNS = (
    "kafka_offset, event_id, event_time_ms, doc_type, snapshot_status, anchor_count, "
    "mean_drift, max_drift, max_kl_divergence, resample_count, model, latency_ms, kinds, "
    f"top_anchors, {drift_job.UNPARSABLE}"
)
_JSON_COLUMNS = {"kinds", "top_anchors"}


def _value(column: str, v: Any) -> str:
    """A column's value to compare: repr (a NaN equals itself, -0.0 differs from 0.0); a
    JSON column's text as the JSON value it holds (non-finite numbers as Jackson writes
    them, quoted)."""
    if column not in _JSON_COLUMNS or v is None:
        return repr(v)
    try:
        value = json.loads(v)
    except ValueError:
        return repr(v)

    def plain(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
        if isinstance(x, dict):
            return {k: plain(y) for k, y in x.items()}
        return [plain(y) for y in x] if isinstance(x, list) else x

    return repr(plain(value))


def rows(settings: JobSettings, decoder: str) -> dict[int, tuple[Any, ...]]:
    jar = flow.fetch_artifacts(settings).flink_jobs_jar()
    _, t_env = drift_job.create_environment(settings, jar)
    drift_job.declare_tables(t_env, settings, bounded=True, breakdown=True)
    hint = f"/*+ OPTIONS('anchorwatch-json.decoder'='{decoder}') */"
    query = f"SELECT {_COLUMNS} FROM {drift_job.SNAPSHOTS} {hint}"  # noqa: S608
    names = _COLUMNS.split(", ")[1:]
    with t_env.execute_sql(query).collect() as results:
        return {
            row[0]: tuple(_value(c, v) for c, v in zip(names, row[1:], strict=True))
            for row in results
        }


def test_the_scanner_decodes_every_record_as_flinks_json_decoder(
    job_settings: JobSettings,
) -> None:
    records, n_real = corpus()
    producer = ordered_producer(
        job_settings.kafka.bootstrap_servers, **{"message.max.bytes": 10_000_000}
    )
    for record in records:
        # One partition: offsets follow the corpus.
        producer.produce(job_settings.topics.snapshots, record, partition=0)
    assert producer.flush(30) == 0

    scanned, jackson = rows(job_settings, "scanner"), rows(job_settings, "jackson")

    assert len(scanned) == len(jackson) == len(records)  # one row per record, read or not
    differ = [(records[o], scanned[o], jackson[o]) for o in scanned if scanned[o] != jackson[o]]
    assert differ == []
    payload = {o for o, row in scanned.items() if row[-1] != "None"}
    first_malformed = 1 + n_real
    for i in range(len(MALFORMED)):
        assert first_malformed + i in payload, MALFORMED[i]
    assert not payload & set(range(first_malformed)), "a well-formed record was refused"
    assert not payload & set(range(first_malformed + len(MALFORMED), len(records) - 3_000))
    good = tuple(_value(c, GOOD.get(c)) for c in _COLUMNS.split(", ")[1:-1])
    assert scanned[0] == (*good, "None")
    # The realistic snapshots carry a breakdown, read as their JSON text.
    kinds = _COLUMNS.split(", ")[1:].index("kinds")
    assert all(scanned[1 + i][kinds] != "None" for i in range(n_real))
    # The mutations exercise both outcomes.
    assert 300 < len(payload) < 2_900
