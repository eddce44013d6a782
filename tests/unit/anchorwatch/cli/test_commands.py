from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from anchorwatch.cli import cli
from anchorwatch.contracts import ContractError, decode_snapshot


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out += _commands(command, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p) or "anchorwatch")
def test_every_command_has_help_describing_every_option(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert command.help, f"{path} has no description"
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help", "version"):
            assert param.help, f"{path} option {param.opts} has no help"


def test_generate_writes_deterministic_ndjson_with_labels(tmp_path: Path) -> None:
    out = tmp_path / "traffic.ndjson"
    args = [
        "generate",
        "--seed",
        "3",
        "--minutes",
        "8",
        "--doc-types",
        "3",
        "--malformed-rate",
        "0.05",
        "--incidents",
        "1",
        "--out",
        str(out),
    ]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    data = out.read_bytes()
    assert CliRunner().invoke(cli, args).exit_code == 0
    assert out.read_bytes() == data  # same seed, same bytes
    lines = data.splitlines()
    bad = 0
    for line in lines:
        try:
            decode_snapshot(line)
        except ContractError:
            bad += 1
    assert 0 < bad < len(lines) * 0.2
    labels = (tmp_path / "traffic.ndjson.labels.ndjson").read_bytes().splitlines()
    assert len(labels) == 1
    assert orjson.loads(labels[0])["kind"] in ("jump", "ramp")


def test_generate_labels_scoped_incidents_with_their_model_or_kind(tmp_path: Path) -> None:
    out = tmp_path / "traffic.ndjson"
    args = ["generate", "--seed", "4", "--minutes", "30", "--doc-types", "6"]
    result = CliRunner().invoke(cli, [*args, "--scoped-incidents", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    labels = [
        orjson.loads(line)
        for line in out.with_name(out.name + ".labels.ndjson").read_bytes().splitlines()
    ]
    assert len(labels) == 4
    for label in labels:
        assert label["kind"] in ("model_jump", "kind_jump")
        scope = label["model"] if label["kind"] == "model_jump" else label["anchor_kind"]
        assert scope


def test_generate_kong_format(tmp_path: Path) -> None:
    out = tmp_path / "kong.ndjson"
    result = CliRunner().invoke(
        cli,
        ["generate", "--minutes", "2", "--doc-types", "2", "--format", "kong", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    entry = orjson.loads(out.read_bytes().splitlines()[0])
    assert "x-anthropic-doc-type" in entry["request"]["headers"]


def test_bad_option_value_is_named() -> None:
    result = CliRunner().invoke(cli, ["generate", "--malformed-rate", "1.5"])
    assert result.exit_code != 0
    assert "malformed_rate" in result.output


def test_schemas_are_current() -> None:
    result = CliRunner().invoke(cli, ["contracts", "schemas", "--check"])
    assert result.exit_code == 0, result.output
