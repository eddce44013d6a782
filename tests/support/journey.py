"""One run of the demo's journey per test session, shared by the tests that look at what it
did (the traffic the local Slack and Jira received, their pages in a browser): the
``journey_run`` fixture (a plugin of tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.demo.journey import Journey, JourneyOptions
from anchorwatch.demo.journey_plan import Plan, make_plan
from anchorwatch.demo.journey_results import JourneyReport
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.stack import Stack


@dataclass
class JourneyRun:
    journey: Journey
    plan: Plan
    report: JourneyReport
    output: list[str]

    @property
    def slack_url(self) -> str:
        return self.journey.slack_url

    @property
    def jira_url(self) -> str:
        return self.journey.jira_url


@pytest.fixture(scope="session")
def journey_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JourneyRun]:
    """The demo's flow on the session's Kafka and Flink session cluster, with the local
    Slack and Jira left running until the session ends."""
    options = JourneyOptions(
        state_dir=tmp_path_factory.mktemp("journey"),
        ports={"ingest": 0, "alerting": 0, "slack": 0, "jira": 0},
    )
    job = JobSettings.load(kafka={"bootstrap_servers": stack.kafka.bootstrap})
    alerting = AlertingSettings.load(None, slack={"mode": "off"}, jira={"enabled": False})
    output: list[str] = []
    journey = Journey(stack, job, alerting, options, output.append)
    plan = make_plan(int(time.time() * 1000), seed=options.seed, doc_types=options.doc_types)
    try:
        report = journey.run(plan)
        yield JourneyRun(journey, plan, report, output)
    finally:
        journey.stop()


def state_path(run: JourneyRun) -> Path | StateLocation:
    """Where the run's alerting state is (its PostgreSQL, with two alerting instances)."""
    return run.journey.state


def delivered(
    run: JourneyRun,
    incident_ids: list[str],
    integration: str,
    action: str,
    outcomes: tuple[str, ...] = ("sent",),
) -> dict[str, int]:
    """Per incident, its outbox entries for ``integration`` and ``action`` finished with one
    of ``outcomes`` (what the service delivered), read in one go from the run's state."""
    store = Store(state_path(run), create=False)
    try:
        return {
            i: sum(
                1
                for r in store.outbox_rows(i)
                if (r["integration"], r["action"]) == (integration, action)
                and r["outcome"] in outcomes
            )
            for i in incident_ids
        }
    finally:
        store.close()
