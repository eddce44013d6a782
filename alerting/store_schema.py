"""The tables of the alerting service's state file (see ``store.py``): ``meta`` (schema
version, policy version, partition watermarks, learnt Slack channel ids), ``offsets`` (the
next verdict offset per partition), ``tracker_state`` (the detector's state per doc type),
``doc_types`` (each type's high-water mark, recent windows and partition),
``recent_verdicts`` (ids, to tell replays from late verdicts), ``incidents`` (with where
each lives in Slack and Jira, what holds back the posts of one opened while muted,
inhibited or waiting for its group, and the group it is posted through),
``outbox`` (one row per incident, seq and integration), ``silences`` (see
``silences.py``; one made by Slack's "Silence until resolved" names its incident),
``slack_actions`` (acknowledgements from Slack's buttons, recorded by the HTTP thread and
applied by the engine) and ``slack_signatures`` (signed Slack requests seen in the last 10
minutes, to refuse a replay; see ``slack_actions.py``).

On PostgreSQL the same tables live in schema ``alerting`` (``database.py`` gives them its
types). A file of an older schema is brought up to date at start, in one transaction, by the steps
of ``MIGRATIONS`` (version -> the statements that make it the next one).
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 4

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS tracker_state (
    doc_type TEXT PRIMARY KEY,
    state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS doc_types (
    doc_type TEXT PRIMARY KEY,
    last_window_start_ms INTEGER NOT NULL,
    history TEXT NOT NULL,
    partition INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS recent_verdicts (
    verdict_id TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS incidents (
    incident_id TEXT PRIMARY KEY,
    doc_type TEXT NOT NULL,
    rule TEXT NOT NULL,
    state TEXT NOT NULL,
    severity TEXT NOT NULL,
    opened_at_ms INTEGER NOT NULL,
    resolved_at_ms INTEGER,
    record TEXT NOT NULL,
    next_seq INTEGER NOT NULL,
    last_update_window_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    slack_channel TEXT,
    slack_ts TEXT,
    jira_key TEXT,
    jira_last_comment_ms INTEGER,
    held_by TEXT,
    held_kind TEXT,
    acked_by TEXT,
    acked_ms INTEGER,
    quality_code TEXT,
    group_id TEXT,
    wait_until_ms INTEGER
);
CREATE INDEX IF NOT EXISTS incidents_state ON incidents (state, updated_ms);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    integration TEXT NOT NULL,
    action TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    consumed_ms INTEGER NOT NULL,
    first_attempt_ms INTEGER,
    finished_ms INTEGER,
    outcome TEXT,
    error TEXT,
    UNIQUE (incident_id, integration, seq)
);
CREATE INDEX IF NOT EXISTS outbox_open ON outbox (integration, incident_id, seq)
    WHERE status IN ('pending', 'attempting');
CREATE TABLE IF NOT EXISTS silences (
    silence_id TEXT PRIMARY KEY,
    doc_type TEXT,
    severity TEXT,
    starts_ms INTEGER NOT NULL,
    ends_ms INTEGER NOT NULL,
    author TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expired_ms INTEGER,
    expired_by TEXT,
    incident_id TEXT
);
CREATE TABLE IF NOT EXISTS slack_actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    incident_id TEXT NOT NULL,
    action TEXT NOT NULL,
    user_id TEXT NOT NULL,
    user_name TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    applied_ms INTEGER,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS slack_actions_pending ON slack_actions (id) WHERE applied_ms IS NULL;
CREATE TABLE IF NOT EXISTS slack_signatures (
    signature TEXT PRIMARY KEY,
    seen_ms INTEGER NOT NULL
);
"""

#: PostgreSQL only: SQLite's implicit ``rowid`` of ``recent_verdicts`` (the order ids were
#: inserted in, by which ``Store.commit_batch`` keeps the newest) as a column of that name.
POSTGRESQL_EXTRA: Final = (
    "ALTER TABLE recent_verdicts ADD COLUMN IF NOT EXISTS rowid BIGINT "
    "GENERATED ALWAYS AS IDENTITY",
)

#: Version -> the statements that bring a file of that version to the next.
MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        "ALTER TABLE incidents ADD COLUMN held_by TEXT",
        "ALTER TABLE incidents ADD COLUMN held_kind TEXT",
    ),
    # The new tables come with SCHEMA (CREATE ... IF NOT EXISTS); a column already there
    # (its table made by SCHEMA just now) is left as it is.
    2: (
        "ALTER TABLE incidents ADD COLUMN acked_by TEXT",
        "ALTER TABLE incidents ADD COLUMN acked_ms INTEGER",
        "ALTER TABLE silences ADD COLUMN incident_id TEXT",
    ),
    # Grouping and inhibition of data-quality incidents (``grouping.py``).
    3: (
        "ALTER TABLE incidents ADD COLUMN quality_code TEXT",
        "ALTER TABLE incidents ADD COLUMN group_id TEXT",
        "ALTER TABLE incidents ADD COLUMN wait_until_ms INTEGER",
    ),
}

#: Per integration, the lowest unfinished seq of each incident, when due (``Store.due``).
DUE: Final = (
    "SELECT o.id, o.incident_id, i.doc_type, o.seq, o.integration, o.action, o.kind, "
    "o.payload, o.status, o.attempts, o.consumed_ms, o.first_attempt_ms, i.slack_channel, "
    "i.slack_ts, i.jira_key, i.jira_last_comment_ms FROM outbox o JOIN incidents i "
    "USING (incident_id) WHERE o.integration = ? AND o.status IN ('pending', 'attempting') "
    "AND o.next_attempt_ms <= ? AND o.seq = (SELECT MIN(seq) FROM outbox h "
    "WHERE h.integration = o.integration AND h.incident_id = o.incident_id "
    "AND h.status IN ('pending', 'attempting')) ORDER BY o.id LIMIT ?"
)

#: The verdicts partition an outbox entry (``o``) of an incident (``i``) is decided on: its
#: type's; 0 for a row of no doc type (none is written while the work is split).
ENTRY_PARTITION: Final = (
    "COALESCE((SELECT d.partition FROM doc_types d WHERE d.doc_type = i.doc_type), 0)"
)
