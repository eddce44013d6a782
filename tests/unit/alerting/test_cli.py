"""`anchorwatch alerting ...` commands, run against the group directly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import click
import pytest
import requests
from click.testing import CliRunner

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.cli.alerting import alerting
from anchorwatch.errors import AnchorwatchError
from tests.support.alerting import SLACK_TOKEN


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under the group, nested groups' included, as its words."""
    found = []
    for name, command in sorted(group.commands.items()):
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


@pytest.mark.parametrize("words", _commands(alerting), ids=" ".join)
def test_every_command_has_help_describing_every_option(words: tuple[str, ...]) -> None:
    result = CliRunner().invoke(alerting, [*words, "--help"])
    assert result.exit_code == 0, result.output
    command: click.Command = alerting
    for word in words:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    assert command.help
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":
            assert param.help, f"{words} {param.opts} has no help"


def test_send_test_reaches_both_local_servers(slack: LocalSlack, jira: LocalJira) -> None:
    env = {
        "ANCHORWATCH_SLACK__MODE": "bot",
        "ANCHORWATCH_SLACK__API_URL": slack.api_url,
        "ANCHORWATCH_SLACK__BOT_TOKEN": SLACK_TOKEN,
        "ANCHORWATCH_JIRA__ENABLED": "true",
        "ANCHORWATCH_JIRA__URL": jira.url,
    }
    result = CliRunner().invoke(alerting, ["send-test", "--doc-type", "invoice"], env=env)
    assert result.exit_code == 0, result.output
    assert "chart uploaded: True" in result.output
    assert "jira: OPS-1 (created), resolved: True" in result.output
    assert len(slack.messages) == 4  # parent, update, chart, resolution
    assert jira.issues["OPS-1"]["fields"]["status"] == "Done"


def test_send_test_webhook_mode(slack: LocalSlack) -> None:
    env = {
        "ANCHORWATCH_SLACK__MODE": "webhook",
        "ANCHORWATCH_SLACK__WEBHOOK_URL": slack.webhook_url,
    }
    result = CliRunner().invoke(alerting, ["send-test"], env=env)
    assert result.exit_code == 0, result.output
    assert [m["subtype"] for m in slack.messages] == ["webhook", "webhook"]


def test_send_test_with_nothing_configured_says_so() -> None:
    result = CliRunner().invoke(alerting, ["send-test"])
    assert result.exit_code != 0
    assert "nothing configured" in result.output


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(alerting, ["local-slack", "--port", str(port)])
    assert isinstance(result.exception, AnchorwatchError)
    assert f"cannot listen on 127.0.0.1:{port}" in str(result.exception)


def test_local_jira_command_serves_until_stopped() -> None:
    code = "from anchorwatch.cli.alerting import alerting; alerting(['local-jira', '--port', '0'])"
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("local Jira on http://127.0.0.1:")
        url = first.split()[3].rstrip("/")
        info = requests.get(f"{url}/rest/api/2/serverInfo", timeout=5).json()
        assert info["serverTitle"] == "anchorwatch local Jira"
    finally:
        process.terminate()
        process.wait(timeout=10)
