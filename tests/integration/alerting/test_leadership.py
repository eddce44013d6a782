"""The lead of a shared alerting state (PostgreSQL): one leader at a time, takeover when its
lease ends or it lets go, and fencing: a leader that lost the lead writes nothing more."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from pydantic import SecretStr

from anchorwatch.alerting import database
from anchorwatch.alerting.database import DatabaseError, StateLocation
from anchorwatch.alerting.leadership import Lease, LostLead
from anchorwatch.alerting.store import BatchWrite, Store
from anchorwatch.cli import cli
from anchorwatch.stack.postgres import PostgresDatabase
from tests.support.alerting_store import entry, row

pytestmark = pytest.mark.integration


@pytest.fixture
def state(tmp_path: Path, postgres_url: PostgresDatabase) -> StateLocation:
    return StateLocation(tmp_path, postgres_url.url, SecretStr(postgres_url.password))


def test_one_instance_leads_and_a_standby_takes_over_when_it_lets_go(
    state: StateLocation,
) -> None:
    first, second = Lease(state, lease_s=30), Lease(state, lease_s=30)
    assert first.try_acquire()
    assert not second.try_acquire()  # it leads, lease unexpired
    holder, epoch, left_ms = first.holder_now() or ("", 0, 0)
    assert (holder, epoch) == (first.holder, first.epoch)
    assert 25_000 < left_ms <= 30_000
    assert first.renew()
    first.release()  # a clean stop: no need to wait for the expiry
    assert second.try_acquire()
    assert second.epoch == 2
    assert not first.renew()
    first.close()
    second.close()


def test_a_standby_takes_an_expired_lease_and_the_old_leader_is_fenced(
    state: StateLocation,
) -> None:
    old, new = Lease(state, lease_s=1), Lease(state, lease_s=1)
    assert old.try_acquire()
    store = Store(state, fence=old.fence)
    store.commit_batch(BatchWrite(now_ms=1, incidents=[row("i1")]), keep_verdict_ids=10)
    stop = threading.Event()
    started = time.monotonic()
    assert new.acquire(stop, poll_s=0.1)  # waits as a standby until the lease has ended
    assert time.monotonic() - started > 0.5
    assert new.epoch == (old.epoch or 0) + 1
    # The old leader wakes up (it was paused): its next writes are refused, whole.
    with pytest.raises(LostLead, match="no longer leads"):
        store.commit_batch(
            BatchWrite(now_ms=2, incidents=[row("i2")], outbox=[entry("i2", 1)]),
            keep_verdict_ids=10,
        )
    with pytest.raises(LostLead):
        store.mark_attempting([1], 3)
    assert not old.renew()
    reader = Store(state, create=False)
    assert [i.row.incident_id for i in reader.list_incidents(open_only=False, limit=9)] == ["i1"]
    assert reader.outbox_rows() == []
    # The new leader writes.
    Store(state, fence=new.fence).commit_batch(
        BatchWrite(now_ms=4, incidents=[row("i3")]), keep_verdict_ids=10
    )
    assert {i.row.incident_id for i in reader.list_incidents(open_only=False, limit=9)} == {
        "i1",
        "i3",
    }


def test_a_takeover_waits_for_a_write_that_passed_the_fence(state: StateLocation) -> None:
    """The old leader's write that checked its epoch commits before the new leader's epoch
    exists: no write of an old leader lands after a takeover."""
    old, new = Lease(state, lease_s=1), Lease(state, lease_s=1)
    assert old.try_acquire()
    time.sleep(1.1)  # its lease has ended, unrenewed; nobody has taken it yet
    store = Store(state, fence=old.fence)
    taken = threading.Event()

    def take() -> None:
        if new.try_acquire():
            taken.set()

    took = threading.Thread(target=take)

    def while_writing() -> None:
        took.start()
        time.sleep(0.5)
        assert not taken.is_set(), "the lease was taken over inside the old leader's write"

    store.commit_batch(
        BatchWrite(now_ms=1, incidents=[row("i1")]),
        keep_verdict_ids=10,
        before_commit=while_writing,
    )
    took.join(timeout=10)
    assert taken.is_set()
    assert new.epoch == (old.epoch or 0) + 1
    with pytest.raises(LostLead):
        store.commit_batch(BatchWrite(now_ms=2, incidents=[row("i2")]), keep_verdict_ids=10)
    listed = Store(state, create=False).list_incidents(open_only=False, limit=9)
    assert [i.row.incident_id for i in listed] == ["i1"]


def test_keeping_the_lease_reports_its_loss_once(state: StateLocation) -> None:
    leader, other = Lease(state, lease_s=1.2), Lease(state, lease_s=1.2)
    assert leader.try_acquire()
    stop, lost = threading.Event(), list[str]()
    keeper = threading.Thread(target=leader.keep, args=(stop, lost.append))
    keeper.start()
    time.sleep(1.5)
    assert not other.try_acquire()  # renewed: still led
    leader.epoch = -1  # as if another epoch had been taken meanwhile: the renewal fails
    keeper.join(timeout=5)
    assert not keeper.is_alive()
    assert len(lost) == 1
    assert "another instance took the lead" in lost[0]
    stop.set()


def test_a_lease_needs_the_state_in_postgresql(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state_url"):
        Lease(StateLocation(tmp_path), lease_s=5)


def test_the_leases_command_names_who_leads(
    state: StateLocation, postgres_url: PostgresDatabase, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text(postgres_url.password)
    config = tmp_path / "anchorwatch.toml"
    config.write_text(
        f'[alerting]\nstate_dir = "{state.directory}"\nstate_url = "{postgres_url.url}"\n'
        f'state_password_file = "{secret}"\n'
    )

    def leases(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--config", str(config), "alerting", "leases", *args])

    # No state there yet: the error the command line prints (AnchorwatchError) says so.
    assert isinstance(leases().exception, DatabaseError)
    assert "has the service run there?" in str(leases().exception)
    Store(state).close()  # a state, but no instance has taken a lease on it
    assert leases().output.strip() == "no lease taken yet: no instance has started on this state"
    leader = Lease(state, lease_s=30, holder="host-a:1:ab")
    partition = Lease(state, lease_s=30, holder="host-b:2:cd", name="verdicts-3")
    assert leader.try_acquire()
    assert partition.try_acquire()
    partition.release()
    shown = [json.loads(line) for line in leases("--json").output.splitlines()]
    assert [(s["name"], s["holder"], s["epoch"], s["expired"]) for s in shown] == [
        ("alerting", "host-a:1:ab", 1, False),
        ("verdicts-3", "host-b:2:cd", 1, True),
    ]
    assert 25 < shown[0]["expires_in_s"] <= 30
    table = leases().output.splitlines()
    assert table[1].split()[:2] == ["alerting", "1"]
    assert table[1].split()[2].endswith("s")  # seconds left
    assert table[1].endswith("host-a:1:ab")
    assert "expired" in table[2]
    leader.close()
    partition.close()


def test_the_leases_command_refuses_a_sqlite_state(tmp_path: Path) -> None:
    config = tmp_path / "anchorwatch.toml"
    config.write_text(f'[alerting]\nstate_dir = "{tmp_path / "state"}"\n')
    result = CliRunner().invoke(cli, ["--config", str(config), "alerting", "leases"])
    assert result.exit_code == 1
    assert "SQLite" in result.output
    assert "no leases" in result.output


def test_instances_starting_together_create_the_state_once(state: StateLocation) -> None:
    """Several instances open a fresh state at the same moment (the work split starts them
    together): each schema is created once, under its lock, and none fails on the catalog."""
    failures: list[BaseException] = []
    for attempt in range(30):  # the race showed in 4 of 30 before the lock
        schema = f"together_{attempt}"
        ready = threading.Barrier(6)

        def open_state(schema: str = schema, ready: threading.Barrier = ready) -> None:
            ready.wait()
            try:
                database.Database(state, filename="x", schema=schema).close()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=open_state) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert failures == []
