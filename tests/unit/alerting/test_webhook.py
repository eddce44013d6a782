"""The webhook (integrations/webhook.py) in the running service, without Kafka: the harness
of tests/support/alerting_harness.py and the real sender against a local receiver
(alerting/fakes/webhook.py). Bodies shaped as Alertmanager's webhook (version 4), so a
receiver written for Alertmanager works unchanged; routed by severity; delivered through the
outbox at least once, with what receivers deduplicate on."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.fakes.server import Fault
from anchorwatch.alerting.fakes.webhook import LocalWebhook
from anchorwatch.alerting.integrations.webhook import fingerprint, group_key
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.contracts.models import DOC_TYPE_MAX_CHARS
from tests.support.alerting import lifecycle, verdict
from tests.support.alerting_harness import Harness, settings_for
from tests.support.alerting_paging import HOOK_TOKEN, bodies, incident_ids, rows_of, with_paging

#: Alertmanager's webhook body and alert, field for field
#: (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config).
BODY_FIELDS = {
    "version",
    "groupKey",
    "truncatedAlerts",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
}
ALERT_FIELDS = {
    "status",
    "labels",
    "annotations",
    "startsAt",
    "endsAt",
    "generatorURL",
    "fingerprint",
}
WARNING_ONLY = (0.5, 0.87, 0.88, 0.86, 0.5, 0.5, 0.5)


def _harness(
    tmp_path: Path,
    hook: LocalWebhook,
    clock: ManualClock,
    *,
    crash: str | None = None,
    severities: tuple[str, ...] = ("warning", "critical"),
    **webhook: Any,
) -> Harness:
    settings = settings_for(tmp_path, None, None)
    settings = settings.model_copy(
        update={
            "routing": settings.routing.model_validate(
                {"dashboard_url_template": "https://grafana.example.com/d/aw?var-doc={doc_type}"}
            )
        }
    )
    paging = with_paging(settings, hook=hook, webhook_severities=severities, **webhook)
    return Harness(paging, clock, crash=crash)


def test_a_lifecycle_reaches_the_receiver_as_alertmanager_would_send_it(
    tmp_path: Path, receiver: LocalWebhook, clock: ManualClock
) -> None:
    h = _harness(
        tmp_path,
        receiver,
        clock,
        receiver="drift-pager",
        external_url="https://anchorwatch.example.com",
        runbook_url="https://wiki.example.com/drift",
    )
    h.publish(lifecycle("invoice"))
    h.run()
    (incident_id,) = incident_ids(h, "invoice")
    sent = bodies(receiver)
    # Opened (warning), escalated (critical), resolved; progress updates are not sent.
    assert [(b["status"], b["commonLabels"]["severity"]) for b in sent] == [
        ("firing", "warning"),
        ("firing", "critical"),
        ("resolved", "critical"),
    ]
    for body in sent:
        assert set(body) == BODY_FIELDS
        assert body["version"] == "4"
        assert body["truncatedAlerts"] == 0
        assert body["receiver"] == "drift-pager"
        assert body["externalURL"] == "https://anchorwatch.example.com"
        groups = {"alertname": "AnchorDrift", "incident_id": incident_id}
        assert body["groupLabels"] == groups
        assert body["groupKey"] == group_key(groups)
        assert body["groupKey"] == f'{{}}:{{alertname="AnchorDrift", incident_id="{incident_id}"}}'
        (alert,) = body["alerts"]
        assert set(alert) == ALERT_FIELDS
        assert alert["status"] == body["status"]
        assert alert["labels"] == body["commonLabels"]
        assert alert["annotations"] == body["commonAnnotations"]
        assert alert["labels"]["alertname"] == "AnchorDrift"
        assert alert["labels"]["doc_type"] == "invoice"
        assert alert["labels"]["incident_id"] == incident_id
        assert alert["fingerprint"] == fingerprint(incident_id)
        assert len(alert["fingerprint"]) == 16
        assert alert["startsAt"] == "2026-01-05T14:03:00Z"  # opened at the second warning's end
        assert alert["generatorURL"] == "https://grafana.example.com/d/aw?var-doc=invoice"
        assert alert["annotations"]["runbook_url"] == "https://wiki.example.com/drift"
        assert alert["annotations"]["dashboard_url"] == alert["generatorURL"]
    firing, escalated, resolved = (b["alerts"][0] for b in sent)
    assert firing["endsAt"] == escalated["endsAt"] == "0001-01-01T00:00:00Z"
    assert resolved["endsAt"] == "2026-01-05T14:09:00Z"
    assert firing["annotations"]["summary"].startswith("Drift alert (warning): invoice")
    assert resolved["annotations"]["summary"].startswith("Drift resolved (critical): invoice")
    assert {r["status"] for r in rows_of(h, "webhook")} == {"done"}
    alerts = receiver.alerts()
    assert alerts[fingerprint(incident_id)]["statuses"] == ["firing", "firing", "resolved"]


def test_only_routed_severities_reach_the_receiver(
    tmp_path: Path, receiver: LocalWebhook, clock: ManualClock
) -> None:
    h = _harness(tmp_path, receiver, clock, severities=("critical",))
    warning_only = [verdict("receipt", i, m) for i, m in enumerate(WARNING_ONLY)]
    h.publish(warning_only + lifecycle("invoice"))
    h.run()
    assert incident_ids(h, "receipt")
    sent = bodies(receiver)
    # The warning never escalated: nothing; the other fires at its escalation, then resolves.
    assert [(b["status"], b["commonLabels"]["doc_type"]) for b in sent] == [
        ("firing", "invoice"),
        ("resolved", "invoice"),
    ]
    assert sent[0]["commonLabels"]["severity"] == "critical"


def test_doc_types_stay_exact_in_labels_and_safe_and_bounded_in_annotations(
    tmp_path: Path, receiver: LocalWebhook, clock: ManualClock
) -> None:
    odd = 'a "quoted" \\ <b>&amp; {x} — ünïcode 🚨'
    long = "x" * (DOC_TYPE_MAX_CHARS - 1) + "é"
    near = "x" * (DOC_TYPE_MAX_CHARS - 1) + "e"
    h = _harness(tmp_path, receiver, clock, severities=("critical",))
    h.publish(lifecycle(odd) + lifecycle(long) + lifecycle(near))
    h.run()
    firing = [b for b in bodies(receiver) if b["status"] == "firing"]
    labels = [b["alerts"][0]["labels"]["doc_type"] for b in firing]
    assert sorted(labels) == sorted([odd, long, near])  # exact: two types never share one
    prints = {b["alerts"][0]["fingerprint"] for b in firing}
    assert len(prints) == 3
    for body in firing:
        (alert,) = body["alerts"]
        assert len(alert["labels"]["doc_type"]) <= DOC_TYPE_MAX_CHARS
        for value in alert["annotations"].values():
            assert len(value) <= 2000
        assert len(alert["annotations"]["summary"]) < 300  # the doc type cut to 200
    odd_body = next(b for b in firing if b["commonLabels"]["doc_type"] == odd)
    assert odd in odd_body["commonAnnotations"]["summary"]  # visible text is kept as it is


def test_a_crash_after_the_receiver_took_a_body_sends_it_again_with_the_same_identity(
    tmp_path: Path, receiver: LocalWebhook, clock: ManualClock
) -> None:
    h = _harness(tmp_path, receiver, clock, crash="send_after:webhook@1")
    h.publish(lifecycle("invoice"))
    h.run()
    assert h.crashes == 1
    sent = bodies(receiver)
    assert [b["status"] for b in sent] == ["firing", "firing", "firing", "resolved"]
    assert sent[0] == sent[1]  # at least once, as Alertmanager: the same body again
    assert len({b["groupKey"] for b in sent}) == 1
    assert len({b["alerts"][0]["fingerprint"] for b in sent}) == 1
    assert {r["status"] for r in rows_of(h, "webhook")} == {"done"}


def test_outages_are_retried_and_a_refusal_fails_only_its_entry(
    tmp_path: Path, receiver: LocalWebhook, clock: ManualClock
) -> None:
    receiver.faults.add(Fault.parse({"method": "webhook", "status": 503, "times": 2}))
    receiver.faults.add(
        Fault.parse({"method": "webhook", "status": 422, "skip": 1, "error": "no such team"})
    )
    h = _harness(tmp_path, receiver, clock, severities=("critical",))
    h.publish(lifecycle("invoice"))
    h.run()
    assert [r["status"] for r in receiver.requests] == [503, 503, 200, 422]
    rows = rows_of(h, "webhook")
    assert [r["status"] for r in rows] == ["done", "failed"]
    assert "HTTP 422: no such team" in rows[1]["error"]


def test_the_bearer_token_is_sent_and_neither_it_nor_the_url_is_ever_logged(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with LocalWebhook(token=HOOK_TOKEN) as guarded:
        h = _harness(tmp_path, guarded, clock, bearer_token=HOOK_TOKEN)
        h.publish(lifecycle("invoice"))
        h.run()
        assert [r["status"] for r in guarded.requests] == [200, 200, 200]
    # A receiver that is not there: retried, and the error names neither URL nor token.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gone = h.settings.webhook.model_validate(
        {
            "enabled": True,
            "url": f"http://127.0.0.1:{port}/hooks/s3cret-path",
            "bearer_token": HOOK_TOKEN,
        }
    )
    settings = h.settings.model_copy(update={"webhook": gone})
    again = Harness(settings.model_copy(), clock)
    again.publish(lifecycle("receipt"))
    again.consume()
    again.drain()
    (row, *_) = [r for r in rows_of(again, "webhook") if r["status"] != "done"]
    assert row["error"].startswith("webhook firing: no response (connection error")
    assert "s3cret" not in caplog.text
    assert "s3cret" not in str(again.store.outbox_rows())
    assert HOOK_TOKEN not in caplog.text
    assert HOOK_TOKEN not in repr(settings.webhook)
