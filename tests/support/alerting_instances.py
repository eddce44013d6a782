"""The tests that run several alerting instances on one state in PostgreSQL: their settings
(``two_instances``), and the end check (``check_every_incident``): every incident resolved,
posted once, its updates in order in Slack, Jira and the drift events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import SecretStr

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import Store
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.postgres import PostgresDatabase
from tests.support.alerting import POLICY, LocalSlackWithHistory, parents_by_label, slack_threads
from tests.support.alerting_kafka import drift_events, service_config

LEASE_S = 3

Config = dict[str, dict[str, Any]]


def two_instances(
    job: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    database: PostgresDatabase,
    *,
    sections: Config | None = None,
    **alerting: Any,
) -> tuple[list[Config], StateLocation]:
    """The settings of instances "a" and "b": one state in ``database``, a state directory
    each (never used: the state is in PostgreSQL), a short lease; ``sections`` over the
    other sections, ``alerting`` over the alerting section's."""
    shared = {
        "state_url": database.url,
        "state_password": database.password,
        "lease_s": LEASE_S,
        "group_id": f"anchorwatch-alerting-{tmp_path.name}",
        **alerting,
    }
    configs = []
    for name in ("a", "b"):
        config = service_config(job, tmp_path / name / "state", slack, jira, **shared)
        config["policy"] = POLICY
        config.update(sections or {})
        configs.append(config)
    return configs, StateLocation(tmp_path, database.url, SecretStr(database.password))


def check_every_incident(
    job: JobSettings,
    location: StateLocation,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    doc_types: set[str],
) -> list[str]:
    """Every incident resolved, posted once, its updates in order; the outcomes of the
    outbox rows."""
    incidents = list_incidents(location, open_only=False, limit=100)
    assert {i.row.doc_type for i in incidents} == doc_types
    assert all(i.row.state == "resolved" for i in incidents)
    parents = parents_by_label(slack.messages)
    threads = slack_threads([m for m in slack.messages if m.get("subtype") is None])
    events = drift_events(job)
    for item in incidents:
        label = incident_label(item.row.incident_id)
        assert parents[label] == 1, f"{item.row.doc_type}: {parents[label]} parent messages"
        replies = [r["text"].split(" ")[0] for r in threads[item.refs.slack_ts or ""]]
        assert replies == ["Update", "Update", "Resolved:"], item.row.doc_type
        (ticket,) = [i for i in jira.issues.values() if label in i["fields"]["labels"]]
        comments = [c["body"].split(" ")[0] for c in ticket["comments"]]
        assert comments == ["Update,", "Update,", "Resolved"], item.row.doc_type
        mine = {e.event_id: e for e in events if e.incident_id == item.row.incident_id}
        assert [e.event_type for e in mine.values()] == [
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_RESOLVED",
        ], item.row.doc_type
    assert len(jira.issues) == len(doc_types)
    store = Store(location, create=False)
    try:
        return [r["outcome"] for r in store.outbox_rows()]
    finally:
        store.close()
