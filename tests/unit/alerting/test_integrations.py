"""The integration registry: which integrations the settings turn on, and what each asks
of every kind of incident change (the engine writes outbox entries from these)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.integrations import registry
from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.settings import AlertingSettings

KINDS = {"opened", "reopened", "updated", "progress", "resolved", "acknowledged"}
FOLLOW_UPS = {"chart"}  # entries an integration writes after a change's own


def settings(
    tmp_path: Path, *, alerting: dict[str, Any] | None = None, **sections: Any
) -> AlertingSettings:
    return AlertingSettings.load(alerting={"state_dir": tmp_path, **(alerting or {})}, **sections)


def test_the_settings_turn_integrations_on(tmp_path: Path) -> None:
    assert [i.name for i in registry.enabled(settings(tmp_path))] == ["events"]
    everything = settings(
        tmp_path,
        slack={"mode": "bot", "bot_token": "xoxb-x"},
        jira={"enabled": True},
    )
    assert [i.name for i in registry.enabled(everything)] == ["slack", "jira", "events"]
    quiet = settings(tmp_path, alerting={"drift_events": False})
    assert registry.enabled(quiet) == []


def test_every_integration_acts_on_known_kinds_with_known_actions() -> None:
    for integration in registry.INTEGRATIONS:
        assert set(integration.actions) <= KINDS | FOLLOW_UPS, integration.name
        assert set(integration.actions.values()) <= {
            "open",
            "update",
            "resolve",
            "chart",
            "acknowledge",
        }
        assert set(integration.then) <= set(integration.actions)
        assert set(integration.then.values()) <= set(integration.actions)
        # A follow-up is written only after a change, never for one.
        assert not FOLLOW_UPS & set(integration.then)
    # Progress updates are for people, not for the drift-events topic.
    assert "progress" not in registry.BY_NAME["events"].actions
    # An acknowledgement is for people and pagers (Slack, Jira, PagerDuty), not downstream.
    acks = {i.name for i in registry.INTEGRATIONS if "acknowledged" in i.actions}
    assert acks == {"slack", "jira", "pagerduty"}
    assert registry.BY_NAME["jira"].then == {"reopened": "updated"}
    # Every Slack update in a thread is followed by its chart.
    slack = registry.BY_NAME["slack"]
    assert {k for k, a in slack.actions.items() if a == "update"} == set(slack.then)
    assert set(slack.then.values()) == {"chart"}


def test_charts_follow_updates_only_when_the_settings_draw_them(tmp_path: Path) -> None:
    slack = registry.BY_NAME["slack"]
    history = {"history": [[0, 60_000, 0.9, 0.85, 10]]}
    bot = settings(tmp_path, slack={"mode": "bot", "bot_token": "xoxb-x"})
    assert slack.then_if(bot, history)
    assert not slack.then_if(bot, {"history": []})  # nothing to draw
    off = settings(tmp_path, slack={"mode": "bot", "bot_token": "xoxb-x", "charts": False})
    assert not slack.then_if(off, history)
    hook = settings(tmp_path, slack={"mode": "webhook", "webhook_url": "https://h.example/x"})
    assert not slack.then_if(hook, history)


def test_rates_come_from_the_settings(tmp_path: Path) -> None:
    s = settings(tmp_path, alerting={"slack_rate_per_s": 2.5, "slack_workspace_rate_per_s": 7})
    assert registry.BY_NAME["slack"].rate_per_s(s) == 2.5  # per channel
    assert registry.BY_NAME["slack"].total_rate_per_s(s) == 7  # per workspace
    assert registry.BY_NAME["jira"].rate_per_s(s) == s.alerting.jira_rate_per_s
    assert registry.BY_NAME["jira"].total_rate_per_s(s) is None
    assert registry.BY_NAME["events"].rate_per_s(s) is None
    # What the service's sender threads are given; a dry run sends nothing, unpaced.
    assert AlertingService(s)._rates("slack") == (2.5, 7)
    dry = settings(tmp_path, alerting={"dry_run": True})
    assert AlertingService(dry)._rates("slack") == (None, None)


def test_an_unknown_name_is_refused() -> None:
    assert [i.name for i in registry.named(("events", "slack"))] == ["slack", "events"]
    with pytest.raises(KeyError, match="pager"):
        registry.named(("slack", "pager"))
