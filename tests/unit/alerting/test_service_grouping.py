"""Grouping and inhibition of data-quality incidents in the running service (the harness of
tests/support/alerting_harness.py, the real Slack and Jira clients against the local
servers): types hit by the same diagnosis together get one thread and one ticket; a
data-quality incident holds back its type's drift pages; a crash never loses or doubles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.grouping import GROUP_WAIT
from anchorwatch.alerting.integrations.jira.render import jira_escape
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.store import IncidentRow
from anchorwatch.cli.alerting import alerting
from anchorwatch.contracts import Verdict
from anchorwatch.policy.config import PolicyConfig
from tests.support.alerting import (
    LIFECYCLE,
    LocalSlackWithHistory,
    dq_verdict,
    parents_by_label,
    slack_threads,
)
from tests.support.alerting_harness import Crash, Harness, issues, posted, settings_for

TYPES = [f"form_{i}" for i in range(1, 7)]
#: Two rules on the same windows: ``slow`` resolves later, so it outlives ``drift``.
TWO_RULES = {
    "rules": [
        {"name": "drift", "open_after_critical": 1},
        {"name": "slow", "open_after_critical": 1, "open_after": 3, "resolve_after": 6},
    ]
}


def dq_lifecycle(doc_type: str, first_minute: int = 0) -> list[Verdict]:
    """The lifecycle of tests/support/alerting.py, its breaching windows diagnosed."""
    return [
        dq_verdict(doc_type, first_minute + i, m, 0.6 if m > 0.85 else 0.0)
        for i, m in enumerate(LIFECYCLE)
    ]


def in_time(*series: list[Verdict]) -> list[Verdict]:
    """Several types' verdicts as the drift job writes them: minute by minute."""
    return sorted((v for vs in series for v in vs), key=lambda v: v.window.window_start_ms)


def _rows(h: Harness) -> dict[str, IncidentRow]:
    return {r.row.incident_id: r.row for r in h.store.list_incidents(open_only=False, limit=100)}


def _by_type(h: Harness, rule: str = "drift") -> dict[str, IncidentRow]:
    return {r.doc_type: r for r in _rows(h).values() if r.rule == rule}


def _group(h: Harness) -> IncidentRow:
    (group,) = [r for r in _rows(h).values() if r.rule == "group"]
    return group


def _text(message: dict[str, Any]) -> str:
    return orjson.dumps(message.get("blocks") or []).decode() + str(message["text"])


def _with_policy(tmp_path: Path, slack: Any, jira: LocalJira, policy: dict[str, Any]) -> Any:
    settings = settings_for(tmp_path, slack, jira)
    return settings.model_copy(update={"policy": PolicyConfig.model_validate(policy)})


def _release(h: Harness, after_s: float = 11) -> int:
    """The group wait passes (10 s by default) and the service loop's release runs."""
    h.clock.now += after_s
    decided = h.engine.release_held(h.clock.ms())
    h.drain()
    return decided


def fault(doc_type: str, first_minute: int = 0, *, recovers_early: bool = False) -> list[Verdict]:
    """``dq_lifecycle``; ``recovers_early``: clean from its fourth window on."""
    if not recovers_early:
        return dq_lifecycle(doc_type, first_minute)
    means = (*LIFECYCLE[:3], *[0.5] * (len(LIFECYCLE) - 3))
    return [
        dq_verdict(doc_type, first_minute + i, m, 0.6 if m > 0.85 else 0.0)
        for i, m in enumerate(means)
    ]


def phases() -> tuple[list[Verdict], list[Verdict], list[Verdict]]:
    """Six types hit together (open at minute 2); a seventh hit later (opens at minute 4)
    while the six go on, form_1 already clean; then the rest: form_1 recovers (minute 5), the
    others at minute 8, form_7 at minute 10. Minute by minute, as the drift job writes them."""
    series = {doc: fault(doc, recovers_early=doc == "form_1") for doc in TYPES}
    late = fault("form_7", first_minute=2)
    return (
        in_time(*[v[:3] for v in series.values()]),
        in_time(late[:3], *[v[3:5] for v in series.values()]),
        in_time(late[3:], *[v[5:] for v in series.values()]),
    )


def test_six_types_with_the_same_diagnosis_get_one_thread_and_one_ticket(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    opening, joining, ending = phases()
    h.publish(opening)
    h.run()
    # Waiting for the group: judged, stored, counted, sent downstream; nobody paged yet.
    assert posted(slack) == []
    assert issues(jira) == []
    assert {r.held_by for r in _by_type(h).values()} == {GROUP_WAIT}
    assert h.value("anchorwatch_alerting_incidents_open", severity="warning") == 6
    assert sorted(e["doc_type"] for e in h.events.sent) == TYPES
    assert h.engine.release_held(h.clock.ms()) == 0  # the wait is not over

    assert _release(h) == 6
    assert _release(h) == 0
    group = _group(h)
    label = incident_label(group.incident_id)
    assert parents_by_label(posted(slack)) == {label: 1}
    (parent,) = [m for m in posted(slack) if not m["thread_ts"]]
    assert all(f"`{doc}`" in _text(parent) for doc in TYPES)
    # A data-quality fault, not a drift alert of one doc type: no drift figures.
    assert parent["text"] == (
        "[WARNING] Data-quality fault: `snapshot_disabled` across 6 doc types (open)"
    )
    assert "mean drift" not in _text(parent).lower()
    (ticket,) = issues(jira)
    assert label in ticket["fields"]["labels"]
    assert ticket["fields"]["summary"] == (
        "[URGENT] Data-quality fault: snapshot_disabled across 6 doc types"
    )
    assert all(jira_escape(doc) in ticket["fields"]["description"] for doc in TYPES)
    members = _by_type(h)
    assert {r.group_id for r in members.values()} == {group.incident_id}
    assert {r.held_by for r in members.values()} == {None}
    assert h.value("anchorwatch_alerting_incidents_silenced") == 0

    # A seventh type hit later joins: the same thread and ticket hear of it.
    h.publish(joining)
    h.run()
    assert _by_type(h)["form_7"].group_id == group.incident_id
    assert parents_by_label(posted(slack)) == {label: 1}
    replies = [_text(m) for m in slack_threads(posted(slack))[parent["ts"]]]
    assert any("joined" in r and "form_7" in r for r in replies)
    (ticket,) = issues(jira)
    assert any(jira_escape("form_7") in c and "joined" in c for c in ticket["comments"])
    assert _group(h).severity == "critical"  # the six escalated at minute 3

    # form_1 recovers first: an update; the last one to recover resolves it, once.
    h.publish(ending)
    h.run()
    assert _group(h).state == "resolved"
    thread = [_text(m) for m in slack_threads(posted(slack))[parent["ts"]]]
    recovered = [i for i, t in enumerate(thread) if "recovered: form_1" in t]
    resolved = [i for i, t in enumerate(thread) if "Resolved" in t]
    assert len(recovered) == 1
    assert len(resolved) == 1
    assert recovered[0] < resolved[0]
    assert parents_by_label(posted(slack)) == {label: 1}
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"
    # Every member still sent its own drift events: opened, escalated, resolved.
    alert, resolved_ = "ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED"
    for doc in [*TYPES, "form_7"]:
        kinds = [e["event_type"] for e in h.events.sent if e["doc_type"] == doc]
        assert kinds == ([alert, resolved_] if doc == "form_1" else [alert, alert, resolved_])


def test_fewer_types_than_min_types_are_posted_each_on_its_own(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(in_time(*[dq_lifecycle(doc)[:3] for doc in TYPES[:2]]))
    h.run()
    assert posted(slack) == []
    assert _release(h) == 2
    assert not [r for r in _rows(h).values() if r.rule == "group"]
    assert len(parents_by_label(posted(slack))) == 2
    # Posted after the wait, from the stored row: the post still names the diagnosis.
    assert all("snapshot_disabled" in _text(m) for m in posted(slack) if m.get("blocks"))
    assert all("snapshot" in i["fields"]["description"] for i in issues(jira))
    assert sorted(i["fields"]["summary"].split(": ")[1].split(" ")[0] for i in issues(jira)) == [
        "form_1",
        "form_2",
    ]
    h.publish(in_time(*[dq_lifecycle(doc)[3:] for doc in TYPES[:2]]))
    h.run()
    assert {i["fields"]["status"]["name"] for i in issues(jira)} == {"Done"}
    assert len(parents_by_label(posted(slack))) == 2


def test_types_far_apart_in_event_time_are_not_grouped(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    # Three types, each opening 10 minutes after the one before: not one fault.
    h.publish(in_time(*[dq_lifecycle(doc, 10 * i)[:3] for i, doc in enumerate(TYPES[:3])]))
    h.run()
    assert _release(h) == 3
    assert len(parents_by_label(posted(slack))) == 3


def test_a_data_quality_incident_inhibits_its_types_drift_page_until_it_resolves(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_with_policy(tmp_path, slack, jira, TWO_RULES), clock)
    # drift opens on two diagnosed warnings (minute 2); slow needs a third breach, which
    # carries no diagnosis: a plain drift incident.
    v = [dq_verdict("invoice", i, m, 0.6 if i in (1, 2) else 0.0) for i, m in enumerate(LIFECYCLE)]
    h.publish(v[:4])
    h.run()
    dq, drift = _by_type(h)["invoice"], _by_type(h, "slow")["invoice"]
    assert dq.quality_code == "snapshot_disabled"
    assert drift.quality_code is None
    assert drift.held_by == f"inhibited by {dq.incident_id}"
    assert _release(h) == 1  # the data-quality one, on its own (one type)
    assert len(parents_by_label(posted(slack))) == 1
    assert [e["event_type"] for e in h.events.sent if e["incident_id"] == drift.incident_id] == [
        "ANCHOR_DRIFT_ALERT"
    ]
    state = str(h.settings.alerting.state_dir)
    listed = CliRunner().invoke(alerting, ["incidents", "--state-dir", state, "--json"])
    records = {r["incident_id"]: r for r in map(orjson.loads, listed.output.splitlines())}
    assert records[drift.incident_id]["shown_state"] == "inhibited"
    assert records[drift.incident_id]["inhibited_by"] == dq.incident_id

    # The data-quality incident resolves (minute 8) while slow is still open: posted then.
    h.publish(v[4:])
    h.run()
    assert _by_type(h)["invoice"].state == "resolved"
    assert _by_type(h, "slow")["invoice"].state == "open"
    assert _by_type(h, "slow")["invoice"].held_by is None
    assert parents_by_label(posted(slack))[incident_label(drift.incident_id)] == 1
    assert len(issues(jira)) == 2
    h.publish([dq_verdict("invoice", 9 + i, 0.5, 0.0) for i in range(4)])
    h.run()
    assert _by_type(h, "slow")["invoice"].state == "resolved"
    assert set(parents_by_label(posted(slack)).values()) == {1}
    assert {i["fields"]["status"]["name"] for i in issues(jira)} == {"Done"}


def test_an_inhibited_incident_resolved_first_never_reaches_people(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    rules = {
        "rules": [
            {"name": "drift", "open_after_critical": 1, "resolve_after": 6},
            {"name": "slow", "open_after_critical": 1, "open_after": 3},
        ]
    }
    h = Harness(_with_policy(tmp_path, slack, jira, rules), clock)
    v = [dq_verdict("invoice", i, m, 0.6 if i in (1, 2) else 0.0) for i, m in enumerate(LIFECYCLE)]
    h.publish(v)
    h.run()
    _release(h)
    assert _by_type(h, "slow")["invoice"].state == "resolved"
    assert len(parents_by_label(posted(slack))) == 1  # the data-quality incident's alone


def test_the_incidents_command_shows_grouped_members(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(in_time(*[dq_lifecycle(doc)[:3] for doc in TYPES[:3]]))
    h.run()
    state = str(h.settings.alerting.state_dir)
    table = CliRunner().invoke(alerting, ["incidents", "--state-dir", state])
    assert [line.split(" ")[0] for line in table.output.splitlines()[1:]] == ["waiting"] * 3
    _release(h)
    table = CliRunner().invoke(alerting, ["incidents", "--state-dir", state])
    assert table.exit_code == 0, table.output
    label = incident_label(_group(h).incident_id)
    lines = table.output.splitlines()[1:]
    grouped = [line for line in lines if line.startswith("grouped ")]
    assert len(grouped) == 3
    assert all(f"(in group {label})" in line for line in grouped)
    assert any(label in line and "snapshot_disabled group" in line for line in lines)
    listed = CliRunner().invoke(alerting, ["incidents", "--state-dir", state, "--json"])
    members = [r for r in map(orjson.loads, listed.output.splitlines()) if r["rule"] == "drift"]
    assert {r["group_id"] for r in members} == {_group(h).incident_id}
    assert {r["quality_code"] for r in members} == {"snapshot_disabled"}


@pytest.mark.parametrize("point", ["group_before_commit", "batch_before_commit"])
def test_a_crash_while_grouping_neither_loses_nor_doubles(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock, point: str
) -> None:
    # group_before_commit: the group decided, not committed; batch_before_commit: the
    # batch in which a seventh type joins the open group, not committed.
    grouping = point == "group_before_commit"
    h = Harness(settings_for(tmp_path, slack, jira), clock, crash=point if grouping else None)
    opening, joining, ending = phases()
    h.publish(opening)
    h.run()
    h.clock.now += 11
    if grouping:
        with pytest.raises(Crash):  # the process dies there: nothing of it committed
            h.engine.release_held(h.clock.ms())
        h.restart()
        assert {r.held_by for r in _by_type(h).values()} == {GROUP_WAIT}
    assert _release(h) == 6
    h.restart()
    assert _release(h) == 0
    if not grouping:
        h.engine.close()
        for drainer in h.drainers:
            drainer._store.close()
        h._start(point)  # a restart, with the crash point armed
    h.publish(joining)
    h.run()  # restarts after the crash
    assert h.crashes == 1
    h.publish(ending)
    h.run()
    label = incident_label(_group(h).incident_id)
    assert parents_by_label(posted(slack)) == {label: 1}
    (parent,) = [m for m in posted(slack) if not m["thread_ts"]]
    thread = [_text(m) for m in slack_threads(posted(slack))[parent["ts"]]]
    assert sum("joined" in t for t in thread) == 1
    assert sum("recovered: form_1" in t for t in thread) == 1
    assert sum("Resolved" in t for t in thread) == 1
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"
    assert sum(jira_escape("form_7") in c and "joined" in c for c in ticket["comments"]) == 1


def test_grouping_off_posts_every_incident_at_once(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    settings = settings_for(tmp_path, slack, jira)
    settings = settings.model_copy(
        update={"grouping": settings.grouping.model_copy(update={"enabled": False})}
    )
    h = Harness(settings, clock)
    h.publish(in_time(*[dq_lifecycle(doc)[:3] for doc in TYPES]))
    h.run()
    assert len(parents_by_label(posted(slack))) == 6
    assert {r.held_by for r in _by_type(h).values()} == {None}
