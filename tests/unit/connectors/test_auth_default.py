"""No anonymous writers by default: the ingest service does not start without a bearer token
unless told --insecure-no-auth, and then says so at every start (a warning, and a gauge).
No broker: the producer points at a closed port and is never started."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from anchorwatch.cli import cli
from anchorwatch.connectors import server
from anchorwatch.connectors.server import IngestService
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.settings import SettingsError
from anchorwatch.stack.processes import free_port

GAUGE = "anchorwatch_ingest_insecure_no_auth"
NAMED = ("ANCHORWATCH_INGEST__AUTH_TOKEN", "_AUTH_TOKEN_FILE", "--insecure-no-auth")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("ANCHORWATCH_"):
            monkeypatch.delenv(key)


def _settings(**ingest: Any) -> IngestSettings:
    return IngestSettings.load(
        kafka={"bootstrap_servers": f"127.0.0.1:{free_port()}"}, ingest={"port": 0, **ingest}
    )


def _started(settings: IngestSettings) -> float | None:
    """Start the service (HTTP only), stop it; the gauge's value meanwhile."""
    service = IngestService(settings)

    async def main() -> float | None:
        await service.listen()
        try:
            return service.registry.get_sample_value(GAUGE)
        finally:
            await service.stop()

    return asyncio.run(main())


def test_without_a_token_the_service_refuses_to_start_naming_the_settings() -> None:
    settings = _settings()
    with pytest.raises(SettingsError) as built:
        IngestService(settings)
    with pytest.raises(SettingsError) as served:
        server.serve(settings)  # refused before any worker, port or broker
    for error in (built.value, served.value):
        for name in NAMED:
            assert name in str(error)


def test_the_command_refuses_too_and_takes_the_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    served: list[IngestSettings] = []
    # Past the check, the real serve would run until signalled.
    monkeypatch.setattr(server, "_run_until_signalled", _record(served))
    result = CliRunner().invoke(cli, ["ingest", "serve", "--port", "0"])
    assert isinstance(result.exception, SettingsError), result.output
    assert all(name in str(result.exception) for name in NAMED)
    assert served == []
    token = tmp_path / "token"
    token.write_text("t0ken-from-a-file\n")
    for args, env in (
        (["--auth-token-file", str(token)], {}),
        ([], {"ANCHORWATCH_INGEST__AUTH_TOKEN": "t0ken-from-env"}),
        ([], {"ANCHORWATCH_INGEST__AUTH_TOKEN_FILE": str(token)}),
        (["--insecure-no-auth"], {}),
        ([], {"ANCHORWATCH_INGEST__INSECURE_NO_AUTH": "true"}),
    ):
        result = CliRunner().invoke(cli, ["ingest", "serve", "--port", "0", *args], env=env)
        assert result.exit_code == 0, (args, env, result.output, result.exception)
    assert [s.ingest.insecure_no_auth for s in served] == [False, False, False, True, True]


def _record(served: list[IngestSettings]) -> Any:
    async def run(settings: IngestSettings, *, reuse_port: bool) -> None:
        served.append(settings)

    return run


def test_insecure_no_auth_warns_at_every_start_and_sets_the_gauge(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="anchorwatch.connectors.server")
    for _ in range(2):
        assert _started(_settings(insecure_no_auth=True)) == 1
    warnings = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "accepting unauthenticated writers" in r.getMessage()
    ]
    assert len(warnings) == 2
    caplog.clear()
    assert _started(_settings(auth_token="s3cret-token")) == 0
    assert not [r for r in caplog.records if "unauthenticated" in r.getMessage()]


def test_the_gauge_is_exported_on_metrics() -> None:
    service = IngestService(_settings(insecure_no_auth=True))
    try:
        text = generate_latest(service.registry).decode()
    finally:
        service.producer.close(0)
    assert f"{GAUGE} 1.0" in text
