"""Connections to a shared alerting state (PostgreSQL) that end: made again between
transactions, an error inside one (nothing of it committed), and the takeover of a lease
whose holder was paused inside a write transaction, which ends that transaction instead of
waiting out the pause."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import psycopg
import pytest
from pydantic import SecretStr

from anchorwatch.alerting.database import (
    APPLICATION_NAME,
    LEASES_TABLE,
    Database,
    SessionEnded,
    StateLocation,
)
from anchorwatch.alerting.leadership import Lease
from anchorwatch.alerting.store import PG_SCHEMA, BatchWrite, Store
from anchorwatch.stack.postgres import PostgresDatabase
from tests.support.alerting_store import row

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def state(tmp_path: Path, postgres_url: PostgresDatabase) -> StateLocation:
    return StateLocation(tmp_path, postgres_url.url, SecretStr(postgres_url.password))


def _end_sessions(state: StateLocation, application_name: str) -> int:
    """Ends, as an administrator would, every session of ``application_name``."""
    assert state.url is not None
    assert state.password is not None
    with psycopg.connect(
        state.url, password=state.password.get_secret_value(), autocommit=True
    ) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    time.sleep(0.2)  # the server closes them asynchronously
    return len(rows)


def test_a_connection_ended_between_transactions_is_made_again(state: StateLocation) -> None:
    db = Database(state, filename="x", schema="sessions_a")
    db.script("CREATE TABLE IF NOT EXISTS t (v INTEGER);")
    assert _end_sessions(state, APPLICATION_NAME) >= 1  # a server restart looks the same
    with db.write():
        db.execute("INSERT INTO t (v) VALUES (1)")
    with db.read():
        assert db.execute("SELECT v FROM t").fetchall() == [(1,)]
    db.close()


def test_a_connection_ended_inside_a_transaction_commits_none_of_it(
    state: StateLocation,
) -> None:
    db = Database(state, filename="x", schema="sessions_b")
    db.script("CREATE TABLE IF NOT EXISTS t (v INTEGER);")

    def write_across_the_end() -> None:
        with db.write():
            db.execute("INSERT INTO t (v) VALUES (1)")
            _end_sessions(state, APPLICATION_NAME)
            db.execute("INSERT INTO t (v) VALUES (2)")  # not run elsewhere, outside it

    with pytest.raises(SessionEnded, match="ended"):
        write_across_the_end()
    assert not db.in_transaction
    with db.write():  # the next transaction connects again
        db.execute("INSERT INTO t (v) VALUES (3)")
    with db.read():
        assert db.execute("SELECT v FROM t").fetchall() == [(3,)]
    db.close()


#: A leader in a process of its own that stops itself (SIGSTOP) inside a write transaction
#: of the state: everything written, holding the schema's write lock, the COMMIT not sent.
_PAUSED_LEADER = """
import os, signal, sys
from pathlib import Path
from pydantic import SecretStr
from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.leadership import Lease
from anchorwatch.alerting.store import PG_SCHEMA, BatchWrite, Store
from tests.support.alerting_store import row

state = StateLocation(Path(sys.argv[1]), os.environ["STATE_URL"], SecretStr(os.environ["STATE_PW"]))
lease = Lease(state, lease_s=float(sys.argv[2]))
assert lease.try_acquire()
store = Store(state, fence=lease.fence)

def pause() -> None:
    print("paused in commit", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

try:
    store.commit_batch(
        BatchWrite(now_ms=1, incidents=[row("paused")]), keep_verdict_ids=10,
        before_commit=pause,
    )
    print("committed", flush=True)
except Exception as exc:
    print("refused:", type(exc).__name__, flush=True)
"""


@contextmanager
def paused_leader(state: StateLocation, tmp_path: Path, lease_s: float) -> Iterator[Popen[str]]:
    """A leader in a process of its own, stopped inside its write (``_PAUSED_LEADER``)."""
    assert state.url is not None
    assert state.password is not None
    Store(state).close()  # the schema exists before either starts
    env = {**os.environ, "STATE_URL": state.url, "STATE_PW": state.password.get_secret_value()}
    leader = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_LEADER, str(tmp_path / "leader"), str(lease_s)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert leader.stdout is not None
        assert leader.stdout.readline().strip() == "paused in commit"
        yield leader
    finally:
        if leader.poll() is None:
            os.kill(leader.pid, signal.SIGCONT)
            leader.kill()
            leader.wait(10)


def _woken(leader: Popen[str]) -> str:
    os.kill(leader.pid, signal.SIGCONT)
    out, _ = leader.communicate(timeout=30)
    return out.strip()


def _incidents(state: StateLocation) -> list[str]:
    listed = Store(state, create=False).list_incidents(open_only=False, limit=9)
    return sorted(i.row.incident_id for i in listed)


def test_a_standby_takes_over_from_a_leader_paused_inside_a_write(
    state: StateLocation, tmp_path: Path
) -> None:
    with paused_leader(state, tmp_path, lease_s=1.5) as leader:
        standby = Lease(state, lease_s=1.5)
        started = time.monotonic()
        # Before, it waited on the paused one's lock for the whole pause (lock_timeout).
        assert standby.acquire(threading.Event(), poll_s=0.1)
        took_s = time.monotonic() - started
        assert took_s < 6, f"took the lead after {took_s:.1f} s"
        Store(state, fence=standby.fence).commit_batch(
            BatchWrite(now_ms=2, incidents=[row("after")]), keep_verdict_ids=10
        )
        assert _woken(leader) == "refused: SessionEnded"
        assert _incidents(state) == ["after"]
        standby.close()


def test_a_writer_waiting_on_a_paused_holder_ends_it_once_its_leases_have_ended(
    state: StateLocation, tmp_path: Path
) -> None:
    """Not only a takeover: any write of another instance (a batch of the partitions it
    owns) that waits on the paused holder's lock goes through once the holder's leases have
    all ended."""
    with paused_leader(state, tmp_path, lease_s=1.5) as leader:
        started = time.monotonic()
        Store(state).commit_batch(
            BatchWrite(now_ms=2, incidents=[row("other")]), keep_verdict_ids=10
        )
        took_s = time.monotonic() - started
        assert took_s < 6, f"written after {took_s:.1f} s"
        assert _woken(leader) == "refused: SessionEnded"
        assert _incidents(state) == ["other"]


def test_a_holder_whose_lease_runs_is_waited_for_not_ended(
    state: StateLocation, tmp_path: Path
) -> None:
    """A holder merely slow inside its transaction, its lease still running: the others
    wait for it (at most their lock timeout), and its write commits."""
    with paused_leader(state, tmp_path, lease_s=60) as leader:
        waiting = Database(state, filename="x", schema=PG_SCHEMA, timeout_s=3)
        with pytest.raises(psycopg.errors.LockNotAvailable), waiting.write():
            pass
        waiting.close()
        assert _woken(leader) == "committed"
        assert _incidents(state) == ["paused"]


def test_the_lease_table_the_lock_waiters_read_is_the_one_leases_are_in() -> None:
    assert f"{PG_SCHEMA}.leader" == LEASES_TABLE
