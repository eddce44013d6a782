"""Shared by the alerting service's integration tests: settings for a service on the test's
private topics, producing verdicts, reading drift events, running `anchorwatch alerting
serve` as a process, and waiting for it to have delivered everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import requests
from confluent_kafka import Producer

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store, StoreError
from anchorwatch.contracts import DriftEvent, Verdict, decode_drift_event, encode
from anchorwatch.demo.journey_processes import env_of
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config, read_topic
from anchorwatch.stack.processes import free_port
from tests.support.alerting import SLACK_TOKEN


def service_config(
    job: JobSettings,
    state_dir: Path,
    slack: LocalSlack | None,
    jira: LocalJira | None,
    **alerting: Any,
) -> dict[str, dict[str, Any]]:
    """Every section of the service's settings, as nested dicts (for ``load`` or env)."""
    return {
        "kafka": {"bootstrap_servers": job.kafka.bootstrap_servers},
        "topics": job.topics.model_dump(),
        "alerting": {
            "state_dir": str(state_dir),
            "group_id": f"anchorwatch-alerting-{state_dir.parent.name}",
            "start_offset": "earliest",
            "metrics_port": free_port(),
            "update_interval_s": 120,
            "poll_timeout_s": 0.2,
            "slack_rate_per_s": 50,
            "slack_workspace_rate_per_s": 50,
            "jira_rate_per_s": 50,
            **alerting,
        },
        "slack": (
            {"mode": "bot", "api_url": slack.api_url, "bot_token": SLACK_TOKEN, "charts": False}
            if slack
            else {"mode": "off"}
        ),
        "jira": (
            {"enabled": True, "url": jira.url, "comment_interval_s": 0}
            if jira
            else {"enabled": False}
        ),
        "retry": {"max_attempts": 2, "max_elapsed_s": 5, "base_delay_s": 0.5, "max_delay_s": 2},
    }


def load_settings(config: dict[str, dict[str, Any]]) -> AlertingSettings:
    return AlertingSettings.load(None, **config)


def service_env(config: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The same settings as ANCHORWATCH_<SECTION>__<FIELD> variables, over this process's
    environment without its own ANCHORWATCH_ ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANCHORWATCH_")}
    env.update(env_of(config))
    env["ANCHORWATCH_LOG_LEVEL"] = "WARNING"
    return env


def produce(job: JobSettings, verdicts: Iterable[Verdict]) -> int:
    """Keyed by doc type, as the drift job writes them. Returns how many."""
    producer = Producer(client_config(job.kafka, **{"enable.idempotence": True, "acks": "all"}))
    n = 0
    for v in verdicts:
        while True:
            try:
                producer.produce(job.topics.verdicts, encode(v), v.window.doc_type.encode())
                break
            except BufferError:
                producer.poll(0.1)
        n += 1
    assert producer.flush(30) == 0
    return n


def drift_events(job: JobSettings) -> list[DriftEvent]:
    return [
        decode_drift_event(m.value)
        for m in read_topic(job.kafka, job.topics.drift_events)
        if m.value is not None
    ]


def ready(config: dict[str, dict[str, Any]]) -> bool:
    """The service (in this process or another) answers /readyz with 200."""
    url = f"http://127.0.0.1:{config['alerting']['metrics_port']}/readyz"
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def delivered_everything(state: Path | StateLocation, produced: int) -> bool:
    """The state says: every produced verdict consumed, every notification finished."""
    try:
        store = Store(state, create=False)
    except StoreError:
        return False
    try:
        consumed = sum(store.restore().offsets.values())
        pending = sum(store.pending_counts().values())
        return consumed >= produced and pending == 0 and bool(store.outbox_rows())
    finally:
        store.close()


class ServiceProcess:
    """`python -m anchorwatch alerting serve` with the settings in its environment."""

    def __init__(self, env: dict[str, str], log: Path, crash_at: str | None = None) -> None:
        env = dict(env)
        if crash_at:
            env["ANCHORWATCH_ALERTING_TEST_CRASH_AT"] = crash_at
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "anchorwatch", "alerting", "serve"],
            env=env,
            stdout=self._log,
            stderr=self._log,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stopped(self) -> bool:
        """True while the process is stopped (SIGSTOP: state T in /proc)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def kill9(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._log.close()

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        self._log.close()
        return code
