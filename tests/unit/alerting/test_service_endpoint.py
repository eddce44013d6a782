"""The service as a whole without a reachable Kafka: its endpoint (/metrics, /healthz,
/readyz), its lock on the state directory, its commands (`serve`, `incidents`), and the
senders delivering what the state holds while Kafka is down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Counter

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.http import Endpoint
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.service import AlertingService, AlertingServiceError, StateLock
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.cli.alerting import alerting
from anchorwatch.errors import AnchorwatchError
from anchorwatch.stack.processes import free_port
from tests.support.alerting import SLACK_TOKEN, LocalSlackWithHistory, lifecycle
from tests.support.alerting_harness import Harness, settings_for
from tests.support.waiting import wait_until


def test_endpoint_serves_metrics_and_probes() -> None:
    registry = CollectorRegistry()
    Counter("anchorwatch_test_total", "a counter", registry=registry).inc(3)
    ready = {"ok": False}
    endpoint = Endpoint(
        "127.0.0.1",
        0,
        registry,
        lambda: (True, {"threads": {"consumer": True}}),
        lambda: (ready["ok"], {"kafka": ready["ok"]}),
    ).start()
    try:
        metrics = requests.get(f"{endpoint.url}/metrics", timeout=5)
        assert metrics.status_code == 200
        assert "anchorwatch_test_total 3.0" in metrics.text
        health = requests.get(f"{endpoint.url}/healthz", timeout=5)
        assert (health.status_code, health.json()["ok"]) == (200, True)
        not_ready = requests.get(f"{endpoint.url}/readyz", timeout=5)
        assert (not_ready.status_code, not_ready.json()) == (503, {"ok": False, "kafka": False})
        ready["ok"] = True
        assert requests.get(f"{endpoint.url}/readyz", timeout=5).status_code == 200
        assert requests.get(f"{endpoint.url}/nothing", timeout=5).status_code == 404
    finally:
        endpoint.stop()


def test_a_busy_metrics_port_is_a_clear_error() -> None:
    first = Endpoint(
        "127.0.0.1", 0, CollectorRegistry(), lambda: (True, {}), lambda: (True, {})
    ).start()
    port = int(first.url.rsplit(":", 1)[1])
    try:
        with pytest.raises(AnchorwatchError, match=f"cannot listen on 127.0.0.1:{port}"):
            Endpoint("127.0.0.1", port, CollectorRegistry(), lambda: (True, {}), lambda: (True, {}))
    finally:
        first.stop()


def test_one_service_per_state_directory(tmp_path: Path) -> None:
    lock = StateLock(tmp_path)
    with pytest.raises(AlertingServiceError, match=f"pid {os.getpid()}.*uses {tmp_path}"):
        StateLock(tmp_path)
    lock.release()
    StateLock(tmp_path).release()


def test_queued_notifications_go_out_while_kafka_is_down(
    tmp_path: Path, slack: LocalSlackWithHistory
) -> None:
    # A previous run decided an incident and died before sending anything.
    h = Harness(settings_for(tmp_path, slack, None), ManualClock(start=time.time()))
    h.publish(lifecycle("invoice")[:4])
    h.consume()
    h.store.close()
    for d in h.drainers:
        d._store.close()
    settings = AlertingSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        alerting={
            "state_dir": tmp_path / "state",
            "metrics_port": 0,
            "drift_events": False,
            "slack_rate_per_s": 100,
        },
        slack={"mode": "bot", "api_url": slack.api_url, "bot_token": SLACK_TOKEN, "charts": False},
    )
    service = AlertingService(settings).start()
    try:
        wait_until(lambda: len(slack.messages) >= 2, 20, "the parent and the update in Slack")
        # The parent as posted (the update edited it since), then the update in its thread.
        first = [m["edits"][0]["text"] if m["edits"] else m["text"] for m in slack.messages]
        assert [text.split(" ")[0] for text in first] == ["[WARNING]", "Update"]
        ready = requests.get(f"{service.endpoint_url}/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.json()["kafka"] is False
        assert requests.get(f"{service.endpoint_url}/healthz", timeout=5).status_code == 200
        # Slack has the messages before the sender records them done: poll, do not race.
        metrics = poll_metrics(
            service.endpoint_url,
            'anchorwatch_alerting_notifications_total{integration="slack",outcome="sent"} 2.0',
            'anchorwatch_alerting_incidents_open{severity="critical"} 1.0',
        )
        assert "anchorwatch_alerting_notifications_total" in metrics
    finally:
        service.stop()


def poll_metrics(url: str, *lines: str, timeout_s: float = 10) -> str:
    """/metrics once it shows every one of ``lines`` (AssertionError naming the missing
    ones after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = requests.get(f"{url}/metrics", timeout=5).text
        missing = [line for line in lines if line not in text.splitlines()]
        if not missing:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"/metrics still lacks {missing} after {timeout_s}s")
        time.sleep(0.05)


def test_incidents_command_lists_open_and_recent_incidents(
    tmp_path: Path, slack: LocalSlackWithHistory
) -> None:
    with LocalJira() as jira:
        h = Harness(settings_for(tmp_path, slack, jira), ManualClock(start=time.time()))
        h.publish(lifecycle("invoice") + lifecycle("<!channel> ünïcode", first_minute=2)[:4])
        h.run()
    state = str(tmp_path / "state")
    runner = CliRunner()
    table = runner.invoke(alerting, ["incidents", "--state-dir", state])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:3] == ["STATE", "SEVERITY", "OPENED"]
    assert len(lines) == 2
    assert lines[1].startswith("open     critical")
    assert "<!channel> ünïcode" in lines[1]
    every = runner.invoke(alerting, ["incidents", "--state-dir", state, "--all", "--json"])
    records = [json.loads(line) for line in every.output.splitlines()]
    assert [(r["state"], r["doc_type"]) for r in records] == [
        ("open", "<!channel> ünïcode"),
        ("resolved", "invoice"),
    ]
    resolved = records[1]
    assert resolved["jira"].startswith("OPS-")
    assert resolved["resolved_at"].endswith("Z")
    assert resolved["deliveries"]["slack"] == {"done": 6}  # four messages, two charts
    missing = runner.invoke(alerting, ["incidents", "--state-dir", str(tmp_path / "none")])
    assert missing.exit_code != 0
    assert "no alerting state" in str(missing.exception)


def test_serve_refuses_bad_settings_naming_the_field(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        alerting, ["serve"], env={"ANCHORWATCH_ALERTING__SLACK_RATE_PER_S": "0"}
    )
    assert result.exit_code != 0
    assert "alerting.slack_rate_per_s" in str(result.exception)
    assert "ANCHORWATCH_ALERTING__SLACK_RATE_PER_S" in str(result.exception)


#: Every post hangs (60 s each) for this many calls: a count, so each call taken shows.
HANGS = 100


def _decided_and_hanging(tmp_path: Path, slack: LocalSlackWithHistory) -> dict[str, Any]:
    """A state with an incident decided and nothing sent, a Slack whose every post hangs
    for 60 s, and the service's settings (Kafka unreachable) as nested dicts."""
    h = Harness(settings_for(tmp_path, slack, None), ManualClock(start=time.time()))
    h.publish(lifecycle("invoice")[:4])
    h.consume()
    h.store.close()
    for d in h.drainers:
        d._store.close()
    requests.post(
        f"{slack.url}/_local/faults",
        json={"method": "chat.postMessage", "delay_s": 60, "times": HANGS},
        timeout=5,
    ).raise_for_status()
    return {
        "kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"},
        "alerting": {
            "state_dir": str(tmp_path / "state"),
            "metrics_port": free_port(),
            "drift_events": False,
        },
        "slack": {
            "mode": "bot",
            "api_url": slack.api_url,
            "bot_token": SLACK_TOKEN,
            "timeout_s": 90,
        },
    }


def _sender_inside_its_post(slack: LocalSlackWithHistory) -> None:
    """Wait until a post has taken one of the hanging answers (the sender is inside it)."""

    def taken() -> bool:
        faults = requests.get(f"{slack.url}/_local/faults", timeout=5).json()["faults"]
        return not faults or faults[0]["times"] < HANGS

    wait_until(taken, 20, "the Slack sender to be inside a post that hangs")


def test_a_stop_is_bounded_while_a_call_hangs(tmp_path: Path, slack: LocalSlackWithHistory) -> None:
    config = _decided_and_hanging(tmp_path, slack)
    service = AlertingService(AlertingSettings.load(None, **config)).start()
    _sender_inside_its_post(slack)
    started = time.monotonic()
    service.stop()
    took = time.monotonic() - started
    assert took < AlertingService.STOP_TIMEOUT_S + 0.5
    # The sender inside its post (and the consumer, inside a call to the absent Kafka).
    assert "alerting-sender-slack" in service.left_behind
    # Nothing is lost: the parent is still to be sent (reconciled first) at the next start.
    store = Store(tmp_path / "state", create=False)
    try:
        rows = [r for r in store.outbox_rows() if r["integration"] == "slack"]
    finally:
        store.close()
    assert rows[0]["status"] == "attempting"


def _answering_200(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    """Return once ``url`` answers 200. Fail, saying what it last answered (a status and
    body, or the connection error) and the end of the service's log, if the process exits
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    last = "nothing yet"
    while True:
        try:
            answer = requests.get(url, timeout=1)
            if answer.status_code == 200:
                return
            last = f"HTTP {answer.status_code} {answer.text[:200]!r}"
        except requests.RequestException as error:
            last = f"{type(error).__name__}: {error}"
        if (code := process.poll()) is not None:
            problem = f"the service exited ({code}) before {url} answered 200"
        elif time.monotonic() > deadline:
            problem = f"{url} did not answer 200 within {timeout_s}s"
        else:
            time.sleep(0.1)
            continue
        raise AssertionError(f"{problem}; last seen: {last}; log:\n{log.read_text()[-2000:]}")


def test_serve_exits_within_10_s_of_sigterm_when_a_call_hangs(
    tmp_path: Path, slack: LocalSlackWithHistory
) -> None:
    """As a process: the thread left behind does not hold the exit."""
    config = _decided_and_hanging(tmp_path, slack)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANCHORWATCH_")}
    for section, fields in config.items():
        for name, value in fields.items():
            env[f"ANCHORWATCH_{section.upper()}__{name.upper()}"] = (
                str(value).lower() if (isinstance(value, bool)) else str(value)
            )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "anchorwatch", "alerting", "serve"],
            env=env,
            stdout=out,
            stderr=out,
        )
        try:
            url = f"http://127.0.0.1:{config['alerting']['metrics_port']}/healthz"
            _answering_200(url, process, log, timeout_s=20)
            _sender_inside_its_post(slack)
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
            took = time.monotonic() - started
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert code == 0, log.read_text()[-2000:]
    assert took < AlertingService.STOP_TIMEOUT_S + 2  # the stop, and the interpreter's exit
    stopped = [json.loads(line) for line in log.read_text().splitlines() if "stopped" in line]
    assert "alerting-sender-slack" in stopped[-1]["left_behind"]


def test_the_endpoint_hands_api_calls_over_and_bounds_their_bodies() -> None:
    calls: list[tuple[str, str, str, bytes]] = []

    def api(method: str, target: str, headers: Mapping[str, str], body: bytes) -> Any:
        calls.append((method, target, headers.get("authorization", ""), body))
        return 201, "application/json", b'{"ok": true}\n'

    endpoint = Endpoint(
        "127.0.0.1", 0, CollectorRegistry(), lambda: (True, {}), lambda: (True, {}), api=api
    ).start()
    try:
        made = requests.post(
            f"{endpoint.url}/api/v1/silences?x=1",
            data=b'{"a": 1}',
            headers={"Authorization": "Bearer t"},
            timeout=5,
        )
        assert (made.status_code, made.json()) == (201, {"ok": True})
        assert calls == [("POST", "/api/v1/silences?x=1", "Bearer t", b'{"a": 1}')]
        big = requests.post(f"{endpoint.url}/api/v1/silences", data=b"x" * 70_000, timeout=5)
        assert big.status_code == 413
        assert len(calls) == 1  # refused unread
        assert requests.delete(f"{endpoint.url}/metrics", timeout=5).status_code == 404
        assert requests.get(f"{endpoint.url}/metrics", timeout=5).status_code == 200
    finally:
        endpoint.stop()
