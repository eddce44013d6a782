"""The silences of the state (the ``silences`` table of ``store_schema.py``).

Its own connection, apart from ``Store``: the CLI, the HTTP API and the engine each open a
book on the same state (on SQLite, WAL lets them read while the service writes). Adding or
expiring a silence is one short transaction, logged; the engine reads the active ones once a
batch.
"""

from __future__ import annotations

import logging
from dataclasses import astuple, fields, replace
from pathlib import Path
from typing import Any

from anchorwatch.alerting.database import Database, DatabaseError, StateLocation
from anchorwatch.alerting.silences import Silence, SilenceError
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA, Store, StoreError

log = logging.getLogger(__name__)

_FIELDS = [f.name for f in fields(Silence)]
_SELECT = f"SELECT {', '.join(_FIELDS)} FROM silences"  # noqa: S608  (our own names)


class SilenceBook:
    def __init__(self, state: Path | StateLocation) -> None:
        # Opening the Store checks the state's schema (and says what to do if it is old).
        Store(state, create=False).close()
        try:
            self._db = Database(state, filename=FILENAME, schema=PG_SCHEMA, create=False)
        except DatabaseError as exc:
            raise StoreError(str(exc)) from None
        self.path = self._db.path

    def close(self) -> None:
        self._db.close()

    def add(self, silence: Silence) -> None:
        with self._db.write():
            insert_silence(self._db, silence)
        log_added(silence)

    def get(self, silence_id: str) -> Silence | None:
        row = self._db.execute(_SELECT + " WHERE silence_id = ?", (silence_id,)).fetchone()
        return _silence(row) if row else None

    def expire_resolved(self, now_ms: int) -> int:
        """Ends the silences made "until resolved" whose incident has resolved; how many."""
        with self._db.write():
            ended = self._db.execute(
                "UPDATE silences SET expired_ms = ?, expired_by = 'resolved' WHERE "
                "incident_id IS NOT NULL AND ends_ms > ? AND expired_ms IS NULL AND incident_id "
                "IN (SELECT incident_id FROM incidents WHERE state = 'resolved')",
                (now_ms, now_ms),
            ).rowcount
        if ended:
            log.info("silences ended: their incidents resolved", extra={"silences": ended})
        return int(ended)

    def expire(self, silence_id: str, *, by: str, now_ms: int) -> Silence:
        """Ends a silence now; SilenceError if there is none of that id or it has ended."""
        with self._db.write():
            found = self.get(silence_id)
            if found is None:
                raise SilenceError(f"silence_id: no silence {silence_id!r}")
            if not found.active(now_ms) and found.starts_ms <= now_ms:
                raise SilenceError(f"silence_id: silence {silence_id} has already ended")
            self._db.execute(
                "UPDATE silences SET expired_ms = ?, expired_by = ? WHERE silence_id = ?",
                (now_ms, by, silence_id),
            )
        log.info("silence expired", extra={"silence_id": silence_id, "expired_by": by})
        return replace(found, expired_ms=now_ms, expired_by=by)

    def active(self, now_ms: int) -> list[Silence]:
        rows = self._db.execute(
            _SELECT + " WHERE starts_ms <= ? AND ends_ms > ? AND (expired_ms IS NULL OR "
            "expired_ms > ?) ORDER BY created_ms",
            (now_ms, now_ms, now_ms),
        ).fetchall()
        return [_silence(r) for r in rows]

    def all(self, *, limit: int = 200) -> list[Silence]:
        """Newest first, ended ones included."""
        rows = self._db.execute(_SELECT + " ORDER BY created_ms DESC LIMIT ?", (limit,))
        return [_silence(r) for r in rows.fetchall()]


def insert_silence(db: Database, silence: Silence) -> None:
    """The INSERT of a silence, inside the caller's transaction."""
    marks = ", ".join("?" * len(_FIELDS))
    db.execute(
        f"INSERT INTO silences ({', '.join(_FIELDS)}) VALUES ({marks})",  # noqa: S608
        astuple(silence),
    )


def log_added(silence: Silence) -> None:
    log.info(
        "silence added",
        extra={
            "silence_id": silence.silence_id,
            "doc_type": silence.doc_type,
            "severity": silence.severity,
            "ends_ms": silence.ends_ms,
            "author": silence.author,
            "reason": silence.reason,
            "incident_id": silence.incident_id,
        },
    )


def _silence(row: tuple[Any, ...]) -> Silence:
    return Silence(**dict(zip(_FIELDS, row, strict=True)))
