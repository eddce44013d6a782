"""The paging receivers' settings (integrations/paging_settings.py): secrets as the other
integrations keep them, severities that can always resolve what they paged, and the routing
rule the fan-out asks before writing an entry; their place in the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from anchorwatch.alerting.fanout import Fanout
from anchorwatch.alerting.integrations import registry
from anchorwatch.alerting.integrations.paging_settings import (
    PagerDutySection,
    WebhookSection,
    routes,
)
from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import BatchWrite
from anchorwatch.settings import SettingsError

KEY = "k" * 32


def _payload(severity: str) -> dict[str, Any]:
    return {"view": {"severity": severity}}


def _settings(tmp_path: Path, **sections: Any) -> AlertingSettings:
    return AlertingSettings.load(alerting={"state_dir": tmp_path}, **sections)


# --------------------------------------------------------------------------- secrets


def test_pagerduty_needs_a_routing_key_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match="routing_key: required when enabled"):
        PagerDutySection(enabled=True)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    section = PagerDutySection.model_validate({"enabled": True, "routing_key_file": key_file})
    assert section.key() is not None
    assert section.key().get_secret_value() == KEY  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="not both"):
        PagerDutySection.model_validate({"routing_key": KEY, "routing_key_file": key_file})
    monkeypatch.setenv("ANCHORWATCH_PAGERDUTY__ENABLED", "true")
    monkeypatch.setenv("ANCHORWATCH_PAGERDUTY__ROUTING_KEY", KEY)
    monkeypatch.setenv("ANCHORWATCH_PAGERDUTY__SEVERITIES", '["warning", "critical"]')
    loaded = AlertingSettings.load(alerting={"state_dir": tmp_path})
    assert loaded.pagerduty.enabled
    assert loaded.pagerduty.severities == ["warning", "critical"]
    assert KEY not in repr(loaded)
    assert KEY not in str(loaded.model_dump())


def test_the_webhook_url_is_a_secret_checked_without_being_echoed(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="url: required when enabled"):
        WebhookSection(enabled=True)
    with pytest.raises(SettingsError, match="must be an http") as caught:
        _settings(tmp_path, webhook={"enabled": True, "url": "ftp://host/s3cret"})
    assert "s3cret" not in str(caught.value)  # what the service says at start
    url_file = tmp_path / "url"
    url_file.write_text("https://hooks.example.com/s3cret\n")
    section = WebhookSection.model_validate({"enabled": True, "url_file": url_file})
    assert section.target().get_secret_value() == "https://hooks.example.com/s3cret"  # type: ignore[union-attr]
    assert "s3cret" not in repr(section)
    with pytest.raises(ValidationError, match="bearer_token: must not be empty"):
        WebhookSection.model_validate({"bearer_token": " "})


# --------------------------------------------------------------------------- severities


@pytest.mark.parametrize("section", [PagerDutySection, WebhookSection])
def test_severities_must_reach_up_to_critical(section: type[PagerDutySection]) -> None:
    with pytest.raises(ValidationError, match="leaves out a higher severity"):
        section.model_validate({"severities": ["warning"]})
    with pytest.raises(ValidationError, match="at least one severity"):
        section.model_validate({"severities": []})
    with pytest.raises(ValidationError):
        section.model_validate({"severities": ["error"]})
    kept = section.model_validate({"severities": ["critical", "warning", "critical"]})
    assert kept.severities == ["warning", "critical"]


def test_the_defaults_page_criticals_and_send_everything_to_the_webhook() -> None:
    assert PagerDutySection().severities == ["critical"]
    assert PagerDutySection().url == "https://events.pagerduty.com/v2/enqueue"
    assert WebhookSection().severities == ["warning", "critical"]


# --------------------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("severities", "escalations", "expected"),
    [
        # kind -> sent for (warning, critical) payloads
        (["critical"], False, {"opened": (0, 1), "updated": (0, 1), "resolved": (0, 1)}),
        (["critical"], True, {"opened": (0, 1), "updated": (0, 1), "resolved": (0, 1)}),
        # An incident paged as a warning is not paged again when it escalates ...
        (["warning", "critical"], False, {"opened": (1, 1), "updated": (0, 0), "resolved": (1, 1)}),
        # ... while the webhook says firing again with the new severity.
        (["warning", "critical"], True, {"opened": (1, 1), "updated": (0, 1), "resolved": (1, 1)}),
    ],
)
def test_the_routing_rule(
    severities: list[str], escalations: bool, expected: dict[str, tuple[int, int]]
) -> None:
    for kind, (warning, critical) in expected.items():
        for severity, sent in (("warning", warning), ("critical", critical)):
            if kind == "updated" and severity == "warning":
                continue  # an escalation is always to critical
            got = routes(severities, kind, _payload(severity), escalations=escalations)
            assert got == bool(sent), (kind, severity)
    assert routes(severities, "reopened", _payload("critical"), escalations=escalations)


def test_the_fanout_writes_no_entry_a_receiver_does_not_route(tmp_path: Path) -> None:
    settings = _settings(tmp_path, pagerduty={"enabled": True, "routing_key": KEY})
    fanout = Fanout(settings, registry.named(["pagerduty", "events"]))
    write = BatchWrite(now_ms=1)
    event = {"event_id": "e1"}
    seq = fanout.enqueue_change(write, 1, "i1", 1, "opened", _payload("warning"), event)
    seq = fanout.enqueue_change(write, 1, "i1", seq, "updated", _payload("critical"), event)
    seq = fanout.enqueue_change(write, 1, "i1", seq, "resolved", _payload("critical"), event)
    assert seq == 4
    assert [(e.integration, e.seq, e.action) for e in write.outbox] == [
        ("events", 1, "open"),
        ("pagerduty", 2, "open"),
        ("events", 2, "open"),
        ("pagerduty", 3, "resolve"),
        ("events", 3, "resolve"),
    ]


# --------------------------------------------------------------------------- registry


def test_the_receivers_are_integrations_the_settings_turn_on(tmp_path: Path) -> None:
    assert [i.name for i in registry.enabled(_settings(tmp_path))] == ["events"]
    both = _settings(
        tmp_path,
        pagerduty={"enabled": True, "routing_key": KEY, "rate_per_s": 1.5},
        webhook={"enabled": True, "url": "https://hooks.example.com/x"},
    )
    assert [i.name for i in registry.enabled(both)] == ["pagerduty", "webhook", "events"]
    assert registry.BY_NAME["pagerduty"].rate_per_s(both) == 1.5
    assert registry.BY_NAME["webhook"].rate_per_s(both) == 10.0
    assert AlertingService(both)._rates("pagerduty") == (1.5, None)
    for name in ("pagerduty", "webhook"):
        integration = registry.BY_NAME[name]
        assert integration.carries == "notification"  # muted with Slack and Jira
        assert "progress" not in integration.actions
        assert integration.actions["resolved"] == "resolve"
