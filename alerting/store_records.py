"""The records the alerting store reads and writes (``store.py``): an incident's row, an
outbox entry (new, and as read back with the incident's references), a doc type's row, what
one batch writes, what a restart restores and what the ``incidents`` command lists. Plain
data, no SQL: held apart so the store's logic reads on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

if TYPE_CHECKING:
    from anchorwatch.alerting.database import Database

#: An integration's name (``integrations/registry.py`` holds them; the store does not care).
Integration = str
Action = Literal["open", "update", "resolve", "chart", "acknowledge"]
#: Kinds of entry that go with the entry before them (an update's chart): superseded with
#: it, and no reason to keep an earlier update.
FOLLOW_UPS: Final = ("chart",)
Status = Literal["pending", "attempting", "done", "failed"]


@dataclass(frozen=True)
class IncidentRow:
    """The columns the consumer owns; the senders own the references (Slack thread, Jira
    ticket), which an upsert of this row never overwrites."""

    incident_id: str
    doc_type: str
    rule: str
    state: Literal["open", "resolved"]
    severity: str
    opened_at_ms: int
    resolved_at_ms: int | None
    record: dict[str, Any]  # the detector's Incident, as a dict
    next_seq: int
    last_update_window_ms: int
    updated_ms: int
    # Opened while muted (``silences.py``), inhibited or waiting for its group
    # (``grouping.py``): what holds it, and the post it waits to make ("opened" or
    # "reopened") once nothing does; None once posted.
    held_by: str | None = None
    held_kind: str | None = None
    # Acknowledged in Slack (``slack_actions.py``): the Slack user id, and when.
    acked_by: str | None = None
    acked_ms: int | None = None
    # Grouping (``grouping.py``): the data-quality diagnosis it opened with (one of
    # ``[grouping] codes``), the group incident it is posted through (a member), and, held
    # by ``group-wait``, when the wait ends (wall clock).
    quality_code: str | None = None
    group_id: str | None = None
    wait_until_ms: int | None = None


@dataclass(frozen=True)
class NewEntry:
    incident_id: str
    seq: int
    integration: Integration
    action: Action
    kind: str  # what caused it: opened, reopened, updated, progress, resolved
    payload: dict[str, Any]
    consumed_ms: int


@dataclass(frozen=True)
class DocTypeRow:
    doc_type: str
    last_window_start_ms: int
    history: list[list[float]]  # [start_ms, end_ms, mean_drift, threshold, request_count]
    partition: int  # the verdicts partition the type's verdicts arrive on


@dataclass
class BatchWrite:
    """Everything one consumed batch changes, committed together."""

    now_ms: int
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition)
    policy_version: str | None = None
    tracker_states: dict[str, Any] = field(default_factory=dict)  # doc type -> JSON value
    doc_types: list[DocTypeRow] = field(default_factory=list)
    verdict_ids: list[str] = field(default_factory=list)
    incidents: list[IncidentRow] = field(default_factory=list)
    outbox: list[NewEntry] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    #: Further statements of the same transaction (e.g. Slack actions marked applied).
    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    #: The verdict partitions whose types it writes for: with the work split among
    #: instances (``ownership.py``), it commits only while this instance owns them all.
    partitions: set[int] = field(default_factory=set)
    #: Checks inside the transaction before anything is written (each raises to refuse it).
    checks: list[Callable[[Database], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Refs:
    """Where an incident lives in Slack and Jira (written by the senders)."""

    slack_channel: str | None = None
    slack_ts: str | None = None
    jira_key: str | None = None
    jira_last_comment_ms: int | None = None


@dataclass(frozen=True)
class OutboxEntry:
    id: int
    incident_id: str
    doc_type: str
    seq: int
    integration: Integration
    action: Action
    kind: str
    payload: dict[str, Any]
    status: Status
    attempts: int
    consumed_ms: int
    first_attempt_ms: int | None
    refs: Refs

    def log_fields(self) -> dict[str, Any]:
        """What a log line says about the entry."""
        return {
            "integration": self.integration,
            "action": self.action,
            "kind": self.kind,
            "incident_id": self.incident_id,
            "seq": self.seq,
        }


@dataclass(frozen=True)
class Restored:
    """What a restart needs: the consumer's position and the deciders' memory."""

    offsets: dict[tuple[str, int], int]
    policy_version: str | None
    tracker_states: dict[str, Any]
    doc_types: dict[str, DocTypeRow]
    open_incidents: list[IncidentRow]
    meta: dict[str, str]


@dataclass(frozen=True)
class IncidentListing:
    row: IncidentRow
    refs: Refs
    deliveries: dict[str, dict[str, int]]  # integration -> status -> count


class PartitionGuard(Protocol):
    """With the work split among instances (``ownership.PartitionOwnership``)."""

    def fence_partitions(self, db: Database, partitions: Collection[int]) -> None:
        """Inside a write transaction: raises unless this instance owns them all."""

    def owned_now(self) -> frozenset[int]:
        """The verdict partitions this instance owns now."""
