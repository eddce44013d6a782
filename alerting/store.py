"""The alerting service's durable state: one SQLite file (stdlib sqlite3, WAL mode) in the
state directory, or schema ``alerting`` of a PostgreSQL database (``database.py``).

What a consumed batch of verdicts changes is written in ONE transaction (``commit_batch``):
the detector's state of the doc types it touched, the next offset of every verdicts
partition it read, each type's processed high-water mark and recent windows, the ids of
recent verdicts, the incidents, and the notifications those changes call for (the outbox).
A crash before that commit loses the whole batch, which is then consumed again and decided
the same way; after it, nothing is decided twice, because the offsets moved with it.

The outbox holds one row per (incident, seq, integration): ``pending`` until a sender takes
it, ``attempting`` once a send may have reached the remote side (committed *before* the
request goes out, so a crash in between leaves a row that is reconciled, not blindly
re-sent), then ``done`` (with an outcome: sent, reconciled, suppressed, superseded, dry_run)
or ``failed`` (a permanent error). Senders take, per integration, only the lowest unfinished
seq of each incident: updates never overtake the message they belong to.

Each thread opens its own ``Store`` (a connection is not shared between threads); WAL lets
the ``incidents`` command read while the service writes. With ``fence`` (``leadership.py``),
every write transaction first checks that this instance still leads: one that has lost the
lead (paused past its lease, say) writes nothing more, and so sends nothing more. With the
work split among instances (``guard``, ``ownership.py``), each write is fenced by the leases
of the verdict partitions it writes for, and senders take only their own partitions' entries.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from anchorwatch.alerting.database import (
    DATABASE_ERRORS,
    Database,
    DatabaseError,
    StateLocation,
    as_location,
)
from anchorwatch.alerting.store_records import (
    FOLLOW_UPS,
    Action,
    BatchWrite,
    DocTypeRow,
    IncidentListing,
    IncidentRow,
    Integration,
    NewEntry,
    OutboxEntry,
    PartitionGuard,
    Refs,
    Restored,
    Status,
)
from anchorwatch.alerting.store_schema import (
    DUE,
    ENTRY_PARTITION,
    MIGRATIONS,
    POSTGRESQL_EXTRA,
    SCHEMA,
    SCHEMA_VERSION,
)

FILENAME: Final = "alerting.sqlite3"

#: PostgreSQL schema of the store's tables.
PG_SCHEMA: Final = "alerting"

#: What runs inside a transaction once it is written, before it commits.
Hook = Callable[[], None]

#: Checks, inside a write transaction, that this instance may still write (raises if not).
Fence = Callable[[Database], None]


def _nothing() -> None:
    return None


class StoreError(DatabaseError):
    """The state cannot be used (missing, from a newer version, or corrupt)."""


# The records live in store_records.py; importers name them from here.
__all__ = [
    "FILENAME",
    "FOLLOW_UPS",
    "Action",
    "BatchWrite",
    "DocTypeRow",
    "IncidentListing",
    "IncidentRow",
    "Integration",
    "NewEntry",
    "OutboxEntry",
    "Refs",
    "Restored",
    "Status",
    "Store",
    "StoreError",
]


# --------------------------------------------------------------------------- the store


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


class Store:
    def __init__(
        self,
        state: Path | StateLocation,
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        create: bool = True,
        fence: Fence | None = None,
        guard: PartitionGuard | None = None,
    ) -> None:
        self.location = as_location(state)
        try:
            self._db = Database(
                self.location,
                filename=FILENAME,
                schema=PG_SCHEMA,
                synchronous=synchronous,
                create=create,
            )
        except DatabaseError as exc:
            raise StoreError(str(exc)) from None
        self.path = self._db.path
        self._fence = fence
        self._guard = guard
        try:
            if create:
                self._db.script(SCHEMA)
                if self._db.dialect == "postgresql":
                    with self._db.write():
                        for statement in POSTGRESQL_EXTRA:
                            self._db.execute(statement)
                with self._db.write():
                    self._check_version(create)
            else:
                self._check_version(create)
        except DATABASE_ERRORS as exc:
            raise StoreError(f"alerting state {self._db.describe()}: {exc}") from None

    @property
    def dialect(self) -> str:
        return self._db.dialect

    def close(self) -> None:
        self._db.close()

    def _check_version(self, create: bool) -> None:
        where = self._db.describe()
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except DATABASE_ERRORS:
            if create:
                raise
            row = None
        if row is None and create:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif row is None or int(row[0]) > SCHEMA_VERSION:
            found = "no" if row is None else row[0]
            raise StoreError(
                f"alerting state {where} has schema {found}, this version reads up to "
                f"{SCHEMA_VERSION}: run the newer anchorwatch"
            )
        elif int(row[0]) < SCHEMA_VERSION:
            if not create:
                raise StoreError(
                    f"alerting state {where} has schema {row[0]}: start the service once "
                    f"to bring it to {SCHEMA_VERSION}"
                )
            for version in range(int(row[0]), SCHEMA_VERSION):
                for statement in MIGRATIONS[version]:
                    if self._db.dialect == "postgresql":
                        statement = statement.replace("ADD COLUMN", "ADD COLUMN IF NOT EXISTS")
                        self._db.execute(statement)
                        continue
                    try:
                        self._db.execute(statement)
                    except DATABASE_ERRORS as exc:
                        # A table SCHEMA created just now has its newest columns already.
                        if "duplicate column" not in str(exc):
                            raise
            self._db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )

    @contextmanager
    def _tx(
        self,
        before_commit: Hook = _nothing,
        *,
        partitions: Collection[int] = (),
        entry_ids: Collection[int] = (),
    ) -> Iterator[Database]:
        """One exclusive write transaction, fenced (by the partitions it writes for, and
        those of the outbox entries it changes, when the work is split); ``before_commit``
        runs once everything is written, before the COMMIT (the crash trials kill the
        process there)."""
        with self._db.write() as db:
            if self._fence is not None:
                self._fence(db)
            if self._guard is not None:
                touched = set(partitions)
                if entry_ids:
                    touched |= self._entry_partitions(db, entry_ids)
                self._guard.fence_partitions(db, touched)
            yield db
            before_commit()

    @staticmethod
    def _entry_partitions(db: Database, entry_ids: Collection[int]) -> set[int]:
        marks = ",".join("?" * len(entry_ids))
        sql = f"SELECT DISTINCT {ENTRY_PARTITION} FROM outbox o JOIN incidents i "  # noqa: S608
        rows = db.execute(sql + f"USING (incident_id) WHERE o.id IN ({marks})", list(entry_ids))
        return {int(r[0]) for r in rows}

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One consistent view for several reads, so a writer's commit (say an incident's
        references with its delivery marked done) is seen whole or not at all. Nested uses
        join the outer one."""
        with self._db.read():
            yield

    # ----------------------------------------------------------------- restart

    def restore(self, partitions: Collection[int] | None = None) -> Restored:
        """Everything, or (the work split) what the types of ``partitions`` need."""
        db = self._db
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        offsets = {(t, p): o for t, p, o in db.execute("SELECT * FROM offsets")}
        states = {d: orjson.loads(s) for d, s in db.execute("SELECT * FROM tracker_state")}
        doc_types = {
            d: DocTypeRow(d, start, orjson.loads(history), partition)
            for d, start, history, partition in db.execute(
                "SELECT doc_type, last_window_start_ms, history, partition FROM doc_types"
            )
        }
        open_rows = [_incident(r) for r in db.execute(_SELECT_INCIDENTS + " WHERE state = 'open'")]
        if partitions is not None:
            keep = set(partitions)
            offsets = {k: o for k, o in offsets.items() if k[1] in keep}
            doc_types = {d: r for d, r in doc_types.items() if r.partition in keep}
            states = {d: s for d, s in states.items() if d in doc_types}
            open_rows = [r for r in open_rows if r.doc_type in doc_types]
        return Restored(
            offsets, meta.get("policy_version"), states, doc_types, open_rows, dict(meta)
        )

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next offset of a verdicts partition, as the state has it now."""
        row = self._db.execute(
            "SELECT next_offset FROM offsets WHERE topic = ? AND partition = ?", (topic, partition)
        ).fetchone()
        return None if row is None else int(row[0])

    def seen_verdicts(self, verdict_ids: Iterable[str]) -> set[str]:
        ids = list(verdict_ids)
        found: set[str] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(
                r[0]
                for r in self._db.execute(
                    f"SELECT verdict_id FROM recent_verdicts WHERE verdict_id IN ({marks})",  # noqa: S608
                    chunk,
                )
            )
        return found

    def incident(self, incident_id: str) -> IncidentRow | None:
        return next(iter(self.incidents_where("incident_id = ?", (incident_id,))), None)

    def incidents_where(self, where: str, params: Sequence[Any] = ()) -> list[IncidentRow]:
        """The rows matching ``where``: a condition of our own, values as parameters."""
        rows = self._db.execute(f"{_SELECT_INCIDENTS} WHERE {where}", params)
        return [_incident(r) for r in rows]

    # ----------------------------------------------------------------- the batch

    def commit_batch(
        self, batch: BatchWrite, *, keep_verdict_ids: int, before_commit: Hook = _nothing
    ) -> None:
        with self._tx(before_commit, partitions=batch.partitions) as db:
            for check in batch.checks:  # e.g. the group epoch (``group_epoch.py``)
                check(db)
            db.executemany(
                "INSERT INTO offsets (topic, partition, next_offset) VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
                [(t, p, o) for (t, p), o in batch.offsets.items()],
            )
            if batch.policy_version is not None:
                batch.meta["policy_version"] = batch.policy_version
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                list(batch.meta.items()),
            )
            db.executemany(
                "INSERT INTO tracker_state (doc_type, state) VALUES (?, ?) "
                "ON CONFLICT (doc_type) DO UPDATE SET state = excluded.state",
                [(d, _dumps(s)) for d, s in batch.tracker_states.items()],
            )
            db.executemany(
                "INSERT INTO doc_types (doc_type, last_window_start_ms, history, partition, "
                "updated_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT (doc_type) DO UPDATE SET "
                "last_window_start_ms = excluded.last_window_start_ms, "
                "history = excluded.history, partition = excluded.partition, "
                "updated_ms = excluded.updated_ms",
                [
                    (
                        r.doc_type,
                        r.last_window_start_ms,
                        _dumps(r.history),
                        r.partition,
                        batch.now_ms,
                    )
                    for r in batch.doc_types
                ],
            )
            if keep_verdict_ids > 0 and batch.verdict_ids:
                db.executemany(
                    "INSERT INTO recent_verdicts (verdict_id) VALUES (?) ON CONFLICT DO NOTHING",
                    [(v,) for v in batch.verdict_ids],
                )
            # Keep the newest ``keep_verdict_ids`` (rowids grow); 0 forgets them all.
            db.execute(
                "DELETE FROM recent_verdicts WHERE rowid <= "
                "(SELECT MAX(rowid) FROM recent_verdicts) - ?",
                (keep_verdict_ids,),
            )
            db.executemany(
                _UPSERT_INCIDENT,
                [
                    # getattr, not astuple: that deep-copies each record on the hot path.
                    tuple(
                        _dumps(r.record) if f == "record" else getattr(r, f)
                        for f in _INCIDENT_FIELDS
                    )
                    for r in batch.incidents
                ],
            )
            db.executemany(
                "INSERT INTO outbox (incident_id, seq, integration, action, kind, payload, "
                "next_attempt_ms, created_ms, consumed_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        e.incident_id,
                        e.seq,
                        e.integration,
                        e.action,
                        e.kind,
                        _dumps(e.payload),
                        batch.now_ms,
                        batch.now_ms,
                        e.consumed_ms,
                    )
                    for e in batch.outbox
                ],
            )
            for statement, params in batch.statements:
                db.execute(statement, params)

    # ----------------------------------------------------------------- the outbox

    def due(self, integration: Integration, now_ms: int, limit: int) -> list[OutboxEntry]:
        """The next entries to send: per incident only its lowest unfinished seq, and only
        when that one is due. Oldest first. With the work split: only the entries of the
        partitions this instance owns."""
        if self._guard is None:
            rows = self._db.execute(DUE, (integration, now_ms, limit)).fetchall()
        else:
            owned = sorted(self._guard.owned_now())
            if not owned:
                return []
            marks = ",".join("?" * len(owned))
            sql = DUE.replace(" ORDER BY", f" AND {ENTRY_PARTITION} IN ({marks}) ORDER BY")
            rows = self._db.execute(sql, (integration, now_ms, *owned, limit)).fetchall()
        return [_entry(r) for r in rows]

    def next_due_ms(self, integration: Integration) -> int | None:
        """When the next entry is due (of this instance's partitions, the work split)."""
        sql = (
            "SELECT MIN(next_attempt_ms) FROM outbox "
            "WHERE integration = ? AND status IN ('pending', 'attempting')"
        )
        params: tuple[Any, ...] = (integration,)
        if self._guard is not None:
            owned = sorted(self._guard.owned_now())
            if not owned:
                return None
            # Placeholders only: the partitions are parameters.
            sql = (
                "SELECT MIN(o.next_attempt_ms) FROM outbox o JOIN incidents i "  # noqa: S608
                "USING (incident_id) WHERE o.integration = ? AND o.status IN "
                f"('pending', 'attempting') AND {ENTRY_PARTITION} IN "
                f"({','.join('?' * len(owned))})"
            )
            params += tuple(owned)
        row = self._db.execute(sql, params).fetchone()
        return None if row[0] is None else int(row[0])

    def has_later_update(self, entry: OutboxEntry) -> bool:
        """Whether a later progress update of the same incident waits behind ``entry``
        with nothing else in between but follow-ups (so ``entry`` can be superseded by it)."""
        row = self._db.execute(
            _LATER_UPDATE, (entry.integration, entry.incident_id, entry.seq, *FOLLOW_UPS)
        ).fetchone()
        return row is not None and row[0] == "progress"

    def outcome_before(self, entry: OutboxEntry) -> str | None:
        """The outcome of the same incident's entry just before ``entry`` for its
        integration (None: none, or not finished)."""
        row = self._db.execute(
            "SELECT outcome FROM outbox WHERE integration = ? AND incident_id = ? AND seq < ? "
            "ORDER BY seq DESC LIMIT 1",
            (entry.integration, entry.incident_id, entry.seq),
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def check_fence(self, entry_ids: Collection[int]) -> None:
        """Raises (``LostLead``) unless this instance may still write for these entries:
        checked just before a send's last step (``files.completeUploadExternal``)."""
        with self._tx(entry_ids=entry_ids):
            pass

    def mark_attempting(self, entry_ids: Collection[int], now_ms: int) -> None:
        with self._tx(entry_ids=entry_ids) as db:
            db.executemany(
                "UPDATE outbox SET status = 'attempting', attempts = attempts + 1, "
                "first_attempt_ms = COALESCE(first_attempt_ms, ?) WHERE id = ?",
                [(now_ms, i) for i in entry_ids],
            )

    def mark_done(
        self,
        entry_ids: Collection[int],
        outcome: str,
        now_ms: int,
        *,
        incident_id: str | None = None,
        refs: Mapping[str, Any] | None = None,
        before_commit: Hook = _nothing,
    ) -> None:
        """Done, and the incident's references the send produced, in one transaction."""
        with self._tx(before_commit, entry_ids=entry_ids) as db:
            db.executemany(
                "UPDATE outbox SET status = 'done', outcome = ?, finished_ms = ?, error = NULL "
                "WHERE id = ?",
                [(outcome, now_ms, i) for i in entry_ids],
            )
            if incident_id is not None and refs:
                allowed = {"slack_channel", "slack_ts", "jira_key", "jira_last_comment_ms"}
                if set(refs) - allowed:
                    raise ValueError(f"unknown incident references: {sorted(set(refs) - allowed)}")
                # Column names from the fixed set above, values as parameters.
                sets = ", ".join(f"{k} = ?" for k in refs)
                db.execute(
                    f"UPDATE incidents SET {sets} WHERE incident_id = ?",  # noqa: S608
                    [*refs.values(), incident_id],
                )

    def mark_failed(self, entry_id: int, error: str, now_ms: int) -> None:
        with self._tx(entry_ids=(entry_id,)) as db:
            db.execute(
                "UPDATE outbox SET status = 'failed', outcome = 'failed', error = ?, "
                "finished_ms = ? WHERE id = ?",
                (error[:2000], now_ms, entry_id),
            )

    def reschedule(self, entry_ids: Collection[int], next_attempt_ms: int, error: str) -> None:
        with self._tx(entry_ids=entry_ids) as db:
            db.executemany(
                "UPDATE outbox SET next_attempt_ms = ?, error = ? WHERE id = ?",
                [(next_attempt_ms, error[:2000], i) for i in entry_ids],
            )

    def pending_counts(self, integrations: Iterable[Integration] = ()) -> dict[str, int]:
        """Unfinished entries per integration: those named (0 when none), and any other
        that has some."""
        counts: dict[str, int] = dict.fromkeys(integrations, 0)
        for integration, n in self._db.execute(
            "SELECT integration, COUNT(*) FROM outbox WHERE status IN ('pending', 'attempting') "
            "GROUP BY integration"
        ):
            counts[integration] = n
        return counts

    def meta_get(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta_set(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # ----------------------------------------------------------------- housekeeping

    def prune(self, before_ms: int) -> int:
        """Forget resolved incidents (and their delivered notifications) last changed
        before ``before_ms``; incidents with undelivered notifications are kept."""
        with self._tx() as db:
            gone = [
                r[0]
                for r in db.execute(
                    "SELECT incident_id FROM incidents i WHERE state = 'resolved' "
                    "AND updated_ms < ? AND NOT EXISTS (SELECT 1 FROM outbox o WHERE "
                    "o.incident_id = i.incident_id AND o.status IN ('pending', 'attempting'))",
                    (before_ms,),
                )
            ]
            db.executemany("DELETE FROM outbox WHERE incident_id = ?", [(i,) for i in gone])
            db.executemany("DELETE FROM incidents WHERE incident_id = ?", [(i,) for i in gone])
        return len(gone)

    # ----------------------------------------------------------------- reading

    def list_incidents(self, *, open_only: bool, limit: int) -> list[IncidentListing]:
        out = []
        with self.reading():
            rows = self._db.execute(
                _LIST_INCIDENTS.format(where="WHERE state = 'open'" if open_only else ""),
                (limit,),
            ).fetchall()
            for r in rows:
                incident = _incident(r[: len(_INCIDENT_FIELDS)])
                deliveries: dict[str, dict[str, int]] = {}
                for integration, status, n in self._db.execute(
                    "SELECT integration, status, COUNT(*) FROM outbox WHERE incident_id = ? "
                    "GROUP BY integration, status",
                    (incident.incident_id,),
                ):
                    deliveries.setdefault(integration, {})[status] = n
                out.append(IncidentListing(incident, Refs(*r[len(_INCIDENT_FIELDS) :]), deliveries))
        return out

    def outbox_rows(self, incident_id: str | None = None) -> list[dict[str, Any]]:
        """Every outbox row (for tests and inspection), in insertion order."""
        sql, params = "SELECT * FROM outbox ORDER BY id", tuple[str, ...]()
        if incident_id is not None:
            sql, params = "SELECT * FROM outbox WHERE incident_id = ? ORDER BY id", (incident_id,)
        cursor = self._db.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


_INCIDENT_FIELDS = [f.name for f in fields(IncidentRow)]
_ENTRY_FIELDS = [f.name for f in fields(OutboxEntry) if f.name != "refs"]
#: Columns a new row of the same incident may change (the rest are set once).
_CHANGING = [
    f for f in _INCIDENT_FIELDS if f not in ("incident_id", "doc_type", "rule", "opened_at_ms")
]
_UPSERT_INCIDENT = (
    f"INSERT INTO incidents ({', '.join(_INCIDENT_FIELDS)}) "  # noqa: S608  (our own names)
    f"VALUES ({', '.join('?' * len(_INCIDENT_FIELDS))}) ON CONFLICT (incident_id) DO UPDATE "
    f"SET {', '.join(f'{c} = excluded.{c}' for c in _CHANGING)}"
)
_LATER_UPDATE = (
    "SELECT kind FROM outbox WHERE integration = ? AND incident_id = ? AND seq > ? "  # noqa: S608
    f"AND status IN ('pending', 'attempting') AND kind NOT IN ({', '.join('?' * len(FOLLOW_UPS))}) "
    "ORDER BY seq LIMIT 1"
)
_SELECT_INCIDENTS = f"SELECT {', '.join(_INCIDENT_FIELDS)} FROM incidents"  # noqa: S608
_LIST_INCIDENTS = (
    f"SELECT {', '.join(_INCIDENT_FIELDS)}, slack_channel, slack_ts, jira_key, "  # noqa: S608
    "jira_last_comment_ms FROM incidents {where} "
    "ORDER BY state = 'open' DESC, updated_ms DESC LIMIT ?"
)


def _incident(r: tuple[Any, ...]) -> IncidentRow:
    """A row of ``_SELECT_INCIDENTS`` (the columns in the record's order; its record JSON)."""
    values = dict(zip(_INCIDENT_FIELDS, r, strict=False))
    values["record"] = orjson.loads(values["record"])
    return IncidentRow(**values)


def _entry(r: tuple[Any, ...]) -> OutboxEntry:
    """A row of ``DUE`` (the columns in the entry's order, its payload JSON, the
    references last)."""
    values = dict(zip(_ENTRY_FIELDS, r, strict=False))
    values["payload"] = orjson.loads(values["payload"])
    return OutboxEntry(**values, refs=Refs(*r[len(_ENTRY_FIELDS) :]))
