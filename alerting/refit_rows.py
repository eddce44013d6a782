"""The refit history's windows on disk: a SQLite file of its own next to the service's state,
or schema ``alerting_refit`` of its PostgreSQL database (``database.py``).

A week of one-minute windows is ~10,000 per doc type; held in Python objects that is about
2 MB per type, 20 GB for 10,000 types. Here each window is one row of a table keyed by
(doc type, start), read back per type only when a refit of that type is due.

The rows are derived data: what was judged, re-readable from the verdicts topic. They are
written in the engine's batches and committed (``flush``) just before the batch's own
commit in the service's store, so every verdict whose offset the store has committed has
its window here; a crash in between only repeats a batch, whose windows replace themselves.
``synchronous=NORMAL`` in WAL mode: safe from corruption, no fsync per batch; a power loss
may lose the last commits, which shortens the history a refit sees, and nothing else.

An hour over for more than ``KEEP_RECENT_MS`` is folded into one row of table ``hours``
(``refit_hours.pack``: lossless, about a third of the rows' size), a few type-hours in each
flush, in the same transaction as the batch's windows. Reads merge both; a window put
again into an hour packed already (a replayed batch, a late verdict) is a row of its own
again, and that row counts.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Final

from anchorwatch.alerting.database import DATABASE_ERRORS, Database, DatabaseError, StateLocation
from anchorwatch.alerting.refit_hours import HOUR_MS, hour_of, pack, unpack
from anchorwatch.errors import AnchorwatchError
from anchorwatch.policy.incident_types import Incident
from anchorwatch.policy.refit import RefitHistory, Row

FILENAME: Final = "refit-windows.sqlite3"
PG_SCHEMA: Final = "alerting_refit"

_SCHEMA: Final = """
-- Per doc type: a short id for the rows (a row's size does not grow with the type's name)
-- and the latest window end put, read at start without scanning the windows.
CREATE TABLE IF NOT EXISTS doc_types (
    type_id INTEGER PRIMARY KEY,
    doc_type TEXT NOT NULL UNIQUE,
    latest_end_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS windows (
    type_id INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    request_count INTEGER NOT NULL,
    mean_drift REAL NOT NULL,
    PRIMARY KEY (type_id, start_ms)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hours (
    type_id INTEGER NOT NULL,
    hour_ms INTEGER NOT NULL,
    windows INTEGER NOT NULL,
    packed BLOB NOT NULL,
    PRIMARY KEY (type_id, hour_ms)
) WITHOUT ROWID;
"""

#: Hours that ended less than this before a type's latest window stay rows (late verdicts
#: and replays land there without unpacking anything).
KEEP_RECENT_MS: Final = 2 * HOUR_MS
#: Per flush: types looked at, and type-hours packed at most (bounded work per batch).
CHECK_PER_FLUSH: Final = 64
PACK_PER_FLUSH: Final = 4

_PUT_HOUR: Final = (
    "INSERT INTO hours (type_id, hour_ms, windows, packed) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (type_id, hour_ms) DO UPDATE SET windows = excluded.windows, "
    "packed = excluded.packed"
)


_PUT: Final = (
    "INSERT INTO windows (type_id, start_ms, end_ms, request_count, mean_drift) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (type_id, start_ms) DO UPDATE SET "
    "end_ms = excluded.end_ms, request_count = excluded.request_count, "
    "mean_drift = excluded.mean_drift"
)


class RefitRowsError(AnchorwatchError):
    pass


class StoredRows:
    """``anchorwatch.policy.refit.WindowRows`` in ``state_dir/refit-windows.sqlite3`` (or
    PostgreSQL, see the module).

    Writes go into one open transaction until ``flush``; reads on this connection see them.
    One thread at a time (the consumer thread, which owns the engine)."""

    def __init__(self, state: Path | StateLocation, *, pack_hours: bool = True) -> None:
        """``pack_hours``: False keeps a row per window (the benchmark's "as before")."""
        try:
            self._db = Database(state, filename=FILENAME, schema=PG_SCHEMA, synchronous="NORMAL")
            self._db.script(_SCHEMA)
            rows = self._db.execute(
                "SELECT type_id, doc_type, latest_end_ms FROM doc_types"
            ).fetchall()
        except DatabaseError as exc:
            raise RefitRowsError(f"refit history: {exc}") from None
        except DATABASE_ERRORS as exc:
            raise RefitRowsError(f"refit history {self._db.describe()}: {exc}") from None
        self.path = self._db.path
        self._ids: dict[str, int] = {}
        self._latest: dict[str, int] = {}
        for type_id, doc_type, latest in rows:
            self._ids[doc_type], self._latest[doc_type] = type_id, latest
        self._latest_dirty: set[str] = set()
        self._puts: list[tuple[int, int, int, int, float]] = []  # not yet written
        # Per type id: every hour before this is packed (absent: not known yet).
        self._packed_to: dict[int, int] = {
            int(t): int(h) + HOUR_MS
            for t, h in self._db.execute("SELECT type_id, MAX(hour_ms) FROM hours GROUP BY type_id")
        }
        self._pack_hours = pack_hours
        self._to_check: deque[str] = deque(self._ids)

    def close(self) -> None:
        self.flush()
        self._db.close()

    def _write(self) -> Database:
        if not self._db.in_transaction:
            self._db.begin()
        return self._db

    def _id(self, doc_type: str) -> int:
        type_id = self._ids.get(doc_type)
        if type_id is None:
            # Another instance sharing the work may have put the type since this one read
            # the ids: its id is taken, not a second one.
            cursor = self._write().execute(
                "INSERT INTO doc_types (doc_type, latest_end_ms) VALUES (?, ?) ON CONFLICT "
                "(doc_type) DO UPDATE SET doc_type = excluded.doc_type RETURNING type_id",
                (doc_type, -1),
            )
            type_id = self._ids[doc_type] = int(cursor.fetchone()[0])
            self._latest[doc_type] = -1
            self._to_check.append(doc_type)
        return type_id

    # ------------------------------------------------------------------ WindowRows

    def put(self, doc_type: str, row: Row) -> None:
        # Gathered and written with one executemany before anything reads or deletes
        # (``_write_puts``): a statement per window cost about 2 µs more per verdict.
        self._puts.append((self._id(doc_type), *row))
        if row[1] > self._latest[doc_type]:
            self._latest[doc_type] = row[1]
            self._latest_dirty.add(doc_type)

    def _write_puts(self) -> None:
        """The windows put since the last call, into the open transaction, in order (a
        start put twice: the last one counts, as one statement each would have it)."""
        if self._puts:
            self._write().executemany(_PUT, self._puts)
            self._puts = []

    def drop_before(self, doc_type: str, start_ms: int) -> None:
        type_id = self._ids.get(doc_type)
        if type_id is not None:
            self._write_puts()
            db = self._write()
            db.execute(
                "DELETE FROM windows WHERE type_id = ? AND start_ms < ?", (type_id, start_ms)
            )
            boundary = hour_of(start_ms)
            db.execute("DELETE FROM hours WHERE type_id = ? AND hour_ms < ?", (type_id, boundary))
            if boundary < start_ms:  # the hour the cut falls in keeps its later windows
                kept = [r for r in self._packed(type_id, boundary, boundary) if r[0] >= start_ms]
                self._put_hour(type_id, boundary, kept)

    def rows(self, doc_type: str, since_ms: int, ended_after_ms: int | None = None) -> list[Row]:
        type_id = self._ids.get(doc_type)
        if type_id is None:
            return []
        self._write_puts()
        after = -(2**62) if ended_after_ms is None else ended_after_ms
        rows: list[Row] = self._db.execute(
            "SELECT start_ms, end_ms, request_count, mean_drift FROM windows "
            "WHERE type_id = ? AND start_ms >= ? AND end_ms > ? ORDER BY start_ms",
            (type_id, since_ms, after),
        ).fetchall()
        packed = [
            r
            for r in self._packed(type_id, hour_of(since_ms), None)
            if r[0] >= since_ms and r[1] > after
        ]
        if not packed:
            return rows
        merged = {r[0]: r for r in packed}
        merged.update((r[0], r) for r in rows)  # a row put since it was packed counts
        return [merged[start] for start in sorted(merged)]

    def count(self) -> int:
        """Windows held (a window put again into a packed hour counts twice)."""
        self._write_puts()
        rows = int(self._db.execute("SELECT COUNT(*) FROM windows").fetchone()[0])
        hours = self._db.execute("SELECT COALESCE(SUM(windows), 0) FROM hours").fetchone()[0]
        return rows + int(hours)

    # ------------------------------------------------------------------ packed hours

    def _packed(self, type_id: int, first_hour: int, last_hour: int | None) -> list[Row]:
        found = self._db.execute(
            "SELECT hour_ms, packed FROM hours WHERE type_id = ? AND hour_ms >= ? "
            "AND hour_ms <= ? ORDER BY hour_ms",
            (type_id, first_hour, 2**62 if last_hour is None else last_hour),
        ).fetchall()
        return [row for hour, blob in found for row in unpack(int(hour), bytes(blob))]

    def _put_hour(self, type_id: int, hour_ms: int, rows: list[Row]) -> None:
        db = self._write()
        if rows:
            db.execute(_PUT_HOUR, (type_id, hour_ms, len(rows), pack(hour_ms, rows)))
        else:
            db.execute("DELETE FROM hours WHERE type_id = ? AND hour_ms = ?", (type_id, hour_ms))

    def _pack_some(self) -> None:
        """Folds a few hours that are over into ``hours`` (module doc), round robin over
        the types, into the open transaction."""
        budget = PACK_PER_FLUSH
        for _ in range(min(CHECK_PER_FLUSH, len(self._to_check))):
            doc_type = self._to_check[0]
            self._to_check.rotate(-1)
            type_id = self._ids[doc_type]
            until = hour_of(self._latest[doc_type] - KEEP_RECENT_MS)  # hours before: over
            while budget > 0:
                hour = self._next_hour(type_id, until)
                if hour is None:
                    break
                rows = self._db.execute(
                    "SELECT start_ms, end_ms, request_count, mean_drift FROM windows "
                    "WHERE type_id = ? AND start_ms >= ? AND start_ms < ? ORDER BY start_ms",
                    (type_id, hour, hour + HOUR_MS),
                ).fetchall()
                if rows:
                    earlier = self._packed(type_id, hour, hour)
                    self._put_hour(type_id, hour, [*earlier, *rows])
                    self._write().execute(
                        "DELETE FROM windows WHERE type_id = ? AND start_ms >= ? AND start_ms < ?",
                        (type_id, hour, hour + HOUR_MS),
                    )
                    budget -= 1
                self._packed_to[type_id] = hour + HOUR_MS
            if budget == 0:
                return

    def _next_hour(self, type_id: int, until: int) -> int | None:
        """The next hour of the type to pack, if it is before ``until``."""
        hour = self._packed_to.get(type_id)
        if hour is None or hour < until:
            # Where its rows begin (after a gap, or the first time): skip empty hours.
            first = self._db.execute(
                "SELECT MIN(start_ms) FROM windows WHERE type_id = ? AND start_ms >= ?",
                (type_id, hour or -(2**62)),
            ).fetchone()[0]
            hour = None if first is None else max(hour or -(2**62), hour_of(int(first)))
        if hour is None or hour >= until:
            return None
        return hour

    def latest_ends(self) -> dict[str, int]:
        return {d: end for d, end in self._latest.items() if end >= 0}

    def flush(self) -> None:
        """Commit what was written since the last flush (with a few hours packed)."""
        self._write_puts()
        if self._pack_hours and self._to_check:
            self._pack_some()
        if self._latest_dirty:
            self._write().executemany(
                "UPDATE doc_types SET latest_end_ms = ? WHERE type_id = ?",
                [(self._latest[d], self._ids[d]) for d in self._latest_dirty],
            )
            self._latest_dirty = set()
        self._db.commit()

    def size_bytes(self) -> int:
        """The file and its write-ahead log on disk (PostgreSQL: the tables, with indexes)."""
        if self._db.dialect == "postgresql":
            return int(
                self._db.execute(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = ? AND c.relkind = 'r'",
                    (PG_SCHEMA,),
                ).fetchone()[0]
            )
        wal = self.path.with_name(self.path.name + "-wal")
        return sum(p.stat().st_size for p in (self.path, wal) if p.exists())


def refit_incident(history: RefitHistory, incident: Incident) -> None:
    """An incident's span (or, resolved "adapted", its shift) for the refit history."""
    history.incident(
        incident.doc_type,
        incident.incident_id,
        first_breach_ms=incident.first_breach_ms,
        resolved_at_ms=incident.resolved_at_ms,
        resolution=incident.resolution,
    )
