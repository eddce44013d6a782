"""deploy/secrets/init-secrets.sh, the compose stack's `secrets-init`, run with `sh` on a
temporary directory: the first run generates each secret (random, readable by its owner
only) and says where it is, later runs keep them, `show`, `rotate` and `set` do what
docs/security.md says, and the ingest service accepts the generated token."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from anchorwatch.connectors.settings import IngestSettings
from tools import deploy_checks as dc


def run(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(dc.SECRETS_SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "SECRETS_ROOT": str(root)},
    )


def test_the_first_start_generates_each_secret_and_says_where(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.returncode == 0, first.stderr
    token = tmp_path / "ingest" / "ingest-token"
    password = tmp_path / "grafana" / "admin-password"
    assert "ingest-token: generated (volume ingest-secrets" in first.stdout
    assert "/run/secrets/anchorwatch/ingest-token in the ingest container" in first.stdout
    assert "grafana-admin-password: generated (volume grafana-secrets" in first.stdout
    assert "docker compose run --rm -T secrets-init show NAME" in first.stdout
    values = {}
    for path in (token, password):
        assert stat.S_IMODE(path.stat().st_mode) == 0o400, path
        values[path] = path.read_text()
        assert len(values[path]) == 64
        int(values[path], 16)  # hex digits only
        assert values[path] not in first.stdout  # said where, not what
    assert values[token] != values[password]
    if os.geteuid() == 0:  # handed to the one user that reads each
        assert (token.stat().st_uid, password.stat().st_uid) == (10001, 472)
    # The ingest service takes it as its writers' token.
    settings = IngestSettings.load(ingest={"auth_token_file": token})
    assert settings.ingest.writer_token() == values[token].encode()

    again = run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "ingest-token: kept" in again.stdout
    assert "grafana-admin-password: kept" in again.stdout
    assert {p: p.read_text() for p in values} == values


def test_show_rotate_and_set(tmp_path: Path) -> None:
    assert run(tmp_path, "show", "ingest-token").returncode == 1  # not generated yet
    run(tmp_path)
    token = tmp_path / "ingest" / "ingest-token"
    before = token.read_text()
    shown = run(tmp_path, "show", "ingest-token")
    assert (shown.returncode, shown.stdout) == (0, before + "\n")

    rotated = run(tmp_path, "rotate", "ingest-token")
    assert rotated.returncode == 0, rotated.stderr
    assert "ingest-token: replaced" in rotated.stdout
    assert token.read_text() not in (before, "")
    assert stat.S_IMODE(token.stat().st_mode) == 0o400

    given = run(tmp_path, "set", "ingest-token", stdin="token-kong-already-has\n")
    assert given.returncode == 0, given.stderr
    assert token.read_text() == "token-kong-already-has"
    assert run(tmp_path, "set", "ingest-token", stdin="\n").returncode == 2  # empty: refused
    assert token.read_text() == "token-kong-already-has"


@pytest.mark.parametrize(
    "args", [("show", "nope"), ("rotate", "nope"), ("set", "nope"), ("frobnicate",)]
)
def test_unknown_names_and_commands_are_refused(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run(tmp_path, *args, stdin="x")
    assert result.returncode == 2
    assert "ingest-token grafana-admin-password" in result.stderr
    assert not any(tmp_path.rglob("*nope*"))
