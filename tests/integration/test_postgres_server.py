"""The private PostgreSQL server of the tests (tests/support/postgres.py, the
``postgres_server`` and ``postgres_url`` fixtures) is a real one: it asks for the password,
keeps each test's database apart, and leaves nothing behind when stopped."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from anchorwatch.stack.postgres import PostgresDatabase, PostgresServer

pytestmark = pytest.mark.integration

#: The databases the tests below were given, to check that no two share one.
_seen: list[str] = []


def _tables(conn: psycopg.Connection[tuple[object, ...]]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {str(name) for (name,) in rows.fetchall()}


def test_the_role_logs_in_with_its_password(postgres_url: PostgresDatabase) -> None:
    assert postgres_url.password not in postgres_url.url
    assert postgres_url.url.startswith("postgresql://anchorwatch@127.0.0.1:")
    with psycopg.connect(postgres_url.url, password=postgres_url.password) as conn:
        row = conn.execute("SELECT current_user, current_database(), 6 * 7").fetchone()
        version = conn.info.server_version
    assert row == ("anchorwatch", postgres_url.url.rsplit("/", 1)[1], 42)
    assert version >= 120000
    assert postgres_url.password not in repr(postgres_url)


def test_the_server_refuses_a_login_without_the_password(
    postgres_url: PostgresDatabase, tmp_path: Path
) -> None:
    # No password at all, and none from ~/.pgpass or PGPASSWORD either.
    nowhere = tmp_path / "no-pgpass"
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(postgres_url.url, password="", passfile=str(nowhere), connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(postgres_url.url, password="not-the-password", connect_timeout=5)


def test_the_superuser_is_not_reachable_over_tcp(postgres_server: PostgresServer) -> None:
    url = postgres_server.url.replace("anchorwatch@", "postgres@", 1)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(url, password=postgres_server.password, connect_timeout=5)


def test_two_databases_are_separate(
    postgres_url: PostgresDatabase, postgres_server: PostgresServer
) -> None:
    other = postgres_server.database("separate_from_the_fixture")
    try:
        assert other.url != postgres_url.url
        with psycopg.connect(postgres_url.url, password=postgres_url.password) as conn:
            conn.execute("CREATE TABLE only_here (id int PRIMARY KEY)")
            conn.execute("INSERT INTO only_here VALUES (1)")
            assert _tables(conn) == {"only_here"}
        with psycopg.connect(other.url, password=other.password) as conn:
            assert _tables(conn) == set()
            with pytest.raises(psycopg.errors.UndefinedTable):
                conn.execute("SELECT * FROM only_here")
    finally:
        postgres_server.drop_database("separate_from_the_fixture")


@pytest.mark.parametrize("turn", ["first", "second"])
def test_each_test_starts_from_an_empty_database(postgres_url: PostgresDatabase, turn: str) -> None:
    """Whichever runs second sees nothing of the first's table."""
    assert postgres_url.url not in _seen
    _seen.append(postgres_url.url)
    with psycopg.connect(postgres_url.url, password=postgres_url.password) as conn:
        assert _tables(conn) == set()
        conn.execute("CREATE TABLE left_by_a_test (turn text)")
        conn.execute("INSERT INTO left_by_a_test VALUES (%s)", (turn,))


def test_database_names_are_checked(postgres_server: PostgresServer) -> None:
    for name in ("bad-name", 'x"; DROP DATABASE anchorwatch; --', "Upper", "", "a" * 42):
        with pytest.raises(ValueError, match="not a database name"):
            postgres_server.new_database(name)
    with psycopg.connect(postgres_server.url, password=postgres_server.password) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_stop_ends_the_server_and_removes_its_files(tmp_path: Path) -> None:
    server = PostgresServer(tmp_path / "pg").start()
    pid, runtime, url = server.pid, server.runtime_dir, server.url
    assert pid is not None
    assert runtime is not None
    assert (runtime / "data" / "PG_VERSION").is_file()
    assert server.started_in > 0
    with psycopg.connect(url, password=server.password, autocommit=True) as conn:
        # A session still open when the server stops: fast shutdown ends it.
        lingering = psycopg.connect(server.admin_url)
        conn.execute("CREATE TABLE t (x int)")
    try:
        server.stop()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not (tmp_path / "pg").exists()
        assert not runtime.exists()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, password=server.password, connect_timeout=5)
        server.stop()  # a second stop is harmless
    finally:
        lingering.close()
