"""`anchorwatch ingest`: help texts and failures the operator can act on (no broker here;
the replay against a real broker is in tests/integration/connectors/test_ingest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from anchorwatch.cli.ingest import ingest
from anchorwatch.connectors.publisher import DeliveryError
from anchorwatch.errors import AnchorwatchError
from anchorwatch.stack.processes import free_port


@pytest.fixture(autouse=True)
def unreachable_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("ANCHORWATCH_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")


@pytest.mark.parametrize("name", ["serve", "replay"])
def test_every_option_is_described(name: str) -> None:
    command = ingest.commands[name]
    result = CliRunner().invoke(ingest, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert command.help
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"


def test_replay_fails_loudly_when_kafka_does_not_acknowledge(tmp_path: Path) -> None:
    events = tmp_path / "events.ndjson"
    events.write_bytes(b'{"event_id": "x"}\nnot json\n')
    result = CliRunner().invoke(ingest, ["replay", str(events), "--ack-timeout-s", "0.5"])
    assert result.exit_code != 0
    assert isinstance(result.exception, DeliveryError)
    assert "acknowledged by Kafka" in str(result.exception)


def test_serve_refuses_several_workers_on_a_random_port() -> None:
    args = ["serve", "--workers", "2", "--port", "0", "--insecure-no-auth"]
    result = CliRunner().invoke(ingest, args)
    assert isinstance(result.exception, AnchorwatchError)
    assert "several workers need a fixed port" in str(result.exception)


def test_serve_names_a_bad_setting() -> None:
    result = CliRunner().invoke(ingest, ["serve", "--max-body-bytes", "5"])
    assert isinstance(result.exception, AnchorwatchError)
    assert "ingest.max_body_bytes (ANCHORWATCH_INGEST__MAX_BODY_BYTES" in str(result.exception)
