"""One settings loader for the whole command line: `--config FILE` is given once, to
`anchorwatch`, and every command that loads settings reads that file (no command has a
--config of its own)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from anchorwatch.cli import cli
from anchorwatch.settings import SettingsError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("ANCHORWATCH_"):
            monkeypatch.delenv(key)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        out += _commands(command, path) if isinstance(command, click.Group) else [path]
    return out


def test_only_the_root_takes_a_config_file() -> None:
    assert [p.name for p in cli.params if p.name == "config"] == ["config"]
    for path in _commands(cli):
        command = cli
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]  # type: ignore[assignment]
        assert "--config" not in {o for p in command.params for o in p.opts}, path


def test_groups_are_where_people_look_for_them() -> None:
    commands = {" ".join(p) for p in _commands(cli)}
    assert {"baseline fit", "baseline show", "baseline backtest"} <= commands
    assert {"ingest serve", "ingest replay", "alerting serve", "job submit"} <= commands
    assert "backtest" not in cli.commands


# Every command that loads settings, with arguments that get it that far and no further
# (a bad file stops it before any broker, cluster or network is reached).
LOADING = [
    ["ingest", "serve"],
    ["ingest", "replay", "{history}"],
    ["job", "run"],
    ["job", "submit", "--jobmanager", "127.0.0.1:1"],
    ["baseline", "fit", "--windows-file", "{history}", "--no-publish", "--out", "{out}"],
    ["baseline", "show"],
    ["baseline", "backtest", "{history}"],
    ["alerting", "serve"],
    ["alerting", "incidents"],
    ["alerting", "send-test"],
    ["stack", "status"],
    ["jvm", "fetch"],
    ["generate", "--minutes", "1", "--doc-types", "1", "--produce"],
    ["read", "anchorwatch.verdicts"],
    ["demo"],
]


@pytest.mark.parametrize("args", LOADING, ids=lambda a: " ".join(a[:2]))
def test_every_command_reads_the_root_config_file(tmp_path: Path, args: list[str]) -> None:
    config = tmp_path / "anchorwatch.toml"
    config.write_text("[topics]\npartitions = 0\n", encoding="utf-8")  # valid TOML, bad value
    history = tmp_path / "windows.csv"
    history.write_text("doc_type,window_start,count,mean\nnda,0,10,0.5\n", encoding="utf-8")
    line = [a.format(history=history, out=tmp_path / "out.ndjson") for a in args]
    result = CliRunner().invoke(cli, ["--config", str(config), *line])
    assert isinstance(result.exception, SettingsError), (result.output, result.exception)
    assert "topics.partitions" in str(result.exception)
    assert f"in {config}" in str(result.exception)


def test_the_environment_names_the_file_as_well(tmp_path: Path) -> None:
    config = tmp_path / "anchorwatch.toml"
    config.write_text("[alerting]\nslack_rate_per_s = 0\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["alerting", "serve"], env={"ANCHORWATCH_CONFIG": str(config)})
    assert isinstance(result.exception, SettingsError)
    assert "alerting.slack_rate_per_s (ANCHORWATCH_ALERTING__SLACK_RATE_PER_S" in str(
        result.exception
    )
    assert f"in {config}" in str(result.exception)
