"""PagerDuty (integrations/pagerduty.py) in the running service, without Kafka: the harness
of tests/support/alerting_harness.py and the real sender against the local PagerDuty
(alerting/fakes/pagerduty.py). One alert per incident under one dedup_key, paged at its first
routed severity and resolved with it, exactly once through the outbox, whatever PagerDuty
answers and wherever the process dies."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY, LocalPagerDuty
from anchorwatch.alerting.fakes.server import Fault
from anchorwatch.alerting.integrations.pagerduty import (
    PagerDutySender,
    dedup_key,
    pagerduty_event,
)
from anchorwatch.alerting.notify import ManualClock, OneAttempt
from anchorwatch.alerting.payload import view_from_json
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import new_silence
from tests.support.alerting import lifecycle, verdict
from tests.support.alerting_harness import Harness, settings_for
from tests.support.alerting_paging import incident_ids, rows_of, with_paging

#: An incident that opens as a warning and resolves without escalating.
WARNING_ONLY = (0.5, 0.87, 0.88, 0.86, 0.5, 0.5, 0.5)


def _harness(
    tmp_path: Path,
    pagerduty: LocalPagerDuty,
    clock: ManualClock,
    *,
    severities: tuple[str, ...] = ("critical",),
    crash: str | None = None,
    dry_run: bool = False,
) -> Harness:
    settings = settings_for(tmp_path, None, None)
    paging = with_paging(settings, pagerduty=pagerduty, pagerduty_severities=severities)
    return Harness(paging, clock, crash=crash, dry_run=dry_run)


def _warning_only(doc_type: str) -> list[object]:
    return [verdict(doc_type, i, m) for i, m in enumerate(WARNING_ONLY)]


def _actions(server: LocalPagerDuty, key: str) -> list[str]:
    return [e["event_action"] for e in server.events if e["dedup_key"] == key]


# --------------------------------------------------------------------------- lifecycle


def test_an_escalating_incident_pages_at_the_escalation_and_resolves_under_one_key(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    h.publish(lifecycle("invoice"))
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    key = dedup_key(incident_id)
    # Opened as a warning (not routed): nothing; escalated: the trigger; resolved: resolve.
    assert [(r["kind"], r["action"]) for r in rows_of(h, "pagerduty")] == [
        ("updated", "open"),
        ("resolved", "resolve"),
    ]
    assert _actions(pagerduty, key) == ["trigger", "resolve"]
    (alert,) = pagerduty.alerts
    assert alert["dedup_key"] == key
    assert alert["statuses"] == ["triggered", "resolved"]
    assert alert["severity"] == "critical"
    trigger = pagerduty.events[0]
    assert trigger["payload"]["summary"].startswith("[CRITICAL] Drift alert: invoice mean drift")
    assert trigger["payload"]["source"] == "anchorwatch"
    assert trigger["payload"]["timestamp"] == "2026-01-05T14:04:00Z"  # the escalating window
    details = trigger["payload"]["custom_details"]
    assert details["doc_type"] == "invoice"
    assert details["incident_id"] == incident_id
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="pagerduty", outcome="sent")
        == 2
    )


def test_warnings_routed_page_at_the_opening_and_the_escalation_pages_no_more(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock, severities=("warning", "critical"))
    h.publish(lifecycle("invoice"))
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    assert [r["kind"] for r in rows_of(h, "pagerduty")] == ["opened", "resolved"]
    assert _actions(pagerduty, dedup_key(incident_id)) == ["trigger", "resolve"]
    (alert,) = pagerduty.alerts
    assert alert["severity"] == "warning"  # paged once, as it was then
    assert alert["status"] == "resolved"


def test_a_warning_that_never_escalates_never_reaches_pagerduty(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    h.publish(_warning_only("receipt") + lifecycle("invoice"))
    h.run()
    assert incident_ids(h, "receipt")  # it was an incident, with its drift events
    assert {e["doc_type"] for e in h.events.sent} == {"receipt", "invoice"}
    (receipt,) = incident_ids(h, "receipt")
    assert not [r for r in rows_of(h, "pagerduty") if r["incident_id"] == receipt]
    assert _actions(pagerduty, dedup_key(receipt)) == []
    assert [a["summary"].split(":")[1].split()[0] for a in pagerduty.alerts] == ["invoice"]


def test_a_reopened_incident_pages_again_under_its_own_key(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    # Resolved, then back within the rule's reopen_within: the same incident re-opens.
    h.publish(
        lifecycle("invoice") + [verdict("invoice", 9 + i, m) for i, m in enumerate((0.95,) * 3)]
    )
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    assert [r["kind"] for r in rows_of(h, "pagerduty")] == ["updated", "resolved", "reopened"]
    key = dedup_key(incident_id)
    assert _actions(pagerduty, key) == ["trigger", "resolve", "trigger"]
    assert [(a["dedup_key"], a["status"]) for a in pagerduty.alerts] == [
        (key, "resolved"),
        (key, "triggered"),  # PagerDuty opens a new alert once the old one is resolved
    ]


def test_a_silenced_incident_pages_only_once_nothing_mutes_it(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    made = new_silence(
        doc_type="invoice",
        all_types=False,
        severity=None,
        duration_s=3600,
        reason="model rollout",
        author="ana",
        now_ms=h.clock.ms(),
    )
    book = SilenceBook(h.settings.alerting.state_dir)
    book.add(made)
    h.publish(lifecycle("invoice")[:5])  # opened, escalated: muted
    h.run()
    assert pagerduty.events == []
    book.expire(made.silence_id, by="ana", now_ms=h.clock.ms())
    book.close()
    assert h.engine.release_held(h.clock.ms()) == 1
    h.drain()
    (alert,) = pagerduty.alerts
    assert (alert["status"], alert["severity"]) == ("triggered", "critical")  # as it stands
    h.publish(lifecycle("invoice")[5:])
    h.run()
    assert alert["statuses"] == ["triggered", "resolved"]
    assert [e["event_action"] for e in pagerduty.events] == ["trigger", "resolve"]


def test_a_resolution_of_an_incident_never_paged_opens_nothing(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    """Posted as a warning, escalated while muted (people hear nothing), resolved (the
    resolution goes out, so no ticket stays open): PagerDuty gets a resolve for a key it
    never saw, and ignores it."""
    h = _harness(tmp_path, pagerduty, clock)
    h.publish(lifecycle("invoice")[:3])  # opened as a warning: posted, not paged
    h.run()
    book = SilenceBook(h.settings.alerting.state_dir)
    book.add(
        new_silence(
            doc_type="invoice",
            all_types=False,
            severity=None,
            duration_s=3600,
            reason="model rollout",
            author="ana",
            now_ms=h.clock.ms(),
        )
    )
    book.close()
    h.publish(lifecycle("invoice")[3:])
    h.run()
    assert [e["event_action"] for e in pagerduty.events] == ["resolve"]
    assert pagerduty.alerts == []


# --------------------------------------------------------------------------- failures


def test_throttling_and_outages_are_retried_until_paged(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    pagerduty.faults.add(_fault({"status": 429, "retry_after": 1, "times": 2}))
    pagerduty.faults.add(_fault({"status": 503, "times": 1}))
    h.publish(lifecycle("invoice"))
    h.run()
    assert [r["status"] for r in pagerduty.requests] == [429, 429, 503, 202, 202]
    (alert,) = pagerduty.alerts
    assert alert["events"] == ["trigger", "resolve"]
    assert {r["status"] for r in rows_of(h, "pagerduty")} == {"done"}
    assert (
        h.value(
            "anchorwatch_alerting_notifications_total", integration="pagerduty", outcome="retry"
        )
        == 3
    )


def test_an_invalid_event_fails_its_entry_and_no_other(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    h = _harness(tmp_path, pagerduty, clock)
    pagerduty.faults.add(_fault({"status": 400, "error": "'payload.summary' is invalid"}))
    h.publish(lifecycle("invoice") + lifecycle("receipt"))
    h.run()
    rows = rows_of(h, "pagerduty")
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["action"] == "open"
    assert "HTTP 400" in failed[0]["error"]
    assert "'payload.summary' is invalid" in failed[0]["error"]
    assert all(r["status"] == "done" for r in rows if r is not failed[0])
    # The other incident paged and resolved; the failed one's resolve changed nothing.
    (alert,) = pagerduty.alerts
    assert alert["statuses"] == ["triggered", "resolved"]
    assert alert["dedup_key"] != dedup_key(failed[0]["incident_id"])
    assert (
        h.value(
            "anchorwatch_alerting_notifications_total", integration="pagerduty", outcome="failed"
        )
        == 1
    )


@pytest.mark.parametrize(
    "crash",
    [
        "send_before:pagerduty@1",
        "send_after:pagerduty@1",  # PagerDuty took the trigger; the outbox never heard
        "done_in_commit:pagerduty@1",
        "send_after:pagerduty@2",  # ... the resolve
    ],
)
def test_a_crash_around_a_send_never_opens_a_second_alert(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock, crash: str
) -> None:
    h = _harness(tmp_path, pagerduty, clock, crash=crash)
    h.publish(lifecycle("invoice"))
    h.run()
    assert h.crashes == 1
    (incident_id,) = incident_ids(h, "invoice")
    (alert,) = pagerduty.alerts
    assert alert["dedup_key"] == dedup_key(incident_id)
    assert alert["statuses"] == ["triggered", "resolved"]
    sent = _actions(pagerduty, alert["dedup_key"])
    resent = 1 if crash.startswith(("send_after", "done_in_commit")) else 0
    assert len(sent) == 2 + resent  # the event cut off is sent again, under the same key
    assert sent[0] == "trigger"
    assert sent[-1] == "resolve"
    assert {r["status"] for r in rows_of(h, "pagerduty")} == {"done"}


# --------------------------------------------------------------------------- the secret


def test_the_routing_key_is_never_stored_logged_or_shown(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    pagerduty.faults.add(_fault({"status": 400}))
    pagerduty.faults.add(_fault({"status": 500, "times": 1}))
    h = _harness(tmp_path, pagerduty, clock)
    h.publish(lifecycle("invoice") + lifecycle("receipt"))
    h.run()
    dry = _harness(tmp_path / "dry", pagerduty, clock, dry_run=True)
    dry.publish(lifecycle("invoice"))
    dry.run()
    assert "dry run: would send" in caplog.text
    assert LOCAL_ROUTING_KEY not in caplog.text
    for row in h.store.outbox_rows() + dry.store.outbox_rows():
        assert LOCAL_ROUTING_KEY not in str(row)
    assert LOCAL_ROUTING_KEY not in repr(h.settings.pagerduty)


def test_an_acknowledge_is_sent_as_pagerduty_takes_it(
    tmp_path: Path, pagerduty: LocalPagerDuty, clock: ManualClock
) -> None:
    """As an acknowledgement in Slack sends it (test_slack_actions.py): the sender's event
    builder and the local PagerDuty know it."""
    h = _harness(tmp_path, pagerduty, clock)
    h.publish(lifecycle("invoice")[:5])
    h.run()
    (row,) = rows_of(h, "pagerduty")
    assert row["status"] == "done"  # the trigger
    view = view_from_json(orjson.loads(row["payload"])["view"])
    sender = PagerDutySender.from_settings(h.settings.pagerduty, OneAttempt())
    event = pagerduty_event("acknowledge", view, "anchorwatch")
    assert event == {"event_action": "acknowledge", "dedup_key": dedup_key(view.incident_id)}
    sender._post.post("acknowledge", {"routing_key": LOCAL_ROUTING_KEY, **event})
    sender.close()
    (alert,) = pagerduty.alerts
    assert alert["statuses"] == ["triggered", "acknowledged"]


def _fault(spec: dict[str, object]) -> Fault:
    return Fault.parse({"method": "enqueue", **spec})
