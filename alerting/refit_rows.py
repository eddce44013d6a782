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
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from anchorwatch.alerting.database import DATABASE_ERRORS, Database, DatabaseError, StateLocation
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
"""


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

    def __init__(self, state: Path | StateLocation) -> None:
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
            self._write().execute(
                "DELETE FROM windows WHERE type_id = ? AND start_ms < ?", (type_id, start_ms)
            )

    def rows(self, doc_type: str, since_ms: int, ended_after_ms: int | None = None) -> list[Row]:
        type_id = self._ids.get(doc_type)
        if type_id is None:
            return []
        self._write_puts()
        rows: list[Row] = self._db.execute(
            "SELECT start_ms, end_ms, request_count, mean_drift FROM windows "
            "WHERE type_id = ? AND start_ms >= ? AND end_ms > ? ORDER BY start_ms",
            (type_id, since_ms, -(2**62) if ended_after_ms is None else ended_after_ms),
        ).fetchall()
        return rows

    def count(self) -> int:
        self._write_puts()
        return int(self._db.execute("SELECT COUNT(*) FROM windows").fetchone()[0])

    def latest_ends(self) -> dict[str, int]:
        return {d: end for d, end in self._latest.items() if end >= 0}

    def flush(self) -> None:
        """Commit what was written since the last flush."""
        self._write_puts()
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
