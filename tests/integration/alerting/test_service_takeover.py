"""Two `anchorwatch alerting serve` processes on one state in PostgreSQL: the leader is
killed (SIGKILL) right after Slack accepted a post of an open incident and its state
directory is deleted; the standby takes the lead when the lease ends and finishes every
incident: one Slack thread with its replies in order, one Jira ticket with its comments in
order, the drift events once each."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.postgres import PostgresDatabase
from tests.support.alerting import (
    LocalSlackWithHistory,
    lifecycle,
)
from tests.support.alerting_instances import LEASE_S, check_every_incident, two_instances
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    produce,
    ready,
    service_env,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_standby_finishes_the_incidents_of_a_killed_leader_whose_disk_is_gone(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
) -> None:
    docs = [f"takeover-{i}" for i in range(3)]
    verdicts = sorted(
        (v for i, d in enumerate(docs) for v in lifecycle(d, first_minute=i % 2)),
        key=lambda v: v.window.window_start_ms,
    )
    half = len(verdicts) // 2
    configs, location = two_instances(
        job_settings, tmp_path, slack, jira, postgres_url, batch_max=4
    )
    leader = ServiceProcess(
        service_env(configs[0]), tmp_path / "a.log", crash_at="send_after:slack@3"
    )
    wait_until(lambda: ready(configs[0]), 60, "the first instance to lead and be ready")
    standby = ServiceProcess(service_env(configs[1]), tmp_path / "b.log")
    try:
        time.sleep(LEASE_S)  # the standby is up, and waits
        assert standby.process.poll() is None
        assert not ready(configs[1])
        # A standby is live (its probes answer) and not ready: it is not the leader.
        probe = f"http://127.0.0.1:{configs[1]['alerting']['metrics_port']}"
        assert requests.get(f"{probe}/healthz", timeout=5).status_code == 200
        waiting = requests.get(f"{probe}/readyz", timeout=5)
        assert waiting.status_code == 503
        assert waiting.json()["standby"] is True
        produced = produce(job_settings, verdicts[:half])
        # The leader dies right after Slack accepted its third post (a send in flight).
        assert leader.wait(90) == -9, f"the leader did not reach its crash point: {tmp_path}"
        killed = time.monotonic()
        shutil.rmtree(tmp_path / "a", ignore_errors=True)  # its host is gone, disk and all
        produced += produce(job_settings, verdicts[half:])
        wait_until(lambda: ready(configs[1]), 60, "the standby to take the lead")
        took_over = time.monotonic() - killed
        wait_until(lambda: delivered_everything(location, produced), 90, "the standby to finish")
        print(f"\nstandby ready {took_over:.1f} s after the leader's kill -9 (lease {LEASE_S} s)")
        assert took_over < LEASE_S + 10
    finally:
        leader.kill9()
        assert standby.stop() == 0

    outcomes = check_every_incident(job_settings, location, slack, jira, set(docs))
    # The post the leader died after was found in Slack by the new leader, not sent again.
    assert "reconciled" in outcomes


@pytest.mark.parametrize("inside_a_write", [False, True], ids=["between", "inside-a-write"])
def test_a_leader_paused_past_its_lease_posts_nothing_when_it_wakes_up(
    job_settings: JobSettings,
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    postgres_url: PostgresDatabase,
    inside_a_write: bool,
) -> None:
    """SIGSTOP of the leader past its lease, the standby takes over and finishes, SIGCONT:
    the old leader finds a newer epoch at its first write (or renewal) and stops, having
    posted nothing more. ``inside_a_write``: the leader stops itself inside its first
    batch's transaction (written, holding the state's write lock, not committed); the
    standby still leads once the lease ends, not when the pause does, by ending that
    transaction (leadership.py), and the woken leader's COMMIT fails."""
    docs = [f"paused-{i}" for i in range(2)]
    verdicts = sorted(
        (v for d in docs for v in lifecycle(d)), key=lambda v: v.window.window_start_ms
    )
    half = len(verdicts) // 2
    configs, location = two_instances(job_settings, tmp_path, slack, jira, postgres_url)
    env = service_env(configs[0])
    if inside_a_write:
        env["ANCHORWATCH_ALERTING_TEST_CRASH_WITH"] = "stop"
    pause_at = "batch_in_commit" if inside_a_write else None
    leader = ServiceProcess(env, tmp_path / "a.log", crash_at=pause_at)
    standby: ServiceProcess | None = None
    try:
        wait_until(lambda: ready(configs[0]), 60, "the first instance to lead and be ready")
        standby = ServiceProcess(service_env(configs[1]), tmp_path / "b.log")
        produced = produce(job_settings, verdicts[:half])
        if inside_a_write:
            wait_until(lambda: leader.stopped, 60, "the leader to stop inside its write")
        else:
            wait_until(lambda: delivered_everything(location, produced), 60, "the leader's posts")
            os.kill(leader.pid, signal.SIGSTOP)
        paused = time.monotonic()
        wait_until(lambda: ready(configs[1]), 60, "the standby to take the lead")
        took_s = time.monotonic() - paused
        print(f"\nthe standby led {took_s:.1f} s after the pause (lease {LEASE_S} s)")
        produced += produce(job_settings, verdicts[half:])
        wait_until(lambda: delivered_everything(location, produced), 90, "the standby to finish")
        before = len(slack.messages), sum(len(i["comments"]) for i in jira.issues.values())
        os.kill(leader.pid, signal.SIGCONT)
        code = leader.wait(30)
        assert code not in (None, 0), f"the old leader went on after waking up ({code})"
        after = len(slack.messages), sum(len(i["comments"]) for i in jira.issues.values())
        assert after == before, "the old leader posted after it lost the lead"
        said = (tmp_path / "a.log").read_text()
        # Its renewal, its next write's fence or (inside a write) its COMMIT says so first.
        stopped_by = ("no longer leads", "lead lost", "connection to the alerting state ended")
        assert any(reason in said for reason in stopped_by)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leader.pid, signal.SIGCONT)
        leader.kill9()
        if standby is not None:
            assert standby.stop() == 0

    check_every_incident(job_settings, location, slack, jira, set(docs))
