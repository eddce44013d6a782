"""The refit history's hours that are over are packed into one row each (``refit_hours``,
``refit_rows``): without loss (every double comes back bit for bit), read as the windows in
memory are whatever ran in between (late windows into packed hours, drops that cut an hour,
restarts), and several times smaller than a row per window."""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path

import pytest

from anchorwatch.alerting.database import Database, StateLocation
from anchorwatch.alerting.refit_hours import HOUR_MS, hour_of, pack, unpack
from anchorwatch.alerting.refit_rows import FILENAME, PG_SCHEMA, StoredRows
from anchorwatch.policy.refit import MemoryRows, Row
from tests.support.alerting import T0

MINUTE = 60_000
HOUR0 = hour_of(T0)


def _bits(rows: list[Row]) -> list[tuple[int, int, int, bytes]]:
    return [(s, e, c, struct.pack("<d", m)) for s, e, c, m in rows]


def test_an_hour_packs_and_unpacks_bit_for_bit() -> None:
    rng = random.Random(7)
    means = [0.0, -0.0, 1.0, 5e-324, 0.1 + 0.2, math.nextafter(1.0, 0.0)]
    rows = [
        (HOUR0 + m * MINUTE, HOUR0 + (m + 1) * MINUTE, rng.randrange(0, 2**31), mean)
        for m, mean in enumerate(means + [rng.random() for _ in range(54)])
    ]
    rows.append((HOUR0 + 59 * MINUTE + 30_000, HOUR0 + 61 * MINUTE, 1, 0.5))  # runs past
    shuffled = rows[:]
    rng.shuffle(shuffled)
    assert _bits(unpack(HOUR0, pack(HOUR0, shuffled))) == _bits(sorted(rows))
    # A start given twice: the last one counts.
    twice = [(HOUR0, HOUR0 + MINUTE, 1, 0.25), (HOUR0, HOUR0 + MINUTE, 2, 0.75)]
    assert unpack(HOUR0, pack(HOUR0, twice)) == [twice[1]]
    assert unpack(HOUR0, pack(HOUR0, [])) == []


def test_a_window_of_another_hour_or_a_foreign_value_is_refused() -> None:
    with pytest.raises(ValueError, match="does not pack"):
        pack(HOUR0, [(HOUR0 + HOUR_MS, HOUR0 + HOUR_MS + MINUTE, 1, 0.5)])
    with pytest.raises(ValueError, match="does not pack"):
        pack(HOUR0, [(HOUR0, HOUR0 - 1, 1, 0.5)])
    with pytest.raises(ValueError, match="not a packed hour"):
        unpack(HOUR0, b"\x07junk")


def _hours_packed(state: Path | StateLocation) -> int:
    db = Database(state, filename=FILENAME, schema=PG_SCHEMA, create=False)
    try:
        return int(db.execute("SELECT COUNT(*) FROM hours").fetchone()[0])
    finally:
        db.close()


def test_packed_hours_read_as_the_windows_in_memory(
    alerting_state: Path | StateLocation,
) -> None:
    """Twelve hours of windows in order, with late and repeated windows, drops (some cut an
    hour in two), reads and restarts in between."""
    rng = random.Random(35)
    memory, disk = MemoryRows(), StoredRows(alerting_state)
    types = ["a", "b", "c/ü"]
    for minute in range(12 * 60):
        for doc_type in types:
            if rng.random() < 0.1:
                continue  # a gap
            start = T0 + minute * MINUTE
            if rng.random() < 0.05:  # late, or put again: maybe into a packed hour
                start -= rng.randrange(1, 6 * 60) * MINUTE
            row = (start, start + MINUTE, rng.randrange(1, 90), rng.random())
            memory.put(doc_type, row)
            disk.put(doc_type, row)
        if minute % 7 == 0:
            disk.flush()
        if rng.random() < 0.01:
            cut = T0 + rng.randrange(minute + 1) * MINUTE + rng.randrange(MINUTE)
            doc_type = rng.choice(types)
            memory.drop_before(doc_type, cut)
            disk.drop_before(doc_type, cut)
        if rng.random() < 0.03:
            doc_type = rng.choice(types)
            since = T0 + rng.randrange(-5, minute + 1) * MINUTE
            after = None if rng.random() < 0.5 else since + rng.randrange(90) * MINUTE
            assert disk.rows(doc_type, since, after) == memory.rows(doc_type, since, after)
        if minute in (300, 500):
            disk.close()  # a restart: what was packed stays packed, the rest goes on
            disk = StoredRows(alerting_state)
    for _ in range(40):  # hours are packed a few per flush
        disk.flush()
    for doc_type in types:
        assert _bits(disk.rows(doc_type, 0)) == _bits(memory.rows(doc_type, 0))
    assert disk.latest_ends() == memory.latest_ends()
    disk.close()
    # Hours over for KEEP_RECENT_MS were packed (what the drops left of 3 x 9 or so).
    assert _hours_packed(alerting_state) >= 9


def test_a_week_packed_takes_a_fraction_of_a_row_per_window(tmp_path: Path) -> None:
    """The SQLite file of one type's week, packed against a row per window."""
    rng = random.Random(3)
    week = [
        (T0 + m * MINUTE, T0 + (m + 1) * MINUTE, rng.randrange(20, 80), rng.random())
        for m in range(7 * 24 * 60)
    ]
    sizes = {}
    for name, flushes in (("rows", 0), ("packed", 200)):
        disk = StoredRows(tmp_path / name, pack_hours=bool(flushes))
        for n, row in enumerate(week):
            disk.put("contracts", row)
            if n % 600 == 0:
                disk.flush()
        for _ in range(flushes):
            disk.flush()
        disk.close()
        db = Database(tmp_path / name, filename=FILENAME, schema=PG_SCHEMA)
        db.execute("VACUUM")
        db.close()
        sizes[name] = (tmp_path / name / FILENAME).stat().st_size
    assert sizes["packed"] * 2.5 < sizes["rows"], sizes  # 12 against 32 bytes a window
