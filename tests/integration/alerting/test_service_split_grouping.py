"""Grouping of data-quality incidents (``grouping.py``) with the work split
(``alerting.work_split``): two `anchorwatch alerting serve` processes share the verdict
partitions, and doc types on partitions of both are hit by the same diagnosis
(``snapshot_disabled``) in the same minutes. People get ONE group incident: one Slack thread
naming every type, one Jira ticket, none of a member on its own; each member still sends its
own drift events; when the last member recovers the group resolves once, nothing in its
thread or ticket doubled. Then the same with the owner of partition 0 (who decides and posts
the groups) killed with SIGKILL while the group is open, its state directory deleted: the
other instance finishes the group, still one thread, one ticket, one resolution."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.server import Fault
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store_records import IncidentListing
from anchorwatch.contracts import Verdict
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.postgres import PostgresDatabase
from tests.support.alerting import LIFECYCLE, LocalSlackWithHistory, dq_verdict, parents_by_label
from tests.support.alerting_instances import Config, two_instances
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    drift_events,
    ready,
    service_env,
)
from tests.support.alerting_split import held_by, holders, produce_on, verdict_partitions
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The diagnosis of a window with 0.6 of its snapshots disabled (``dq_verdict``).
CODE = "snapshot_disabled"
#: Short, so a data-quality incident decides within seconds of its opening batch.
WAIT_S = 2
ALERT, RESOLVED = "ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED"
#: How long a post made to hang in Slack waits for its answer (its poster is killed meanwhile).
HANG_S = 60


# --------------------------------------------------------------------------- verdicts


def fault(doc_type: str, *, recovers_early: bool = False) -> list[Verdict]:
    """The lifecycle of tests/support/alerting.py, its breaching windows diagnosed: opens at
    minute 2 (warning), escalates at 3, recovers at 8. ``recovers_early``: clean from
    minute 3, so it opens as a warning and recovers at minute 5."""
    means = (*LIFECYCLE[:3], *[0.5] * (len(LIFECYCLE) - 3)) if recovers_early else LIFECYCLE
    return [dq_verdict(doc_type, i, m, 0.6 if m > 0.85 else 0.0) for i, m in enumerate(means)]


Placed = list[tuple[int, Verdict]]


def faults(
    prefix: str, partitions: list[int], early: int = -1
) -> dict[str, tuple[int, list[Verdict]]]:
    """Two doc types per partition, each hit by the fault: type -> (partition, verdicts).
    The ``early``-th type of each partition recovers early (``fault``)."""
    return {
        f"{prefix}-{p}-{k}": (p, fault(f"{prefix}-{p}-{k}", recovers_early=k == early))
        for p in partitions
        for k in range(2)
    }


def minutes(series: dict[str, tuple[int, list[Verdict]]], first: int, last: int) -> Placed:
    """The verdicts of windows ``first`` to ``last`` (minutes) of every type, minute by
    minute as the drift job writes them, each on its type's partition."""
    placed = [(p, v) for p, vs in series.values() for v in vs[first : last + 1]]
    return sorted(placed, key=lambda pv: (pv[1].window.window_start_ms, pv[0]))


# --------------------------------------------------------------------------- instances


def grouping_instances(
    job: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    database: PostgresDatabase,
) -> tuple[list[Config], StateLocation]:
    """Instances "a" and "b" sharing the work on one state in ``database``, grouping on
    (at least 3 types within 5 minutes of event time, a short wait)."""
    return two_instances(
        job,
        tmp_path,
        slack,
        jira,
        database,
        sections={"grouping": {"enabled": True, "wait_s": WAIT_S}},
        work_split=True,
        batch_max=4,
    )


def start(configs: list[Config], tmp_path: Path) -> dict[str, ServiceProcess]:
    """Both instances, "a" and "b", logging at INFO (the group decisions are logged there)."""
    processes = {}
    for name, config in zip("ab", configs, strict=True):
        env = service_env(config)
        env["ANCHORWATCH_LOG_LEVEL"] = "INFO"
        processes[name] = ServiceProcess(env, tmp_path / f"{name}.log")
    return processes


def alive(processes: dict[str, ServiceProcess], tmp_path: Path) -> bool:
    """True; fails at once, with the last line of its log, when an instance has exited (a
    wait for what it was to do would only time out)."""
    for name, process in processes.items():
        code = process.process.poll()
        if code is not None:
            lines = (tmp_path / f"{name}.log").read_text(errors="replace").strip().splitlines()
            raise AssertionError(f"instance {name} exited ({code}): {lines[-1] if lines else ''}")
    return True


def holder_pid(location: StateLocation, partition: int) -> int:
    """The pid of the process holding the partition's lease (holder: host, pid, tag)."""
    return int(holders(location)[f"verdicts-{partition}"].split(":")[1])


# --------------------------------------------------------------------------- what people see


def incidents(location: StateLocation) -> list[IncidentListing]:
    return list_incidents(location, open_only=False, limit=100)


def the_groups(location: StateLocation) -> list[IncidentListing]:
    return [i for i in incidents(location) if i.row.rule == "group"]


def posted(slack: LocalSlackWithHistory) -> list[dict[str, Any]]:
    """Messages the bot posted (not file shares), as they read now."""
    return [m for m in list(slack.messages) if m.get("subtype") is None]


def text_of(message: dict[str, Any]) -> str:
    return orjson.dumps(message.get("blocks") or []).decode() + str(message["text"])


def thread_of(slack: LocalSlackWithHistory, parent_ts: str) -> list[str]:
    """The replies' texts in the thread, in order."""
    return [m["text"] for m in posted(slack) if m.get("thread_ts") == parent_ts]


def tickets(jira: LocalJira) -> list[dict[str, Any]]:
    return list(jira.issues.values())


def group_opened(
    location: StateLocation, slack: LocalSlackWithHistory, jira: LocalJira, doc_types: set[str]
) -> bool:
    """A group incident decided, its parent posted, its ticket created, and every type's
    incident its member (each owner makes its own waiting incidents members when it next
    reads the groups: the coordinator writes only the group's row)."""
    listed = incidents(location)
    groups = [i.row for i in listed if i.row.rule == "group"]
    if len(groups) != 1:
        return False
    gid, label = groups[0].incident_id, incident_label(groups[0].incident_id)
    members = {i.row.doc_type: i.row.group_id for i in listed if i.row.rule != "group"}
    return (
        members == dict.fromkeys(doc_types, gid)
        and parents_by_label(posted(slack))[label] >= 1
        and any(label in t["fields"]["labels"] for t in tickets(jira))
    )


def group_resolved(location: StateLocation) -> bool:
    return [g.row.state for g in the_groups(location)] == ["resolved"]


def check_the_group_opened(
    location: StateLocation,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    doc_types: set[str],
) -> str:
    """One group of every type, one parent naming them all, one ticket, nothing of a member
    on its own. Returns the parent's ts."""
    (group,) = the_groups(location)
    gid = group.row.incident_id
    label = incident_label(gid)
    members = {i.row.doc_type: i.row for i in incidents(location) if i.row.rule != "group"}
    assert set(members) == doc_types
    assert {m.group_id for m in members.values()} == {gid}, "a type not in the group"
    assert {m.held_by for m in members.values()} == {None}
    assert {m["doc_type"] for m in group.row.record["members"].values()} == doc_types
    assert parents_by_label(posted(slack)) == {label: 1}
    (parent,) = [m for m in posted(slack) if not m.get("thread_ts")]
    assert f"across {len(doc_types)} doc types" in parent["text"], parent["text"]
    missing = [doc for doc in sorted(doc_types) if f"`{doc}`" not in text_of(parent)]
    assert missing == [], f"the group's parent does not name {missing}"
    (ticket,) = tickets(jira)
    assert label in ticket["fields"]["labels"]
    assert f"{CODE} across {len(doc_types)} doc types" in ticket["fields"]["summary"]
    for member in members.values():
        own = incident_label(member.incident_id)
        assert own not in ticket["fields"]["labels"]
    return str(parent["ts"])


def check_the_group_resolved_once(
    job: JobSettings,
    location: StateLocation,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    doc_types: set[str],
    early: set[str],
) -> None:
    """The group and every member resolved; one thread, one ticket, the resolution once in
    each, no reply or comment doubled; each member's own drift events once each (opened,
    escalated unless it recovered early, resolved)."""
    (group,) = the_groups(location)
    gid, label = group.row.incident_id, incident_label(group.row.incident_id)
    assert group.row.state == "resolved"
    members = {i.row.doc_type: i.row for i in incidents(location) if i.row.rule != "group"}
    assert set(members) == doc_types
    assert {m.state for m in members.values()} == {"resolved"}
    assert {m.group_id for m in members.values()} == {gid}
    entries = group.row.record["members"].values()
    assert {m["doc_type"] for m in entries} == doc_types
    assert {m["state"] for m in entries} == {"resolved"}

    # Slack: the group's parent alone, every other message a reply in its thread.
    assert parents_by_label(posted(slack)) == {label: 1}
    parents = [m for m in posted(slack) if not m.get("thread_ts")]
    assert len(parents) == 1, [m["text"] for m in parents]
    parent = parents[0]
    assert group.refs.slack_ts == parent["ts"]
    strays = [m["text"] for m in posted(slack) if m.get("thread_ts") not in (None, parent["ts"])]
    assert strays == [], "messages outside the group's thread"
    assert f"across {len(doc_types)} doc types" in parent["text"], parent["text"]
    missing = [doc for doc in sorted(doc_types) if f"`{doc}`" not in text_of(parent)]
    assert missing == [], f"the group's parent does not name {missing}"
    replies = thread_of(slack, parent["ts"])
    doubled = [text for text, n in Counter(replies).items() if n > 1]
    assert doubled == [], f"replies doubled in the group's thread: {doubled}"
    resolutions = [i for i, text in enumerate(replies) if text.startswith("Resolved")]
    assert resolutions == [len(replies) - 1], f"resolution replies: {replies}"
    for doc in doc_types:
        recovered = [r for r in replies if r.endswith(f"recovered: {doc}")]
        assert len(recovered) <= 1, f"{doc} recovered {len(recovered)} times: {replies}"

    # Jira: the group's ticket alone, done once, its resolution comment once.
    (ticket,) = tickets(jira)
    assert label in ticket["fields"]["labels"]
    assert ticket["fields"]["status"] == "Done"
    done = [h for h in ticket["history"] if h["to"] == "Done"]
    assert len(done) == 1, ticket["history"]
    comments = [c["body"] for c in ticket["comments"]]
    assert [n for n in Counter(comments).values() if n > 1] == [], "comments doubled"
    assert [c.split(" ")[0] for c in comments].count("Resolved") == 1, comments
    assert comments[-1].startswith("Resolved"), comments

    # Every member's own drift events, once each (deduplicated on event_id, as documented).
    events = drift_events(job)
    for doc, member in members.items():
        mine = {e.event_id: e for e in events if e.incident_id == member.incident_id}
        expected = [ALERT, RESOLVED] if doc in early else [ALERT, ALERT, RESOLVED]
        assert [e.event_type for e in mine.values()] == expected, doc
    assert {e.incident_id for e in events} == {m.incident_id for m in members.values()}


# --------------------------------------------------------------------------- the tests


def test_types_hit_together_on_both_instances_get_one_group_resolved_once(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
) -> None:
    """Eight types, two on each partition, open at minute 2 with the same diagnosis: one
    group whichever instance owns them; they escalate at minute 3 and recover at minute 8:
    the group resolves once."""
    print(f"\nlogs: {tmp_path}")
    partitions = verdict_partitions(job_settings)
    assert len(partitions) >= 2, "the verdicts topic needs partitions to share"
    configs, location = grouping_instances(job_settings, tmp_path, slack, jira, postgres_url)
    processes = start(configs, tmp_path)
    try:
        wait_until(lambda: ready(configs[0]) and ready(configs[1]), 60, "both to be ready")
        wait_until(lambda: held_by(location, partitions, 2), 60, "a and b share the work")
        series = faults("dq", partitions)
        doc_types = set(series)
        # Every type opens at minute 2 and waits for its group.
        produced = produce_on(job_settings, minutes(series, 0, 2))
        wait_until(
            lambda: (
                alive(processes, tmp_path)
                and group_opened(location, slack, jira, doc_types)
                and delivered_everything(location, produced)
            ),
            90,
            "the group to be posted",
        )
        check_the_group_opened(location, slack, jira, doc_types)
        # They escalate at minute 3 and recover at minute 8.
        produced += produce_on(job_settings, minutes(series, 3, len(LIFECYCLE) - 1))
        wait_until(
            lambda: (
                alive(processes, tmp_path)
                and group_resolved(location)
                and delivered_everything(location, produced)
            ),
            90,
            "the group to resolve",
        )
    finally:
        codes = {name: process.stop() for name, process in processes.items()}
    assert codes == {"a": 0, "b": 0}

    check_the_group_resolved_once(job_settings, location, slack, jira, doc_types, early=set())


@pytest.mark.parametrize("when", ["between", "post-in-flight"])
def test_the_other_instance_finishes_the_group_of_a_killed_owner_of_partition_0(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
    when: str,
) -> None:
    """The group opens; the types escalate, one type per partition recovers early (the group
    updated each time). The owner of partition 0, who alone posts the group, is killed
    (SIGKILL) once those updates are all delivered (``between``), or while its second post
    of them hangs in Slack, sent and not answered (``post-in-flight``: Slack never carries
    it out), and its state directory is deleted. The other instance takes its partitions,
    its members and the group: what was left is posted once, the rest recover, the group
    resolves once in the same thread and ticket."""
    print(f"\nlogs: {tmp_path}")
    partitions = verdict_partitions(job_settings)
    assert len(partitions) >= 2, "the verdicts topic needs partitions to share"
    configs, location = grouping_instances(job_settings, tmp_path, slack, jira, postgres_url)
    processes = start(configs, tmp_path)
    running = dict(processes)
    try:
        wait_until(lambda: ready(configs[0]) and ready(configs[1]), 60, "both to be ready")
        wait_until(lambda: held_by(location, partitions, 2), 60, "a and b share the work")
        series = faults("kill", partitions, early=0)
        doc_types = set(series)
        early = {doc for doc in doc_types if doc.endswith("-0")}
        produced = produce_on(job_settings, minutes(series, 0, 2))
        wait_until(
            lambda: (
                alive(running, tmp_path)
                and group_opened(location, slack, jira, doc_types)
                and delivered_everything(location, produced)
            ),
            90,
            "the group to be posted",
        )
        parent_ts = check_the_group_opened(location, slack, jira, doc_types)
        pid = holder_pid(location, 0)
        (name,) = [n for n, p in processes.items() if p.pid == pid]
        if when == "post-in-flight":
            # The first post of the next changes goes through, the second hangs.
            slack.faults.add(
                Fault(method="chat.postMessage", skip=1, times=1, delay_s=HANG_S, status=503)
            )
        # Minutes 3-5: the others escalate, the early ones recover (the group updated).
        produced += produce_on(job_settings, minutes(series, 3, 5))

        def recovered() -> int:
            return sum("recovered: " in r for r in thread_of(slack, parent_ts))

        if when == "between":
            wait_until(
                lambda: (
                    alive(running, tmp_path)
                    and recovered() == len(early)
                    and delivered_everything(location, produced)
                ),
                90,
                "the early recoveries to be posted",
            )
        else:
            wait_until(
                lambda: alive(running, tmp_path) and slack.faults.snapshot() == [],
                90,
                "a post of the group to hang in Slack",
            )
        running.pop(name).kill9()
        killed = time.monotonic()
        shutil.rmtree(tmp_path / name, ignore_errors=True)  # its host is gone, disk and all
        replies = len(thread_of(slack, parent_ts))
        print(f"killed {name} (partition 0's owner, {when}) with {replies} replies posted")
        if when == "post-in-flight":
            assert replies == 1, "the posts after the hanging one waited for it"
        # Minutes 6-8: the rest recover; the survivor resolves the group.
        produced += produce_on(job_settings, minutes(series, 6, len(LIFECYCLE) - 1))
        wait_until(
            lambda: alive(running, tmp_path) and held_by(location, partitions, 1),
            60,
            "the survivor to own every partition",
        )
        print(f"the survivor owned every partition {time.monotonic() - killed:.1f} s after")
        wait_until(
            lambda: (
                alive(running, tmp_path)
                and group_resolved(location)
                and delivered_everything(location, produced)
            ),
            120,
            "the survivor to resolve the group",
        )
    finally:
        for process in processes.values():
            if process.process.poll() is None and process not in running.values():
                process.kill9()
        codes = {name: process.stop() for name, process in running.items()}
    assert set(codes.values()) == {0}, codes

    check_the_group_resolved_once(job_settings, location, slack, jira, doc_types, early)
