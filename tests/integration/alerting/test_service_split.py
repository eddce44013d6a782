"""Two `anchorwatch alerting serve` processes that share the work (``alerting.work_split``):
each owns some verdict partitions and posts for their doc types. One is killed (SIGKILL)
right after Slack accepted a post, its state directory deleted: the other takes its
partitions when their leases end and finishes every incident. One paused past its leases
(SIGSTOP, then SIGCONT) posts nothing for the partitions it lost. Either way: one Slack
thread per incident with its replies in order, one Jira ticket with its comments in order,
the drift events once each."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from anchorwatch.alerting.crash import CrashPoints
from anchorwatch.alerting.database import Database, StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import AlertingService, list_incidents
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA, Store
from anchorwatch.contracts import Verdict
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.postgres import PostgresDatabase
from anchorwatch.stack.processes import free_port
from tests.support.alerting import (
    LocalSlackWithHistory,
    lifecycle,
    parents_by_label,
)
from tests.support.alerting_instances import (
    LEASE_S,
    Config,
    check_every_incident,
    two_instances,
)
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    load_settings,
    ready,
    service_env,
)
from tests.support.alerting_split import held_by, holders, produce_on, verdict_partitions
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def split_instances(
    job: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    database: PostgresDatabase,
) -> tuple[list[Config], StateLocation]:
    """Instances "a" and "b" sharing the work on one state in ``database``."""
    return two_instances(
        job,
        tmp_path,
        slack,
        jira,
        database,
        sections={"grouping": {"enabled": False}},
        work_split=True,
        batch_max=4,
    )


def lifecycles(
    prefix: str, partitions: list[int], first_minute: int = 0
) -> list[tuple[int, Verdict]]:
    """Two doc types per partition, each through an incident's whole life, in window order."""
    placed = [
        (p, v)
        for p in partitions
        for k in range(2)
        for v in lifecycle(f"{prefix}-{p}-{k}", first_minute=first_minute + k)
    ]
    return sorted(placed, key=lambda pv: pv[1].window.window_start_ms)


def test_the_other_instance_finishes_the_incidents_of_a_killed_one_whose_disk_is_gone(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
) -> None:
    partitions = verdict_partitions(job_settings)
    assert len(partitions) >= 2, "the verdicts topic needs partitions to share"
    configs, location = split_instances(job_settings, tmp_path, slack, jira, postgres_url)
    a = ServiceProcess(service_env(configs[0]), tmp_path / "a.log", crash_at="send_after:slack@3")
    b = ServiceProcess(service_env(configs[1]), tmp_path / "b.log")
    try:
        wait_until(lambda: ready(configs[0]) and ready(configs[1]), 60, "both to be ready")
        wait_until(lambda: held_by(location, partitions, 2), 60, "a and b share the work")
        first = lifecycles("split", partitions)
        produced = produce_on(job_settings, first)
        # a dies right after Slack accepted its third post (a send in flight).
        assert a.wait(90) == -9, f"a did not reach its crash point: {tmp_path}"
        killed = time.monotonic()
        shutil.rmtree(tmp_path / "a", ignore_errors=True)  # its host is gone, disk and all
        # New incidents on every partition: b decides those of a's former partitions too.
        later = lifecycles("later", partitions, first_minute=20)
        produced += produce_on(job_settings, later)
        wait_until(
            lambda: (
                len(set(holders(location).values())) == 1
                and len(holders(location)) == len(partitions)
            ),
            60,
            "b to own every partition",
        )
        took_over = time.monotonic() - killed
        wait_until(lambda: delivered_everything(location, produced), 120, "b to finish")
        print(f"\nb owned a's partitions {took_over:.1f} s after a's kill -9 (lease {LEASE_S} s)")
        assert took_over < 30
    finally:
        a.kill9()
        assert b.stop() == 0

    doc_types = {v.window.doc_type for _, v in first + later}
    outcomes = check_every_incident(job_settings, location, slack, jira, doc_types)
    # The post a died after was found in Slack by b, not sent again.
    assert "reconciled" in outcomes


@pytest.mark.parametrize("inside_a_write", [False, True], ids=["between", "inside-a-write"])
def test_an_instance_paused_past_its_leases_posts_nothing_for_the_partitions_it_lost(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
    inside_a_write: bool,
) -> None:
    """SIGSTOP of a past its leases and its group session; b takes a's partitions and
    finishes what arrives; SIGCONT: a's writes for them are fenced, so it posts nothing
    for them, and goes on sharing the work (it is not stopped) once the group rebalances.
    ``inside_a_write``: a stops itself inside its first batch's transaction, holding the
    state's write lock, which b ends once a's leases have (leadership.py)."""
    partitions = verdict_partitions(job_settings)
    configs, location = split_instances(job_settings, tmp_path, slack, jira, postgres_url)
    env_a = service_env(configs[0])
    if inside_a_write:
        env_a["ANCHORWATCH_ALERTING_TEST_CRASH_WITH"] = "stop"
    pause_at = "batch_in_commit" if inside_a_write else None
    a = ServiceProcess(env_a, tmp_path / "a.log", crash_at=pause_at)
    b = ServiceProcess(service_env(configs[1]), tmp_path / "b.log")
    try:
        wait_until(lambda: ready(configs[0]) and ready(configs[1]), 60, "both to be ready")
        wait_until(lambda: held_by(location, partitions, 2), 60, "a and b share the work")
        first = lifecycles("paused", partitions)
        half = len(first) // 2
        produced = produce_on(job_settings, first[:half])
        if inside_a_write:
            wait_until(lambda: a.stopped, 60, "a to stop inside its first batch's write")
        else:
            wait_until(lambda: delivered_everything(location, produced), 60, "the first posts")
            os.kill(a.pid, signal.SIGSTOP)
        wait_until(
            lambda: (
                len(set(holders(location).values())) == 1
                and len(holders(location)) == len(partitions)
            ),
            60,
            "b to own every partition",
        )
        produced += produce_on(job_settings, first[half:])
        wait_until(lambda: delivered_everything(location, produced), 90, "b to finish")
        before = len(slack.messages), sum(len(i["comments"]) for i in jira.issues.values())
        os.kill(a.pid, signal.SIGCONT)
        # a wakes believing it owns its partitions; the group and its leases say otherwise.
        time.sleep(LEASE_S * 3)
        after = len(slack.messages), sum(len(i["comments"]) for i in jira.issues.values())
        assert after == before, "a posted for partitions it no longer owns"
        assert a.process.poll() is None, "a stopped instead of going on with its share"
        # The pair goes on: a rejoins, the partitions are shared again, new incidents are
        # posted once each whoever owns them.
        wait_until(lambda: held_by(location, partitions, 2), 90, "a to share again")
        later = lifecycles("resumed", partitions, first_minute=20)
        produced += produce_on(job_settings, later)
        wait_until(lambda: delivered_everything(location, produced), 120, "both to finish")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(a.pid, signal.SIGCONT)
        assert a.stop() == 0
        assert b.stop() == 0

    doc_types = {v.window.doc_type for _, v in first + later}
    check_every_incident(job_settings, location, slack, jira, doc_types)


def test_a_batch_for_a_partition_whose_lease_another_took_commits_and_posts_nothing(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
) -> None:
    """While the group still assigns a partition to an instance, another holder takes the
    partition's lease (as after a pause past it). The instance decides nothing for it: a
    batch for it is refused whole by the fence (no incident, no outbox entry, no post), or
    the lease's next renewal finds it lost first, whichever comes first. It gives the
    partition up, goes on with the rest of its share, and takes the partition again once
    that lease ends unrenewed (the group still assigns it there)."""
    partitions = verdict_partitions(job_settings)
    configs, location = split_instances(job_settings, tmp_path, slack, jira, postgres_url)
    stolen, kept = partitions[0], partitions[1]

    def steal() -> None:
        """Another holder takes the stolen partition's lease, between the decision of a
        batch and its commit (as when this instance was paused just there)."""
        database = Database(location, filename=FILENAME, schema=PG_SCHEMA)
        try:
            with database.write() as db:
                db.execute(
                    "UPDATE leader SET holder = 'another', epoch = epoch + 1, "
                    "expires_ms = expires_ms + ? WHERE name = ?",
                    (LEASE_S * 3000, f"verdicts-{stolen}"),
                )
        finally:
            database.close()

    crash = CrashPoints("batch_before_commit", action=steal)
    service = AlertingService(load_settings(configs[0]), crash=crash).start()
    try:
        wait_until(lambda: len(holders(location)) == len(partitions), 60, "every partition owned")
        before = len(slack.messages)
        # Interleaved, so batches mix both partitions: a batch refused for the stolen one
        # must not skip the kept one's verdicts in it.
        stolen_verdicts = [(stolen, v) for v in lifecycle("fenced-0")]
        kept_verdicts = [(kept, v) for v in lifecycle("kept-0")]
        mixed = [pv for pair in zip(stolen_verdicts, kept_verdicts, strict=False) for pv in pair]
        produce_on(job_settings, mixed[:2])  # one of each: the first batch holds both
        time.sleep(1)
        produce_on(job_settings, mixed[2:])
        produced_kept = len(kept_verdicts)
        split = service._split
        assert split is not None
        wait_until(lambda: stolen not in split.assigned, 30, "the stolen partition given up")
        wait_until(
            lambda: "kept-0" in decided(location) and delivered_kept(location, kept, produced_kept),
            60,
            "the kept partition's incident posted",
        )
        incidents = list_incidents(location, open_only=False, limit=10)
        assert "fenced-0" not in {i.row.doc_type for i in incidents}
        kept_ids = {v.verdict_id for _, v in kept_verdicts}
        store = Store(location, create=False)
        try:
            assert store.seen_verdicts(kept_ids) == kept_ids, "kept verdicts skipped"
        finally:
            store.close()
        labels = set(parents_by_label(slack.messages[before:]))
        assert labels == {incident_label(i.row.incident_id) for i in incidents}
        assert service.health()[0], "a fenced write stopped the instance"
        # The other holder never renews: the partition is this instance's again, and its
        # verdicts, read from the state's offset, are decided now.
        wait_until(lambda: stolen in split.assigned, 30, "the partition taken back")
        wait_until(
            lambda: "fenced-0" in decided(location),
            60,
            "the stolen partition's verdicts decided by its owner again",
        )
    finally:
        service.stop()


def decided(location: StateLocation) -> set[str]:
    """The doc types with an incident in the state."""
    return {i.row.doc_type for i in list_incidents(location, open_only=False, limit=100)}


def delivered_kept(location: StateLocation, partition: int, produced: int) -> bool:
    """The state's offset of ``partition`` covers what was produced, and nothing is pending."""
    store = Store(location, create=False)
    try:
        offsets = store.restore().offsets
        consumed = sum(o for (_, p), o in offsets.items() if p == partition)
        return consumed >= produced and sum(store.pending_counts().values()) == 0
    finally:
        store.close()


def test_a_third_instance_joins_and_takes_its_share_with_nothing_lost_or_doubled(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
) -> None:
    """Two instances share the partitions with incidents open on every one; a third joins
    mid-incident: the group rebalances (each partition moving is released by its owner at
    once and taken by the new one), and the incidents go on to their ends, each posted once
    whoever owned its partition at each step."""
    partitions = verdict_partitions(job_settings)
    assert len(partitions) >= 3, "three instances need three partitions to share"
    configs, location = split_instances(job_settings, tmp_path, slack, jira, postgres_url)
    third = {**configs[1], "alerting": {**configs[1]["alerting"], "metrics_port": free_port()}}
    third["alerting"]["state_dir"] = str(tmp_path / "c" / "state")
    a = ServiceProcess(service_env(configs[0]), tmp_path / "a.log")
    b = ServiceProcess(service_env(configs[1]), tmp_path / "b.log")
    c: ServiceProcess | None = None
    try:
        wait_until(lambda: ready(configs[0]) and ready(configs[1]), 60, "both to be ready")
        wait_until(lambda: held_by(location, partitions, 2), 60, "a and b share the work")
        first = lifecycles("scale", partitions)
        half = len(first) // 2
        produced = produce_on(job_settings, first[:half])
        wait_until(lambda: delivered_everything(location, produced), 60, "the first posts")
        c = ServiceProcess(service_env(third), tmp_path / "c.log")
        joined = time.monotonic()
        wait_until(
            lambda: (
                len(holders(location)) == len(partitions)
                and len(set(holders(location).values())) == 3
            ),
            60,
            "the third instance to own a share",
        )
        took = time.monotonic() - joined
        print(f"\nthe third instance owned partitions {took:.1f} s after it started")
        produced += produce_on(job_settings, first[half:])
        wait_until(lambda: delivered_everything(location, produced), 120, "all three to finish")
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
        if c is not None:
            assert c.stop() == 0

    check_every_incident(job_settings, location, slack, jira, {v.window.doc_type for _, v in first})
