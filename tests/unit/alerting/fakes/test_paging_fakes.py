"""The local PagerDuty and the local webhook receiver (alerting/fakes/pagerduty.py,
webhook.py), spoken to over HTTP as the senders and a person with curl do: PagerDuty's
answers and its alerts by dedup_key, the receiver's record, their injected faults, and the
`local-pagerduty` command."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import requests

from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY, LocalPagerDuty
from anchorwatch.alerting.fakes.webhook import LocalWebhook


def _event(action: str, key: str | None = "k1", **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"routing_key": LOCAL_ROUTING_KEY, "event_action": action, **extra}
    if key is not None:
        event["dedup_key"] = key
    if action == "trigger":
        event.setdefault(
            "payload", {"summary": "drift on invoice", "source": "aw", "severity": "critical"}
        )
    return event


def _send(server: LocalPagerDuty, event: Any) -> requests.Response:
    return requests.post(server.enqueue_url, json=event, timeout=5)


def test_pagerduty_keeps_one_open_alert_per_dedup_key(pagerduty: LocalPagerDuty) -> None:
    answer = _send(pagerduty, _event("trigger"))
    assert answer.status_code == 202
    assert answer.json() == {"status": "success", "message": "Event processed", "dedup_key": "k1"}
    assert _send(pagerduty, _event("acknowledge")).status_code == 202
    assert _send(pagerduty, _event("trigger")).status_code == 202  # folded into the open one
    assert _send(pagerduty, _event("resolve")).status_code == 202
    assert _send(pagerduty, _event("resolve")).status_code == 202  # nothing open: accepted
    assert _send(pagerduty, _event("acknowledge", "never-seen")).status_code == 202
    alerts = requests.get(f"{pagerduty.url}/_local/alerts", timeout=5).json()["alerts"]
    assert len(alerts) == 1
    assert alerts[0]["statuses"] == ["triggered", "acknowledged", "resolved"]
    assert alerts[0]["events"] == ["trigger", "acknowledge", "trigger", "resolve"]
    # Triggered again once resolved: a new alert under the same key.
    assert _send(pagerduty, _event("trigger")).status_code == 202
    assert [(a["number"], a["status"]) for a in pagerduty.alerts] == [
        (1, "resolved"),
        (2, "triggered"),
    ]
    events = requests.get(f"{pagerduty.url}/_local/events", timeout=5).json()["events"]
    assert len(events) == 7
    assert all(LOCAL_ROUTING_KEY not in str(e) for e in events)  # masked
    # Without a dedup_key, PagerDuty makes one up and says which.
    made = _send(pagerduty, _event("trigger", None)).json()["dedup_key"]
    assert made
    assert pagerduty.alerts[-1]["dedup_key"] == made
    page = requests.get(f"{pagerduty.url}/", timeout=5)
    assert "drift on invoice" in page.text


@pytest.mark.parametrize(
    ("event", "error"),
    [
        ("not an object", "JSON object"),
        (_event("trigger", routing_key="short"), "32 character"),
        (_event("page"), "'event_action'"),
        (_event("resolve", None), "'dedup_key' is required"),
        (_event("trigger", payload={"summary": "x" * 1025, "source": "aw", "severity": "critical"}),
         "'payload.summary'"),
        (_event("trigger", payload={"summary": "s", "source": "aw", "severity": "high"}),
         "'payload.severity'"),
        (_event("trigger", payload={"summary": "s", "severity": "info"}), "'payload.source'"),
    ],
)  # fmt: skip
def test_pagerduty_refuses_invalid_events_as_pagerduty_does(
    pagerduty: LocalPagerDuty, event: Any, error: str
) -> None:
    answer = _send(pagerduty, event)
    assert answer.status_code == 400
    body = answer.json()
    assert body["status"] == "invalid event"
    assert body["message"] == "Event object is invalid"
    assert any(error in e for e in body["errors"]), body
    assert pagerduty.alerts == []


def test_pagerduty_wants_its_own_routing_key_when_given_one() -> None:
    with LocalPagerDuty(routing_key="r" * 32) as server:
        assert _send(server, _event("trigger")).status_code == 400
        assert _send(server, {**_event("trigger"), "routing_key": "r" * 32}).status_code == 202


def test_pagerduty_faults_answer_as_pagerduty_throttles_and_fails(
    pagerduty: LocalPagerDuty,
) -> None:
    faults: list[dict[str, Any]] = [
        {"method": "enqueue", "status": 429, "retry_after": 2},
        {"method": "enqueue", "status": 502},
        {"method": "enqueue", "status": 400, "error": "bad"},
    ]
    assert requests.post(f"{pagerduty.url}/_local/faults", json=faults, timeout=5).ok
    throttled = _send(pagerduty, _event("trigger"))
    assert throttled.status_code == 429
    assert throttled.headers["Retry-After"] == "2"
    assert throttled.json()["status"] == "throttle event"
    assert _send(pagerduty, _event("trigger")).status_code == 502
    assert _send(pagerduty, _event("trigger")).json()["errors"] == ["bad"]
    assert _send(pagerduty, _event("trigger")).status_code == 202
    assert [r["status"] for r in pagerduty.requests] == [429, 502, 400, 202]
    assert requests.post(f"{pagerduty.url}/_local/reset", timeout=5).ok
    assert pagerduty.alerts == []


def test_the_receiver_records_bodies_and_what_receivers_deduplicate_on(
    receiver: LocalWebhook,
) -> None:
    for status in ("firing", "firing", "resolved"):
        alert: dict[str, Any] = {"fingerprint": "f1", "status": status}
        body: dict[str, Any] = {"version": "4", "alerts": [alert]}
        assert requests.post(receiver.hook_url, json=body, timeout=5).text == "ok"
    assert requests.post(receiver.hook_url, data=b"{not json", timeout=5).status_code == 400
    recorded = requests.get(f"{receiver.url}/_local/bodies", timeout=5).json()["bodies"]
    assert [b["path"] for b in recorded] == ["/hooks/anchorwatch"] * 3
    alerts = requests.get(f"{receiver.url}/_local/alerts", timeout=5).json()["alerts"]
    assert alerts["f1"]["statuses"] == ["firing", "firing", "resolved"]
    assert alerts["f1"]["latest"]["status"] == "resolved"
    fault: dict[str, Any] = {"method": "webhook", "status": 503, "error": "down"}
    assert requests.post(f"{receiver.url}/_local/faults", json=fault, timeout=5).ok
    failed = requests.post(receiver.hook_url, json={}, timeout=5)
    assert (failed.status_code, failed.text) == (503, "down")


def test_the_receiver_asks_for_its_token_when_given_one() -> None:
    with LocalWebhook(token="t0k3n") as guarded:
        assert requests.post(guarded.hook_url, json={}, timeout=5).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert requests.post(guarded.hook_url, json={}, headers=wrong, timeout=5).status_code == 401
        right = {"Authorization": "Bearer t0k3n"}
        assert requests.post(guarded.hook_url, json={}, headers=right, timeout=5).ok
        assert len(guarded.bodies) == 1


def test_local_pagerduty_command_serves_until_stopped() -> None:
    code = (
        "from anchorwatch.cli.alerting import alerting; "
        "alerting(['local-pagerduty', '--port', '0'])"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("local PagerDuty on http://127.0.0.1:")
        url = first.split()[3].rstrip("/")
        second = process.stdout.readline()
        assert f"ANCHORWATCH_PAGERDUTY__URL={url}/v2/enqueue" in second
        assert f"ANCHORWATCH_PAGERDUTY__ROUTING_KEY={LOCAL_ROUTING_KEY}" in second
        answer = requests.post(f"{url}/v2/enqueue", json=_event("trigger"), timeout=5)
        assert answer.status_code == 202
    finally:
        process.terminate()
        process.wait(timeout=10)
