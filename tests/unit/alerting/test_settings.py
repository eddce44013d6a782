"""Alerting settings: sections, secrets from env or files (never shown), errors naming fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.settings import AlertingSettings, RoutingSection
from anchorwatch.settings import SettingsError, describe_fields


def test_defaults_send_nothing_anywhere() -> None:
    s = AlertingSettings.load()
    assert s.slack.mode == "off"
    assert not s.jira.enabled
    assert s.jira.summary_template == "[URGENT] Drift Alert: {doc_type} - Score {avg_drift}"
    assert s.jira.priorities == {"warning": "High", "critical": "Highest"}
    assert s.routing.default_channel == "#drift-alerts"
    assert s.retry.max_attempts == 6


def test_env_and_file_with_secret_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "slack-token"
    token_file.write_text("xoxb-from-file\n")
    jira_file = tmp_path / "jira-token"
    jira_file.write_text("  jira-secret  ")
    config = tmp_path / "aw.toml"
    config.write_text(
        f'[slack]\nmode = "bot"\nbot_token_file = "{token_file}"\n'
        f'[jira]\nenabled = true\nurl = "https://example.atlassian.net/"\nuser = "a@b.c"\n'
        f'api_token_file = "{jira_file}"\nreopen_transition = "Open again"\n'
        '[routing]\nseverity_channels = { critical = "#ops-pager" }\n'
        "[retry]\nmax_attempts = 3\n"
    )
    monkeypatch.setenv("ANCHORWATCH_ROUTING__DOC_TYPE_CHANNELS", '{"medical_report": "C0ABCDEF1"}')
    monkeypatch.setenv("ANCHORWATCH_JIRA__PROJECT", "DRIFT")
    s = AlertingSettings.load(config)
    token = s.slack.token()
    assert token is not None
    assert token.get_secret_value() == "xoxb-from-file"
    jira_token = s.jira.token()
    assert jira_token is not None
    assert jira_token.get_secret_value() == "jira-secret"
    assert s.jira.url == "https://example.atlassian.net"
    assert s.jira.project == "DRIFT"
    assert s.jira.reopen_transition == "Open again"
    assert s.routing.channel_for("medical_report", "critical") == "C0ABCDEF1"
    assert s.routing.channel_for("invoice", "critical") == "#ops-pager"
    assert s.routing.channel_for("invoice", "warning") == "#drift-alerts"
    assert s.retry.policy().max_attempts == 3


def test_secrets_never_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANCHORWATCH_SLACK__MODE", "bot")
    monkeypatch.setenv("ANCHORWATCH_SLACK__BOT_TOKEN", "xoxb-very-secret")
    monkeypatch.setenv("ANCHORWATCH_JIRA__API_TOKEN", "jira-very-secret")
    s = AlertingSettings.load()
    shown = repr(s) + str(s.model_dump()) + s.model_dump_json()
    assert "very-secret" not in shown
    assert "**********" in shown


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ANCHORWATCH_SLACK__MODE": "bot"}, "bot_token: required when mode is 'bot'"),
        ({"ANCHORWATCH_SLACK__MODE": "webhook"}, "webhook_url: required when mode is 'webhook'"),
        (
            {"ANCHORWATCH_SLACK__MODE": "webhook", "ANCHORWATCH_SLACK__WEBHOOK_URL": "hooks"},
            "webhook_url: must be an http(s) URL",
        ),
        (
            {"ANCHORWATCH_SLACK__BOT_TOKEN": "a", "ANCHORWATCH_SLACK__BOT_TOKEN_FILE": "/x"},
            "bot_token_file: set bot_token or bot_token_file, not both",
        ),
        ({"ANCHORWATCH_SLACK__BOT_TOKEN_FILE": "/nonexistent/t"}, "bot_token_file: cannot read"),
        ({"ANCHORWATCH_SLACK__API_URL": "slack.com"}, "api_url: must be an http(s) URL"),
        ({"ANCHORWATCH_SLACK__CHART_WINDOWS": "1"}, "slack.chart_windows"),
        (
            {
                "ANCHORWATCH_JIRA__ENABLED": "true",
                "ANCHORWATCH_JIRA__URL": "https://x.atlassian.net",
            },
            "api_token: required for a Jira that is not local",
        ),
        ({"ANCHORWATCH_JIRA__PROJECT": "ops"}, "must be a Jira project key"),
        ({"ANCHORWATCH_JIRA__SUMMARY_TEMPLATE": "{doc_type} {score}"}, "unknown placeholder"),
        ({"ANCHORWATCH_JIRA__PRIORITIES": '{"fatal": "Highest"}'}, "jira.priorities.fatal"),
        ({"ANCHORWATCH_JIRA__EXTRA_LABELS": '["two words"]'}, "without spaces"),
        ({"ANCHORWATCH_ROUTING__DEFAULT_CHANNEL": "#Ops Alerts"}, "is not a Slack channel"),
        ({"ANCHORWATCH_ROUTING__SEVERITY_CHANNELS": '{"critical": "x y"}'}, "not a Slack channel"),
        (
            {"ANCHORWATCH_ROUTING__DASHBOARD_URL_TEMPLATE": "https://g/{doc}"},
            "only {doc_type} may be used",
        ),
        ({"ANCHORWATCH_RETRY__MAX_DELAY_S": "0.5"}, "max_delay_s: must not be below base_delay_s"),
    ],
)
def test_errors_name_the_field(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as raised:
        AlertingSettings.load()
    assert expected in str(raised.value)


def test_a_local_jira_needs_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANCHORWATCH_JIRA__ENABLED", "true")
    assert AlertingSettings.load().jira.token() is None


def test_dashboard_url_encodes_the_doc_type() -> None:
    routing = RoutingSection(
        dashboard_url_template="https://g.example/d/aw?var-doc_type={doc_type}"
    )
    assert routing.dashboard_url("a b&<!here>") == (
        "https://g.example/d/aw?var-doc_type=a%20b%26%3C%21here%3E"
    )
    assert RoutingSection().dashboard_url("x") is None


def test_retry_policy_from_settings_takes_an_injected_clock() -> None:
    clock = ManualClock()
    policy = AlertingSettings.load().retry.policy(sleep=clock.sleep, clock=clock)
    assert policy.sleep == clock.sleep
    assert policy.max_elapsed_s == 300


def test_every_setting_is_described() -> None:
    rows = describe_fields(AlertingSettings)
    names = [env for env, _ in rows]
    assert "ANCHORWATCH_SLACK__BOT_TOKEN_FILE" in names
    assert "ANCHORWATCH_JIRA__REOPEN_TRANSITION" in names
    assert "ANCHORWATCH_ROUTING__DOC_TYPE_CHANNELS" in names
    for env, text in rows:
        assert not text.startswith(" ["), f"{env} has no description"


def test_a_webhook_url_that_is_no_url_is_refused_without_showing_it() -> None:
    with pytest.raises(SettingsError) as caught:
        AlertingSettings.load(
            slack={"mode": "webhook", "webhook_url": "ftp://hooks.x/T0/B0/s3cr3t"}
        )
    assert "webhook_url: must be an http(s) URL" in str(caught.value)
    assert "s3cr3t" not in str(caught.value)


def test_work_split_needs_postgresql_and_keeps_every_feature_on() -> None:
    with pytest.raises(SettingsError, match="work_split: needs the state in PostgreSQL"):
        AlertingSettings.load(None, alerting={"work_split": True})
    url = "postgresql://anchorwatch@db:5432/anchorwatch"
    split = AlertingSettings.load(None, alerting={"work_split": True, "state_url": url})
    assert split.alerting.work_split
    assert split.grouping.enabled
    assert split.watchdog.enabled
    assert split.alerting.refit
