"""Acknowledge and silence from Slack (alerting/slack_actions.py): the parent's buttons, the
interactivity endpoint's checks (signature, timestamp, replay, the incident, the action),
and what the engine does with an acknowledgement, exactly once through the outbox, in the
running service without Kafka (the harness of tests/support/alerting_harness.py, the real
clients against the local Slack, Jira and PagerDuty)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
import requests
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pagerduty import LocalPagerDuty
from anchorwatch.alerting.fakes.slack_interactions import signed_headers
from anchorwatch.alerting.http import Endpoint
from anchorwatch.alerting.integrations.pagerduty import dedup_key
from anchorwatch.alerting.integrations.slack.render import ACK, SILENCE_1H, SILENCE_RESOLVED
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.slack_actions import SlackInteractions
from anchorwatch.alerting.store import FILENAME
from tests.support.alerting import LocalSlackWithHistory, lifecycle
from tests.support.alerting_harness import Crash, Harness, issues, posted, settings_for
from tests.support.alerting_paging import incident_ids, with_paging

SECRET = "local-signing-secret-0123456789"
PATH = "/slack/interactions"


def _settings(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira | None,
    pagerduty: LocalPagerDuty | None = None,
    **alerting: Any,
) -> AlertingSettings:
    s = settings_for(tmp_path, slack, jira, **alerting)
    signed = s.slack.model_copy(update={"signing_secret": SecretStr(SECRET)})
    s = s.model_copy(update={"slack": signed})
    return with_paging(s, pagerduty=pagerduty) if pagerduty is not None else s


def _body(action_id: str, value: str, user: str = "U0ANA", name: str = "ana") -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": name, "team_id": "T0LOCAL"},
        "actions": [{"type": "button", "action_id": action_id, "value": value}],
    }
    return urlencode({"payload": json.dumps(payload)})


def _post(
    h: Harness,
    body: str,
    *,
    secret: str | None = SECRET,
    stamp: int | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    handler = SlackInteractions(h.settings.alerting.state_dir, SECRET, clock=h.clock)
    if headers is None:
        headers = signed_headers(secret or "", body, int(h.clock()) if stamp is None else stamp)
    lower = {k.lower(): v for k, v in headers.items()}
    status, _, answer = handler.handle("POST", PATH, lower, body.encode())
    return status, orjson.loads(answer)


def _click(
    h: Harness, action_id: str, incident_id: str, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    h.clock.now += 1  # a new timestamp: a new signature
    return _post(h, _body(action_id, incident_id, **kwargs))


def _state(h: Harness) -> dict[str, Any]:
    """What a refused request must leave as it was."""
    db = sqlite3.connect(h.settings.alerting.state_dir / FILENAME)
    try:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()  # noqa: S608
            for table in ("slack_actions", "silences", "outbox", "incidents")
        }
    finally:
        db.close()


def _parent(slack: LocalSlackWithHistory) -> dict[str, Any]:
    (parent,) = [m for m in posted(slack) if not m["thread_ts"]]
    return parent


def _buttons(message: dict[str, Any]) -> list[str]:
    return [
        e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]
    ]


def _replies(slack: LocalSlackWithHistory) -> list[str]:
    return [m["text"].split(" ")[0] for m in posted(slack) if m["thread_ts"]]


def _opened(h: Harness, windows: int = 3) -> str:
    """The invoice incident, opened (3 windows: as a warning; 4: escalated), posted."""
    h.publish(lifecycle("invoice")[:windows])
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    return incident_id


# --------------------------------------------------------------------------- the buttons


def test_an_open_parent_carries_the_buttons_and_a_resolved_one_none(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    incident_id = _opened(h)
    parent = _parent(slack)
    assert _buttons(parent) == [ACK, SILENCE_1H, SILENCE_RESOLVED]
    (actions,) = [b for b in parent["blocks"] if b["type"] == "actions"]
    assert {e["value"] for e in actions["elements"]} == {incident_id}
    h.publish(lifecycle("invoice")[3:])
    h.run()
    assert _buttons(_parent(slack)) == []
    assert "Drift resolved" in _parent(slack)["text"]


def test_without_a_signing_secret_no_buttons_and_the_endpoint_is_off(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    incident_id = _opened(h)
    assert _buttons(_parent(slack)) == []
    handler = SlackInteractions(h.settings.alerting.state_dir, None, clock=clock)
    body = _body(ACK, incident_id)
    headers = {k.lower(): v for k, v in signed_headers(SECRET, body, int(clock())).items()}
    status, _, answer = handler.handle("POST", PATH, headers, body.encode())
    assert status == 404
    assert b"slack.signing_secret" in answer


# --------------------------------------------------------------------------- refusals


def test_bad_requests_are_refused_with_a_reason_and_change_nothing(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    incident_id = _opened(h)
    before = _state(h)
    body = _body(ACK, incident_id)
    now = int(clock())
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"headers": {"Content-Type": "application/x-www-form-urlencoded"}}, 401, "unsigned"),
        ({"secret": "another-apps-secret"}, 401, "X-Slack-Signature: does not match"),
        ({"stamp": now - 301}, 401, "stale"),
        ({"stamp": now + 301}, 401, "stale"),
        ({"headers": {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=0"}}, 401,
         "not a Unix time"),
    ]  # fmt: skip
    for kwargs, status, reason in cases:
        answer = _post(h, body, **kwargs)
        assert answer[0] == status, kwargs
        assert reason in answer[1]["error"], answer
        assert answer[1]["ok"] is False
    for bad_body, status, reason in [
        (_body(ACK, "i1-no-such-incident"), 404, "no incident 'i1-no-such-incident'"),
        (_body("somebody_elses_button", incident_id), 400, "is not ours"),
        (_body(ACK, incident_id, user="not a user"), 400, "payload.user.id"),
        ("payload=%7Bnot+json", 400, "payload=<JSON>"),
        ("text=hello", 400, "payload=<JSON>"),
        (urlencode({"payload": json.dumps({"type": "view_submission"})}), 400, "block_actions"),
    ]:
        clock.now += 1
        answer = _post(h, bad_body)
        assert answer == (status, {"ok": False, "error": answer[1]["error"]})
        assert reason in answer[1]["error"], answer
    assert _state(h) == before

    # A valid click goes through once; the very same request again is a replay.
    clock.now += 1
    stamp = int(clock())
    assert _post(h, body, stamp=stamp)[0] == 200
    after = _state(h)
    replayed = _post(h, body, stamp=stamp)
    assert replayed == (
        409,
        {"ok": False, "error": "replayed: this signed request was received before"},
    )
    assert _state(h) == after
    # Ten minutes on, the replay memory is pruned; the timestamp is long stale by then.
    clock.now += 601
    late = _post(h, body, stamp=stamp)
    assert (late[0], late[1]["error"][:5]) == (401, "stale")
    assert _click(h, SILENCE_1H, incident_id)[0] == 200  # prunes what it remembers
    db = sqlite3.connect(h.settings.alerting.state_dir / FILENAME)
    remembered = [r[0].split(":")[0] for r in db.execute("SELECT signature FROM slack_signatures")]
    db.close()
    assert remembered == [str(int(clock()))]


def test_a_click_on_a_resolved_incident_changes_nothing(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    h.publish(lifecycle("invoice"))
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    before = _state(h)
    for action in (ACK, SILENCE_1H, SILENCE_RESOLVED):
        status, answer = _click(h, action, incident_id)
        assert status == 409
        assert "resolved" in answer["error"]
    assert _state(h) == before


# --------------------------------------------------------------------------- acknowledge


def test_an_acknowledgement_names_who_everywhere_and_stops_progress_updates(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    pagerduty: LocalPagerDuty,
    clock: ManualClock,
) -> None:
    h = Harness(_settings(tmp_path, slack, jira, pagerduty), clock)
    incident_id = _opened(h)  # a warning: PagerDuty (critical only) was not paged
    assert _click(h, ACK, incident_id) == (200, {"ok": True, "text": "acknowledged by <@U0ANA>"})
    clicked_ms = h.clock.ms()
    # A second click (before or after the engine applies the first) is a no-op.
    again = (200, {"ok": True, "text": "already acknowledged by <@U0ANA>"})
    assert _click(h, ACK, incident_id, user="U0BO", name="bo") == again
    assert h.engine.apply_acks(h.clock.ms()) == 1
    assert h.engine.apply_acks(h.clock.ms()) == 0
    assert _click(h, ACK, incident_id, user="U0BO", name="bo") == again
    h.drain()

    assert _replies(slack) == ["Acknowledged"]
    (reply,) = [m for m in posted(slack) if m["thread_ts"]]
    assert reply["text"] == "Acknowledged by <@U0ANA>"
    parent = _parent(slack)
    assert "Acknowledged by <@U0ANA>" in orjson.dumps(parent["blocks"]).decode()
    assert _buttons(parent) == [SILENCE_1H, SILENCE_RESOLVED]  # no second acknowledge
    (ticket,) = issues(jira)
    assert ticket["comments"] == [
        "Acknowledged by ana (Slack user U0ANA) in Slack: no more progress updates are posted."
    ]
    assert pagerduty.events == []  # never paged: nothing to acknowledge there
    row = h.store.incident(incident_id)
    assert row is not None
    assert (row.acked_by, row.acked_ms) == ("U0ANA", clicked_ms)

    # The escalation and the resolution still go out; the progress update does not.
    h.publish(lifecycle("invoice")[3:])
    h.run()
    assert _replies(slack) == ["Acknowledged", "Update", "Resolved:"]
    parent = _parent(slack)
    assert parent["text"].startswith("[CRITICAL] Drift resolved")
    assert "Acknowledged by <@U0ANA>" in orjson.dumps(parent["blocks"]).decode()
    assert _buttons(parent) == []
    (ticket,) = issues(jira)
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Acknowledged", "Update,", "Resolved"]
    assert ticket["fields"]["status"]["name"] == "Done"
    assert [e["event_action"] for e in pagerduty.events] == ["trigger", "resolve"]


def test_an_acknowledgement_of_a_paged_incident_acknowledges_it_in_pagerduty(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    pagerduty: LocalPagerDuty,
    clock: ManualClock,
) -> None:
    h = Harness(_settings(tmp_path, slack, jira, pagerduty), clock)
    incident_id = _opened(h, windows=4)  # escalated: paged
    assert _click(h, ACK, incident_id)[0] == 200
    h.engine.apply_acks(h.clock.ms())
    h.drain()
    events = [(e["event_action"], e["dedup_key"]) for e in pagerduty.events]
    assert events == [("trigger", dedup_key(incident_id)), ("acknowledge", dedup_key(incident_id))]
    (alert,) = pagerduty.alerts
    assert alert["statuses"] == ["triggered", "acknowledged"]


def test_an_acknowledgement_of_an_incident_resolved_meanwhile_does_nothing(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira), clock)
    incident_id = _opened(h)
    assert _click(h, ACK, incident_id)[0] == 200
    h.publish(lifecycle("invoice")[3:])
    h.consume()  # resolved before the engine got to the acknowledgement
    assert h.engine.apply_acks(h.clock.ms()) == 0
    h.run()
    assert "Acknowledged" not in _replies(slack)
    db = sqlite3.connect(h.settings.alerting.state_dir / FILENAME)
    assert db.execute("SELECT outcome FROM slack_actions").fetchall() == [("resolved",)]
    db.close()


@pytest.mark.parametrize(
    "crash",
    [
        "ack_before_commit",
        "send_before:slack@2",
        "send_after:slack@2",
        "done_in_commit:slack@2",
        "send_after:jira@2",
        "done_in_commit:jira@2",
    ],
)
def test_a_crash_around_an_acknowledgement_loses_and_doubles_nothing(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    crash: str,
) -> None:
    """The second pass of each send point is the acknowledgement's (the first: the opening)."""
    h = Harness(_settings(tmp_path, slack, jira), clock, crash=crash)
    incident_id = _opened(h)
    assert h.crashes == 0
    assert _click(h, ACK, incident_id)[0] == 200
    try:
        h.engine.apply_acks(h.clock.ms())
    except Crash:
        h.restart()
        assert h.engine.apply_acks(h.clock.ms()) == 1
    h.run()
    h.restart()
    assert h.engine.apply_acks(h.clock.ms()) == 0
    h.publish(lifecycle("invoice")[3:])
    h.run()
    assert h.crashes == 1
    assert _replies(slack) == ["Acknowledged", "Update", "Resolved:"]
    (ticket,) = issues(jira)
    assert [c.split(" ")[0] for c in ticket["comments"]] == ["Acknowledged", "Update,", "Resolved"]
    assert "Acknowledged by <@U0ANA>" in orjson.dumps(_parent(slack)["blocks"]).decode()


# --------------------------------------------------------------------------- silences


def test_silence_buttons_make_the_silences_they_say(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(_settings(tmp_path, slack, jira, update_interval_s=60), clock)
    incident_id = _opened(h, windows=4)
    status, answer = _click(h, SILENCE_1H, incident_id)
    assert status == 200
    status, answer = _click(h, SILENCE_RESOLVED, incident_id, user="U0BO", name="bo")
    assert status == 200
    assert "until it resolves" in answer["text"]
    book = SilenceBook(h.settings.alerting.state_dir)
    hour, until = sorted(book.all(), key=lambda s: s.created_ms)
    assert (hour.doc_type, hour.incident_id, hour.reason) == ("invoice", None, "from Slack")
    assert hour.author == "ana (Slack U0ANA)"
    assert hour.ends_ms - hour.starts_ms == 3_600_000
    assert (until.doc_type, until.incident_id, until.author) == (
        "invoice",
        incident_id,
        "bo (Slack U0BO)",
    )
    assert until.ends_ms - until.starts_ms == 30 * 86_400_000

    # Posted before the silences: quiet (no progress updates), but it still resolves.
    h.publish(lifecycle("invoice")[4:])
    h.run()
    assert _replies(slack) == ["Update", "Resolved:"]  # the escalation, then the resolution
    # Its incident resolved: "until resolved" ends (the service looks every 5 s).
    h.engine.release_held(h.clock.ms())
    assert [s.silence_id for s in book.active(h.clock.ms())] == [hour.silence_id]
    ended = book.get(until.silence_id)
    assert ended is not None
    assert ended.expired_by == "resolved"
    book.close()


def test_a_state_file_of_schema_2_is_brought_up_to_date(tmp_path: Path) -> None:
    from anchorwatch.alerting.store import Store
    from anchorwatch.alerting.store_schema import SCHEMA_VERSION

    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / FILENAME)
    db.executescript(
        "ALTER TABLE incidents DROP COLUMN acked_by; ALTER TABLE incidents DROP COLUMN acked_ms;"
        "ALTER TABLE silences DROP COLUMN incident_id; DROP TABLE slack_actions;"
        "DROP TABLE slack_signatures; UPDATE meta SET value = '2' WHERE key = 'schema_version';"
    )
    db.close()
    store = Store(tmp_path)  # what the service does at start
    assert store.meta_get("schema_version") == str(SCHEMA_VERSION) == "4"
    store.close()
    db = sqlite3.connect(tmp_path / FILENAME)
    columns = {r[1] for r in db.execute("PRAGMA table_info(incidents)")}
    assert {"acked_by", "acked_ms"} <= columns
    assert "incident_id" in {r[1] for r in db.execute("PRAGMA table_info(silences)")}
    assert db.execute("SELECT COUNT(*) FROM slack_actions").fetchone() == (0,)
    db.close()


def test_a_silence_until_resolved_mutes_its_incident_alone() -> None:
    from anchorwatch.alerting.silences import Muting, new_silence

    made = new_silence(
        doc_type="invoice",
        all_types=False,
        severity=None,
        duration_s=3600,
        reason="from Slack",
        author="ana",
        now_ms=0,
        incident_id="i1-one",
    )
    muting = Muting.at([made], [], 1)
    assert muting.reason("invoice", "critical", "i1-one") is not None
    assert muting.reason("invoice", "critical", "i1-another") is None
    assert muting.reason("invoice", "critical") is None


# --------------------------------------------------------------------------- end to end


def test_a_click_on_the_local_slack_goes_signed_through_the_endpoint(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    """The local Slack sends a click as Slack does; the service's endpoint takes it."""
    h = Harness(_settings(tmp_path, slack, jira), clock)
    incident_id = _opened(h)
    handler = SlackInteractions(h.settings.alerting.state_dir, SECRET)  # real time: as signed
    endpoint = Endpoint(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        lambda: (True, {}),
        lambda: (True, {}),
        slack=handler.handle,
    ).start()
    try:
        parent = _parent(slack)
        click = {"channel": parent["channel"], "ts": parent["ts"], "action_id": ACK}
        slack.interactivity_url = f"{endpoint.url}{PATH}"
        slack.signing_secret = SECRET
        answer = requests.post(f"{slack.url}/_local/click", json=click, timeout=10).json()
        assert answer == {
            "status": 200,
            "answer": {"ok": True, "text": "acknowledged by <@U0LOCAL>"},
        }
        # The page draws the buttons, live.
        page = requests.get(f"{slack.url}/archives/{parent['channel']}", timeout=10).text
        assert "onclick='awClick(this)'" in page
        assert f"data-action='{ACK}'" in page
        # The wrong secret: refused, and said so on the page's answer.
        slack.signing_secret = "not-the-secret"
        click["action_id"] = SILENCE_1H
        answer = requests.post(f"{slack.url}/_local/click", json=click, timeout=10).json()
        assert answer["status"] == 401
        assert requests.post(f"{endpoint.url}{PATH}", data="x", timeout=10).status_code == 401
        assert requests.get(f"{endpoint.url}{PATH}", timeout=10).status_code == 404
    finally:
        endpoint.stop()
    assert h.engine.apply_acks(h.clock.ms()) == 1
    h.drain()
    assert "Acknowledged by <@U0LOCAL>" in orjson.dumps(_parent(slack)["blocks"]).decode()
    (ticket,) = issues(jira)
    # The name is untrusted text: shown literally (wiki markup escaped).
    assert ticket["comments"][-1].startswith(r"Acknowledged by local\-user (Slack user U0LOCAL)")
    assert h.store.incident(incident_id).acked_by == "U0LOCAL"  # type: ignore[union-attr]
