"""The refit history's windows are written in one statement per flush (or before the next
read or delete), not one per window: still, every read answers as the windows in memory
do, whatever ran in between, and nothing of them is on disk for another reader before the
flush that commits them."""

from __future__ import annotations

import random
from pathlib import Path

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.policy.refit import MemoryRows, Row
from tests.support.alerting import T0

MINUTE = 60_000


def test_puts_gathered_over_many_calls_read_as_in_memory(
    alerting_state: Path | StateLocation,
) -> None:
    """Long runs of puts (the same start twice among them) and drops between reads."""
    rng = random.Random(35)
    memory, disk = MemoryRows(), StoredRows(alerting_state)
    for _ in range(3000):
        doc_type = rng.choice(["a", "b", "c/ü"])
        op = rng.random()
        if op < 0.8:
            start = T0 + rng.randrange(60) * MINUTE
            row = (start, start + MINUTE, rng.randrange(1, 90), rng.random())
            memory.put(doc_type, row)
            disk.put(doc_type, row)
        elif op < 0.9:
            cut = T0 + rng.randrange(60) * MINUTE
            memory.drop_before(doc_type, cut)
            disk.drop_before(doc_type, cut)
        elif op < 0.92:
            disk.flush()
        elif op < 0.97:
            since = T0 + rng.randrange(-5, 60) * MINUTE
            assert disk.rows(doc_type, since) == memory.rows(doc_type, since)
        else:
            assert disk.count() == memory.count()
    for doc_type in ("a", "b", "c/ü"):
        assert disk.rows(doc_type, 0) == memory.rows(doc_type, 0)
    assert disk.latest_ends() == memory.latest_ends()
    disk.close()


def _read(state: Path, doc_type: str) -> list[Row]:
    """What another process sees (a reader opened now: it learns the types at its start)."""
    other = StoredRows(state)
    try:
        return other.rows(doc_type, 0)
    finally:
        other.close()


def test_windows_reach_other_readers_with_the_flush_and_not_before(tmp_path: Path) -> None:
    disk = StoredRows(tmp_path)
    disk.flush()  # the types' ids are committed with the first flush
    disk.put("a", (T0, T0 + MINUTE, 5, 0.5))
    disk.put("a", (T0, T0 + MINUTE, 7, 0.25))  # replaced: the last one counts
    disk.put("b", (T0, T0 + MINUTE, 3, 0.75))
    assert _read(tmp_path, "a") == []
    disk.flush()
    assert _read(tmp_path, "a") == [(T0, T0 + MINUTE, 7, 0.25)]
    assert _read(tmp_path, "b") == [(T0, T0 + MINUTE, 3, 0.75)]
    disk.put("a", (T0 + MINUTE, T0 + 2 * MINUTE, 1, 0.5))
    assert len(_read(tmp_path, "a")) == 1
    disk.close()  # a close flushes
    assert [r[0] for r in _read(tmp_path, "a")] == [T0, T0 + MINUTE]
