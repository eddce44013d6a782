"""Fixtures the alerting tests share, unit and integration alike (registered for the whole
suite by tests/conftest.py): a manual clock, the local Slack, Jira and PagerDuty servers, a
local webhook receiver, and a state store in the test's own directory.

A module or a test that needs another variant says so with a marker instead of defining a
fixture of its own: ``pytest.mark.local_slack(token=None)`` (a Slack taking any token),
``pytest.mark.local_jira(credentials=(JIRA_USER, JIRA_TOKEN))`` (a Jira asking for a
login), ``pytest.mark.manual_clock(start=0.0)``; the marker's keywords go to the
constructor."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pagerduty import LocalPagerDuty
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.fakes.webhook import LocalWebhook
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.store import Store
from tests.support.alerting import SLACK_TOKEN


def pytest_configure(config: pytest.Config) -> None:
    for marker in (
        "local_slack(**kwargs): build the slack fixture's LocalSlack with these arguments",
        "local_jira(**kwargs): build the jira fixture's LocalJira with these arguments",
        "manual_clock(start): start the clock fixture there instead of at the current time",
    ):
        config.addinivalue_line("markers", marker)


def _options(request: pytest.FixtureRequest, marker: str) -> dict[str, Any]:
    found = request.node.get_closest_marker(marker)
    return dict(found.kwargs) if found else {}


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> ManualClock:
    """A clock that moves only when told; it starts now, so stored times read as recent."""
    return ManualClock(**{"start": time.time(), **_options(request, "manual_clock")})


@pytest.fixture
def slack(request: pytest.FixtureRequest) -> Iterator[LocalSlack]:
    """The local Slack, answering the Web API (history and replies included) for the bot
    token SLACK_TOKEN only."""
    with LocalSlack(**{"token": SLACK_TOKEN, **_options(request, "local_slack")}) as server:
        yield server


@pytest.fixture
def jira(request: pytest.FixtureRequest) -> Iterator[LocalJira]:
    """The local Jira (Data Center, no login unless the marker asks for one)."""
    with LocalJira(**_options(request, "local_jira")) as server:
        yield server


@pytest.fixture
def pagerduty() -> Iterator[LocalPagerDuty]:
    """The local PagerDuty (Events API v2), taking any 32-character routing key."""
    with LocalPagerDuty() as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[LocalWebhook]:
    """A local webhook receiver, recording the bodies POSTed to it."""
    with LocalWebhook() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def alerting_state(request: pytest.FixtureRequest, tmp_path: Path) -> Path | StateLocation:
    """Where a test's alerting state lives, once per backend: the test's own directory
    (SQLite), and a fresh database of the session's private PostgreSQL server."""
    if request.param == "sqlite":
        return tmp_path
    database = request.getfixturevalue("postgres_url")
    return StateLocation(tmp_path, database.url, SecretStr(database.password))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The alerting service's state in the test's own directory, closed at the end."""
    opened = Store(tmp_path)
    try:
        yield opened
    finally:
        opened.close()
