"""Rows and outbox entries of the alerting state store, for the store's and the outbox's tests."""

from __future__ import annotations

from typing import Any

from anchorwatch.alerting.store import IncidentRow, NewEntry


def row(incident_id: str = "i1", state: str = "open", **changes: Any) -> IncidentRow:
    values: dict[str, Any] = {
        "incident_id": incident_id,
        "doc_type": "invoice",
        "rule": "drift",
        "state": state,
        "severity": "warning",
        "opened_at_ms": 1_000,
        "resolved_at_ms": None,
        "record": {"incident_id": incident_id, "peak_mean_drift": 0.9},
        "next_seq": 2,
        "last_update_window_ms": 0,
        "updated_ms": 1_000,
    }
    values.update(changes)
    return IncidentRow(**values)


def entry(incident_id: str, seq: int, integration: str = "slack", **changes: Any) -> NewEntry:
    values: dict[str, Any] = {
        "incident_id": incident_id,
        "seq": seq,
        "integration": integration,
        "action": "open" if seq == 1 else "update",
        "kind": "opened" if seq == 1 else "updated",
        "payload": {"n": seq},
        "consumed_ms": 500,
    }
    values.update(changes)
    return NewEntry(**values)
