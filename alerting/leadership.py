"""Which alerting instance leads, when the state lives in PostgreSQL.

Instances on several hosts share one state (``alerting.state_url``); one of them leads (it
consumes verdicts and sends notifications), the others wait as standbys. The lead is a
lease: a row of table ``leader`` with the holder, an epoch and an expiry on the database's
clock (no host's clock is trusted). The leader renews it every third of ``lease_s``; a
standby takes it once it has expired, and the epoch goes up by one.

Fencing: every write transaction of the leader (``Store`` with ``fence``) first reads the
row FOR SHARE and goes on only if the epoch is still its own. A leader that was paused past
its lease (SIGSTOP, a long GC, a network partition) and wakes up finds a newer epoch at its
next write and stops: it commits nothing more, so it marks no notification as being sent
and sends none. The row lock holds a takeover back until a write that passed the check has
committed, so no write of an old leader lands after the new one took over.

A holder paused inside a write transaction (SIGSTOP between two statements) would hold the
schema's write lock and the row for the whole pause, and with them every takeover and
every other instance's writes. So a writer that waits for that lock ends the transaction of
its holder if the holder sits idle inside it and its process holds leases, all of them
ended (``database.Database.begin``; ``pg_terminate_backend``: each connection names its
process in ``application_name``, ``database.SESSION_TAG``, and each lease row its
holder's). The paused holder finds its connection gone when it wakes (``SessionEnded``):
nothing of that transaction committed.

A notification whose send had started when the lead changed hands is ``attempting`` in the
outbox: the new leader reconciles it with Slack and Jira as after a crash (``outbox.py``).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from anchorwatch.alerting.database import (
    DATABASE_ERRORS,
    SESSION_TAG,
    Database,
    StateLocation,
)
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA
from anchorwatch.errors import AnchorwatchError

log = logging.getLogger(__name__)

LEASE: Final = "alerting"

_NOW_MS: Final = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS leader (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
ALTER TABLE leader ADD COLUMN IF NOT EXISTS session TEXT NOT NULL DEFAULT '';
"""


def create_lease_table(db: Database) -> None:
    """The ``leader`` table, unless it is there already: its DDL waits on the schema's write
    lock, which a paused holder may sit on (module doc), and an instance must start anyway."""
    found = db.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'leader' AND column_name = 'session'"
    ).fetchone()
    if found is None:
        db.script(SCHEMA)


class LostLead(AnchorwatchError):
    """This instance no longer leads: another took the lease over."""


class PartitionFenced(LostLead):
    """A write for a verdict partition this instance does not own (any more): nothing of it
    is written; the partition's owner decides and sends for it (``ownership.py``)."""


def instance_name() -> str:
    """This process, as the lease names its holder: host, pid and a random tag (a restarted
    process with a recycled pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Lease:
    """The lease of one instance: ``acquire`` (a standby waits in it), ``renew`` from a
    thread, ``fence`` inside each write transaction, ``release`` at a clean stop."""

    def __init__(
        self,
        location: StateLocation,
        *,
        lease_s: float,
        holder: str | None = None,
        name: str = LEASE,
        shared: tuple[Database, threading.Lock] | None = None,
    ) -> None:
        """``name``: the lease's row (the whole state's lead, or a part of it such as a
        verdict partition, ``ownership.py``); ``shared``: a connection and its lock that
        several leases of one instance use, instead of a connection of this lease's own."""
        if not location.shared:
            raise ValueError("a lease needs the state in PostgreSQL (alerting.state_url)")
        self.location = location
        self.lease_ms = int(lease_s * 1000)
        self.holder = holder or instance_name()
        self.name = name
        self.epoch: int | None = None
        self._owns_db = shared is None
        if shared is None:
            # The heartbeat thread and the stopping one share the connection.
            shared = (Database(location, filename=FILENAME, schema=PG_SCHEMA), threading.Lock())
            create_lease_table(shared[0])
        self._db, self._guard = shared

    def close(self) -> None:
        if self._owns_db:
            with self._guard:
                self._db.close()

    # ------------------------------------------------------------------ taking the lead

    def try_acquire(self) -> bool:
        """Takes the lease if nobody holds it (or it has expired); True if this instance
        leads now (a new epoch)."""
        with self._guard:
            # Without the write lock first: a paused holder may sit on it (module doc).
            left = self._db.execute(
                f"SELECT expires_ms - {_NOW_MS} FROM leader WHERE name = ?",  # noqa: S608
                (self.name,),
            ).fetchone()
            if left is not None and int(left[0]) >= 0:
                return False
        with self._guard, self._db.write() as db:
            db.execute(
                "INSERT INTO leader (name, holder, epoch, expires_ms) VALUES (?, '', 0, 0) "
                "ON CONFLICT DO NOTHING",
                (self.name,),
            )
            row = db.execute(
                "UPDATE leader SET holder = ?, session = ?, epoch = epoch + 1, "  # noqa: S608
                f"expires_ms = {_NOW_MS} + ? "
                f"WHERE name = ? AND expires_ms < {_NOW_MS} RETURNING epoch",
                (self.holder, SESSION_TAG, self.lease_ms, self.name),
            ).fetchone()
        if row is None:
            return False
        self.epoch = int(row[0])
        log.warning(
            "alerting lead taken",
            extra={"lease": self.name, "holder": self.holder, "epoch": self.epoch},
        )
        return True

    def acquire(self, stop: threading.Event, *, poll_s: float | None = None) -> bool:
        """Waits as a standby until this instance leads (True) or ``stop`` is set (False)."""
        poll = poll_s if poll_s is not None else min(1.0, self.lease_ms / 3000)
        announced = False
        while not stop.is_set():
            try:
                if self.try_acquire():
                    return True
            except DATABASE_ERRORS as exc:
                log.warning("alerting state unreachable", extra={"error": str(exc)[:300]})
            if not announced:
                log.info(
                    "alerting standby: another instance leads",
                    extra={"holder": self.holder, "state": self.location.describe()},
                )
                announced = True
            stop.wait(poll)
        return False

    def holder_now(self) -> tuple[str, int, int] | None:
        """(holder, epoch, ms until it expires) as the database has it now."""
        with self._guard:
            row = self._db.execute(
                f"SELECT holder, epoch, expires_ms - {_NOW_MS} FROM leader WHERE name = ?",  # noqa: S608
                (self.name,),
            ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), int(row[2]))

    # ------------------------------------------------------------------ keeping it

    def renew(self) -> bool:
        """Extends the lease; False if it is no longer this instance's."""
        if self.epoch is None:
            return False
        with self._guard, self._db.write() as db:
            row = db.execute(
                f"UPDATE leader SET expires_ms = {_NOW_MS} + ? "  # noqa: S608
                "WHERE name = ? AND holder = ? AND epoch = ? RETURNING epoch",
                (self.lease_ms, self.name, self.holder, self.epoch),
            ).fetchone()
        return row is not None

    def keep(self, stop: threading.Event, on_lost: Callable[[str], None]) -> None:
        """Renews every third of the lease until ``stop``; ``on_lost`` (once) when the lease
        is lost or could not be renewed for a whole lease (another may have taken it)."""
        interval = self.lease_ms / 3000
        last_renewed = _monotonic_ms()
        while not stop.wait(interval):
            try:
                if self.renew():
                    last_renewed = _monotonic_ms()
                    continue
                on_lost(f"another instance took the lead (epoch after {self.epoch})")
                return
            except DATABASE_ERRORS as exc:
                if _monotonic_ms() - last_renewed >= self.lease_ms:
                    on_lost(f"the lease could not be renewed for {self.lease_ms} ms: {exc}")
                    return

    def release(self) -> None:
        """Gives the lead up at once (a clean stop): a standby need not wait for expiry."""
        if self.epoch is None:
            return
        try:
            with self._guard, self._db.write() as db:
                db.execute(
                    "UPDATE leader SET expires_ms = 0 WHERE name = ? AND holder = ? AND epoch = ?",
                    (self.name, self.holder, self.epoch),
                )
        except DATABASE_ERRORS as exc:
            log.warning("alerting lead not released", extra={"error": str(exc)[:300]})
        self.epoch = None

    # ------------------------------------------------------------------ fencing

    def fence(self, db: Database) -> None:
        """Inside a write transaction of the state: LostLead unless this instance still
        leads. FOR SHARE holds a takeover back until the transaction has committed."""
        row = db.execute(
            "SELECT holder, epoch FROM leader WHERE name = ? FOR SHARE", (self.name,)
        ).fetchone()
        if row is None or row[0] != self.holder or int(row[1]) != self.epoch:
            found = "none" if row is None else f"{row[0]} epoch {row[1]}"
            what = "the alerting state" if self.name == LEASE else f"lease {self.name!r}"
            raise LostLead(
                f"this instance ({self.holder} epoch {self.epoch}) no longer leads {what}; "
                f"the lease is {found}"
            )


@dataclass(frozen=True)
class LeaseRow:
    """One lease as the state holds it: its name (``alerting`` for the whole state's lead,
    ``verdicts-<partition>`` for a partition, ``ownership.py``), holder, epoch, and how long
    until it expires by the database's clock (negative: expired)."""

    name: str
    holder: str
    epoch: int
    expires_in_ms: int


def read_leases(location: StateLocation) -> list[LeaseRow]:
    """Every lease of a shared state, by name (``anchorwatch alerting leases``)."""
    db = Database(location, filename=FILENAME, schema=PG_SCHEMA, create=False)
    try:
        if db.execute("SELECT to_regclass('leader')").fetchone()[0] is None:
            return []  # no instance has started on this state
        rows = db.execute(
            f"SELECT name, holder, epoch, expires_ms - {_NOW_MS} FROM leader ORDER BY name"  # noqa: S608
        ).fetchall()
    finally:
        db.close()
    return [LeaseRow(str(n), str(h), int(e), int(left)) for n, h, e, left in rows]


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)
