"""Shared fixtures. Integration tests run against a real Kafka broker (and, where marked,
a real Flink session cluster) started once per session by the project's own stack code, on
free ports in a private state directory, and stopped at the end; tests of the PostgreSQL
state get a private PostgreSQL server the same way (tests/support/postgres.py), and a
fresh database each."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from anchorwatch.demo.slice import create_topics, delete_topics, new_run_id, run_scoped_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.settings import KafkaSettings
from anchorwatch.stack.postgres import PostgresDatabase, PostgresServer
from anchorwatch.stack.stack import Stack
from tests.support.stack import stack_on_free_ports

# Shared fixtures and helpers live in tests/support/; these modules hold fixtures for the
# whole suite (unit, integration), defined once.
pytest_plugins = ["tests.support.alerting_fixtures", "tests.support.journey"]

# Variables that steer the test run itself, not the code under test: kept.
_TEST_RUN_VARIABLES = ("ANCHORWATCH_TEST_", "ANCHORWATCH_SCREENSHOT_DIR", "ANCHORWATCH_JVM__")


@pytest.fixture(autouse=True)
def _no_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the documented defaults: ANCHORWATCH_* settings exported in a
    developer's shell (the docs' own `export` lines, a real Jira URL, ANCHORWATCH_CONFIG)
    must not reach the code under test or the processes a test starts."""
    for name in list(os.environ):
        if name.startswith("ANCHORWATCH_") and not name.startswith(_TEST_RUN_VARIABLES):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A running Kafka + Flink session cluster for the whole test session.

    ANCHORWATCH_TEST_STATE_DIR pins the state directory so CI can always stop it."""
    state = os.environ.get("ANCHORWATCH_TEST_STATE_DIR")
    state_dir = Path(state) if state else tmp_path_factory.mktemp("stack")
    s = stack_on_free_ports(state_dir, flink=True)
    try:
        s.up(with_flink=True)
        yield s
    finally:
        s.down()


@pytest.fixture(scope="session")
def kafka(stack: Stack) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=stack.kafka.bootstrap)


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Start a Kafka of this test's own (no Flink), for tests that stop, kill or pause it;
    keyword arguments are ``[topics]`` settings. Stopped at the end of the test."""
    started: list[Stack] = []

    def start(**topics: Any) -> Stack:
        state_dir = tmp_path / f"stack-{len(started)}"
        stack = stack_on_free_ports(state_dir, topics=topics)
        started.append(stack)
        stack.up(with_flink=False)
        return stack

    try:
        yield start
    finally:
        for stack in started:
            stack.down()


@pytest.fixture
def job_settings(kafka: KafkaSettings) -> Iterator[JobSettings]:
    """Job settings on topics private to this test (created now, deleted after)."""
    base = JobSettings.load(kafka={"bootstrap_servers": kafka.bootstrap_servers})
    settings = base.model_copy(update={"topics": run_scoped_topics(base.topics, new_run_id())})
    create_topics(settings)
    yield settings
    delete_topics(settings)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the whole test session (each pytest process its
    own), started on first use on a free port of 127.0.0.1, stopped and removed at the end."""
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


#: Numbers the per-test databases of this process.
_postgres_databases = itertools.count()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    """A fresh database of this test's own on the session's PostgreSQL server, owned by
    the role ``anchorwatch``: ``psycopg.connect(db.url, password=db.password)`` (the URL
    carries no password). Dropped after the test, with any session still on it."""
    name = f"test_{os.getpid()}_{next(_postgres_databases)}"
    database = postgres_server.database(name)
    try:
        yield database
    finally:
        postgres_server.drop_database(name)
