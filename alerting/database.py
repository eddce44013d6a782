"""Where the alerting service keeps its state, and one connection to it.

Two places, one SQL: a SQLite file in the state directory (the embedded default, one
service) or a PostgreSQL database (``alerting.state_url``: the state outlives the host, so
another instance can take over; see ``leadership.py``). The modules that hold state write
their SQL once, in the dialect both accept (``INSERT ... ON CONFLICT``, ``RETURNING``, ``?``
placeholders); ``Database`` turns it into PostgreSQL's where they differ (placeholders,
column types of the schemas). Each module keeps its tables in its own PostgreSQL schema, as
it keeps them in its own file on SQLite.

A write transaction is exclusive on both: SQLite's ``BEGIN IMMEDIATE`` takes the file's one
write lock, and on PostgreSQL the transaction takes one advisory lock first, so the code
that was written against SQLite's single writer keeps its meaning (read, decide, write
without another writer in between). A read transaction sees one consistent snapshot.
"""

from __future__ import annotations

import logging
import re
import secrets
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import psycopg
from pydantic import SecretStr

from anchorwatch.errors import AnchorwatchError

log = logging.getLogger(__name__)

Dialect = Literal["sqlite", "postgresql"]

#: The advisory lock every PostgreSQL write transaction takes (``Database.write``): this
#: constant ("aw" in ASCII) and one number per schema, so the modules do not wait on each
#: other, as on SQLite, where each has a file of its own.
_WRITE_LOCK = 0x6177

#: This process's connections to PostgreSQL carry it in their ``application_name`` and its
#: lease rows name it, so another instance can end a transaction this process left open
#: in the state should it be stopped inside one past its leases (``_wait_for_lock``).
SESSION_TAG = secrets.token_hex(6)
APPLICATION_PREFIX = "anchorwatch-alerting "
APPLICATION_NAME = APPLICATION_PREFIX + SESSION_TAG


class SessionEnded(psycopg.OperationalError):
    """The connection to PostgreSQL ended inside a transaction (the server restarted, or
    another instance ended it: this one was stopped in it past its leases): nothing of the
    transaction is known to have committed; the next transaction connects again."""


#: The leases of the instances sharing a state (``leadership.py``), and the session each
#: holder's connections name (``SESSION_TAG``).
LEASES_TABLE = "alerting.leader"  # in store.PG_SCHEMA (a test holds them together)
_NOW_MS = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
#: The session holding this schema's write lock, if it sits idle inside its transaction
#: and its process holds leases, all of them ended: an instance stopped mid-write (paused,
#: or cut off), which another has taken over or will.
_END_STALE_HOLDER = f"""
SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid))
FROM pg_locks k JOIN pg_stat_activity a ON a.pid = k.pid
CROSS JOIN LATERAL (SELECT substr(a.application_name, %s) AS tag) t
WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2
  AND k.classid::bigint = %s AND k.objid::bigint = %s
  AND a.pid <> pg_backend_pid() AND starts_with(a.application_name, %s)
  AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
  AND EXISTS (SELECT 1 FROM {LEASES_TABLE} e WHERE e.session = t.tag)
  AND NOT EXISTS (
    SELECT 1 FROM {LEASES_TABLE} e WHERE e.session = t.tag AND e.expires_ms >= {_NOW_MS}
  )
"""  # noqa: S608

#: The errors a connection raises on a bad file, a refused login or broken SQL.
DATABASE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, psycopg.Error)
#: A row that breaks a constraint (a duplicate key).
INTEGRITY_ERRORS: tuple[type[Exception], ...] = (sqlite3.IntegrityError, psycopg.IntegrityError)


class DatabaseError(AnchorwatchError):
    """The state cannot be opened or used (names where it is, never a password)."""


@dataclass(frozen=True)
class StateLocation:
    """The state directory (SQLite files, the single-instance lock) and, when set, the
    PostgreSQL database that holds the state instead."""

    directory: Path
    url: str | None = None
    password: SecretStr | None = None

    @property
    def shared(self) -> bool:
        """True when the state lives in PostgreSQL (instances on other hosts can reach it)."""
        return self.url is not None

    def describe(self) -> str:
        """For messages and logs: the URL without any password, or the directory."""
        return redact(self.url) if self.url else str(self.directory)


def as_location(state: Path | StateLocation) -> StateLocation:
    return state if isinstance(state, StateLocation) else StateLocation(Path(state))


def redact(url: str) -> str:
    """``url`` without a password, if it carries one."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" if parts.username else f"***@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


class Database:
    """One connection to the state: ``filename`` in the state directory on SQLite, the
    tables of PostgreSQL schema ``schema`` otherwise. Used by one thread at a time."""

    def __init__(
        self,
        state: Path | StateLocation,
        *,
        filename: str,
        schema: str,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        create: bool = True,
        timeout_s: float = 60,
    ) -> None:
        self.location = as_location(state)
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ValueError(f"not a schema name: {schema!r}")
        self.schema = schema
        self.dialect: Dialect = "postgresql" if self.location.url else "sqlite"
        self.path = self.location.directory / filename
        # This schema's advisory lock (PostgreSQL): the same number in every process.
        self._lock_key = zlib.crc32(schema.encode()) & 0x7FFFFFFF
        try:
            if self.location.url is None:
                if create:
                    self.location.directory.mkdir(parents=True, exist_ok=True)
                elif not self.path.exists():
                    raise DatabaseError(
                        f"no alerting state at {self.path} (has the service run here?)"
                    )
                self._sqlite = sqlite3.connect(
                    self.path, isolation_level=None, timeout=timeout_s, check_same_thread=False
                )
                self._sqlite.execute("PRAGMA journal_mode=WAL")
                self._sqlite.execute(f"PRAGMA synchronous={synchronous}")
            else:
                self._timeout_s = timeout_s
                self._in_tx = False
                self._pg = self._connect()
                exists = self._pg.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
                ).fetchone()
                if exists is None and not create:
                    raise DatabaseError(
                        f"no alerting state in {self.describe()} (has the service run there?)"
                    )
                if exists is None:
                    # Under the schema's lock: instances starting together would otherwise
                    # race on the catalog ("duplicate key ... pg_namespace_nspname_index").
                    with self._pg.transaction():
                        self._pg.execute(
                            "SELECT pg_advisory_xact_lock(%s, %s)", (_WRITE_LOCK, self._lock_key)
                        )
                        self._pg.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                self._set_session()
        except DATABASE_ERRORS as exc:
            raise DatabaseError(f"alerting state {self.describe()}: {_message(exc)}") from None

    def _connect(self) -> psycopg.Connection[Any]:
        assert self.location.url is not None
        password = self.location.password
        return psycopg.connect(
            self.location.url,
            password=password.get_secret_value() if password else None,
            autocommit=True,
            connect_timeout=max(1, int(self._timeout_s)),
            application_name=APPLICATION_NAME,
        )

    def _set_session(self) -> None:
        self._pg.execute(f"SET search_path TO {self.schema}")
        # A write waits for another's lock at most this long, as SQLite's timeout.
        self._pg.execute(f"SET lock_timeout = '{int(self._timeout_s * 1000)}ms'")

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, made again if it ended between transactions (never inside one:
        the rest of a transaction must not run outside it)."""
        if self._pg.closed:
            if self._in_tx:
                raise SessionEnded("the connection to the alerting state ended in a transaction")
            self._pg = self._connect()
            self._set_session()
        return self._pg

    def _pg_run(self, sql: str, params: Sequence[Any] | None) -> Any:
        conn = self._live()
        try:
            with _ends_as_session_ended(conn):
                return conn.execute(sql, params)
        except SessionEnded:
            if not sql.startswith("BEGIN"):
                raise
        # It had ended while idle (a server restart, say), unnoticed until now: a new
        # transaction may start on a new connection. Only a BEGIN: another statement may
        # have run before the end was noticed, and must not run twice.
        conn = self._live()
        with _ends_as_session_ended(conn):
            return conn.execute(sql, params)

    def describe(self) -> str:
        return self.location.describe() if self.dialect == "postgresql" else str(self.path)

    def close(self) -> None:
        if self.dialect == "sqlite":
            self._sqlite.close()
        else:
            self._pg.close()

    # ------------------------------------------------------------------ statements

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Runs ``sql`` (``?`` placeholders); the cursor, to fetch from."""
        if self.dialect == "sqlite":
            return self._sqlite.execute(sql, params)
        return self._pg_run(_pg_sql(sql), params or None)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self.dialect == "sqlite":
            self._sqlite.executemany(sql, rows)
            return
        rows = list(rows)
        if rows:
            conn = self._live()
            with _ends_as_session_ended(conn), conn.cursor() as cursor:
                cursor.executemany(_pg_sql(sql), rows)

    def script(self, ddl: str) -> None:
        """Creates tables and indexes (``CREATE ... IF NOT EXISTS``), in SQLite's words;
        on PostgreSQL with its types (64-bit integers, identity columns, doubles)."""
        if self.dialect == "sqlite":
            self._sqlite.executescript(ddl)
        else:
            with self.write():
                self._pg_run(_pg_ddl(ddl), None)

    # ------------------------------------------------------------------ transactions

    @property
    def in_transaction(self) -> bool:
        if self.dialect == "sqlite":
            return self._sqlite.in_transaction
        return self._in_tx

    @contextmanager
    def write(self) -> Iterator[Database]:
        """One exclusive write transaction: committed at the end, rolled back on an error."""
        self.begin()
        try:
            yield self
        except BaseException:
            self._end("ROLLBACK")
            raise
        self._end("COMMIT")

    def begin(self) -> None:
        """Opens an exclusive write transaction, left open until ``commit`` (``write``, or
        writes gathered over several calls, as the refit history does)."""
        if self.dialect == "sqlite":
            self._sqlite.execute("BEGIN IMMEDIATE")
            return
        self._pg_run("BEGIN", None)
        self._in_tx = True
        try:
            taken = self._pg_run(
                "SELECT pg_try_advisory_xact_lock(%s, %s)", (_WRITE_LOCK, self._lock_key)
            ).fetchone()[0]
        except BaseException:
            self._end("ROLLBACK")
            raise
        if not taken:
            self._wait_for_lock()

    def _wait_for_lock(self) -> None:
        """The write lock is another's: waited for a second at a time (at most the
        connection's timeout in all), and between the waits, if its holder is an instance
        stopped inside its transaction whose leases have all ended, that transaction is
        ended (module ``leadership``): a paused instance must not hold the others up."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                self._pg_run("SET LOCAL lock_timeout = '1s'", None)
                self._pg_run("SELECT pg_advisory_xact_lock(%s, %s)", (_WRITE_LOCK, self._lock_key))
                self._pg_run(f"SET LOCAL lock_timeout = '{int(self._timeout_s * 1000)}ms'", None)
                return
            except psycopg.errors.LockNotAvailable:
                self._end("ROLLBACK")
                if time.monotonic() >= deadline:
                    raise
                self._end_stale_holder()
                self._pg_run("BEGIN", None)
                self._in_tx = True
            except BaseException:
                self._end("ROLLBACK")
                raise

    def _end_stale_holder(self) -> None:
        try:
            if self._pg_run("SELECT to_regclass(%s)", (LEASES_TABLE,)).fetchone()[0] is None:
                return  # no instance holds a lease on this state: nobody to end
            ended = self._pg_run(
                _END_STALE_HOLDER,
                (len(APPLICATION_PREFIX) + 1, _WRITE_LOCK, self._lock_key, APPLICATION_PREFIX),
            ).fetchone()[0]
        except psycopg.Error as exc:  # not allowed (another role), say: waited for instead
            log.warning("stale lock holder not ended", extra={"error": str(exc)[:300]})
            return
        if ended:
            log.warning(
                "ended the open transaction of an instance whose leases have ended",
                extra={"schema": self.schema, "sessions": int(ended)},
            )

    def commit(self) -> None:
        if self.in_transaction:
            self._end("COMMIT")

    def _end(self, word: Literal["COMMIT", "ROLLBACK"]) -> None:
        """Ends the open transaction. A ROLLBACK on a connection that has ended is done (the
        server dropped the transaction); a COMMIT there raises ``SessionEnded``."""
        if self.dialect == "sqlite":
            self._sqlite.execute(word)
            return
        try:
            if word == "COMMIT" or not self._pg.closed:
                self._pg_run(word, None)
        finally:
            self._in_tx = False

    @contextmanager
    def read(self) -> Iterator[Database]:
        """One consistent view for several reads; nested uses join the outer one."""
        if self.in_transaction:
            yield self
            return
        if self.dialect == "sqlite":
            self._sqlite.execute("BEGIN DEFERRED")
        else:
            self._pg_run("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", None)
            self._in_tx = True
        try:
            yield self
        finally:
            self._end("ROLLBACK")  # read only: nothing to commit


@contextmanager
def _ends_as_session_ended(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A statement that failed because the connection ended raises ``SessionEnded``."""
    try:
        yield
    except psycopg.OperationalError as exc:
        if conn.closed and not isinstance(exc, SessionEnded):
            message = f"the connection to the alerting state ended: {_message(exc)}"
            raise SessionEnded(message) from exc
        raise


def _message(exc: Exception) -> str:
    """An error's text, first line only: psycopg's may go on with a DETAIL or HINT."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled). Our SQL has no
    ``?`` inside string literals; a statement that did would be refused by the count of
    parameters, not run wrongly."""
    return sql.replace("%", "%%").replace("?", "%s")


_DDL_WORDS = [
    (re.compile(r"\bINTEGER PRIMARY KEY( AUTOINCREMENT)?\b"),
     "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\)\s*WITHOUT ROWID\s*;"), ");"),
]  # fmt: skip


@lru_cache(maxsize=32)
def _pg_ddl(ddl: str) -> str:
    """SQLite's table definitions in PostgreSQL's types: its INTEGER is 64 bits (epoch
    milliseconds do not fit PostgreSQL's), its rowid key (INTEGER PRIMARY KEY) an identity
    column."""
    for pattern, replacement in _DDL_WORDS:
        ddl = pattern.sub(replacement, ddl)
    return ddl
