"""`anchorwatch alerting serve` as a real process while its Kafka broker is stopped: it
writes a bounded number of log lines however long the outage lasts, a SIGTERM stops it
within 10 s, and what its outbox held is delivered once at the next start, Kafka back.

Runs its own broker (a private stack on free ports): stopping the shared session broker
would break every other test."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import Store
from anchorwatch.demo.slice import create_topics
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.stack import Stack
from tests.support.alerting import POLICY, SLACK_TOKEN, lifecycle, parents_by_label, slack_threads
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    produce,
    ready,
    service_config,
    service_env,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OUTAGE_S = 20
#: Lines an outage may add, however long it lasts: each distinct warning once a minute
#: (about a dozen kinds while Kafka is down: each client's connection failures, the error
#: callbacks, "baselines not readable"), and their repeat counts at the stop.
MAX_LINES = 60
STOP_WITHIN_S = 10


@pytest.fixture
def private_stack(private_kafka: Callable[..., Stack]) -> Stack:
    return private_kafka()


def _pending(state: Path) -> int:
    store = Store(state, create=False)
    try:
        return sum(store.pending_counts().values())
    finally:
        store.close()


def _consumed(state: Path) -> int:
    store = Store(state, create=False)
    try:
        return sum(store.restore().offsets.values())
    finally:
        store.close()


def _lines(log: Path) -> int:
    return sum(1 for _ in log.open("rb"))


def test_kafka_gone_bounded_logs_a_stop_within_10_s_and_nothing_lost(
    private_stack: Stack, tmp_path: Path
) -> None:
    job = JobSettings.load(kafka={"bootstrap_servers": private_stack.kafka.bootstrap})
    create_topics(job)
    state = tmp_path / "state"
    with LocalSlack(token=SLACK_TOKEN) as slack:
        # Slack refuses for now: the notifications wait in the outbox through the outage.
        requests.post(
            f"{slack.url}/_local/faults",
            json={"method": "chat.postMessage", "status": 503, "times": -1},
            timeout=5,
        ).raise_for_status()
        config = service_config(job, state, slack, None, poll_timeout_s=0.5)
        config["policy"] = POLICY
        env = service_env(config)
        env["ANCHORWATCH_LOG_LEVEL"] = "INFO"  # every line counts, not only warnings
        produced = produce(job, lifecycle("invoice") + lifecycle("report", first_minute=1))
        log = tmp_path / "service.log"
        service = ServiceProcess(env, log)
        wait_until(lambda: ready(config), 60, "the service to be ready")
        wait_until(
            lambda: _consumed(state) >= produced and _pending(state) > 0,
            30,
            "every verdict decided, the notifications waiting",
        )

        before = _lines(log)
        private_stack.kafka.stop()
        time.sleep(OUTAGE_S)
        during = _lines(log) - before

        started = time.monotonic()
        service.process.send_signal(signal.SIGTERM)
        try:
            code = service.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill9()
            raise AssertionError("alive 60 s after SIGTERM") from None
        took = time.monotonic() - started
        written = _lines(log) - before
        print(f"\nKafka down {OUTAGE_S} s: {during} lines, stop in {took:.1f} s, {written} in all")
        assert code == 0
        assert took < STOP_WITHIN_S
        assert written <= MAX_LINES, log.read_text()[-3000:]
        left = _pending(state)
        assert left > 0  # the outbox kept what Slack had not taken

        # Kafka and Slack back: the next start delivers what the outbox held, once.
        private_stack.up(with_flink=False)
        requests.delete(f"{slack.url}/_local/faults", timeout=5).raise_for_status()
        again = ServiceProcess(env, log)
        try:
            wait_until(lambda: delivered_everything(state, produced), 90, "everything delivered")
        finally:
            assert again.stop() == 0
        messages = list(slack.messages)

    incidents = list_incidents(state, open_only=False, limit=10)
    assert {i.row.doc_type for i in incidents} == {"invoice", "report"}
    parents = parents_by_label(messages)
    threads = slack_threads([m for m in messages if m.get("subtype") is None])
    for item in incidents:
        assert parents[incident_label(item.row.incident_id)] == 1
        replies = [r["text"].split(" ")[0] for r in threads[item.refs.slack_ts or ""]]
        assert replies == ["Update", "Update", "Resolved:"], replies
