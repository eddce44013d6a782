"""docker-compose.yml through compose-go, the library `docker compose` loads files with:
its own validator (`compose-go/v2/cmd`: "Validates a compose file conforms to the Compose
Specification": parsing, interpolation of the defaults, the schema, normalisation). No
Docker engine is needed. The validator is built once with Go from the Go module proxy and cached:
the download makes these integration tests (unit tests use no network, tests/unit/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import deploy_checks as dc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPOSE_GO_VERSION = "v2.16.2"  # the schema in deploy/schemas/ comes from this release


@pytest.fixture(scope="module")
def validator() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    binary = cache / "anchorwatch" / "tools" / f"compose-spec-{COMPOSE_GO_VERSION}"
    if binary.is_file():
        return binary
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).is_file()), None
    )
    if go is None:
        pytest.fail(
            "Go is not installed; it builds compose-go's validator "
            "(Debian: apt-get install golang-go, or https://go.dev/dl)"
        )
    gobin = binary.parent / f"build-{os.getpid()}"
    env = {**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-modcacherw", "CGO_ENABLED": "0"}
    result = subprocess.run(
        [go, "install", f"github.com/compose-spec/compose-go/v2/cmd@{COMPOSE_GO_VERSION}"],
        capture_output=True, text=True, env=env, check=False, timeout=540,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (gobin / "cmd").rename(binary)
    shutil.rmtree(gobin, ignore_errors=True)
    return binary


def validate(binary: Path, compose_file: Path) -> subprocess.CompletedProcess[str]:
    # Without the developer's variables: the defaults are what is checked.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    return subprocess.run(
        [str(binary), "-format", "json", str(compose_file)],
        capture_output=True, text=True, cwd=compose_file.parent, check=False, env=env,
    )  # fmt: skip


def test_compose_go_accepts_the_compose_file(validator: Path) -> None:
    result = validate(validator, dc.COMPOSE_FILE)
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    assert set(model["services"]) == set(dc.raw_compose()["services"])
    # compose-go's interpolation agrees with the one the other tests use.
    ours = dc.compose()
    for name, service in model["services"].items():
        assert service.get("image") == ours["services"][name].get("image")
        theirs = {
            k: None if v is None else str(v) for k, v in service.get("environment", {}).items()
        }
        assert theirs == dc.environment(ours["services"][name]), name


def test_compose_go_rejects_a_broken_file(validator: Path, tmp_path: Path) -> None:
    text = dc.COMPOSE_FILE.read_text(encoding="utf-8")
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace("condition: service_healthy", "condition: service_up", 1))
    result = validate(validator, broken)
    assert result.returncode != 0
    assert "condition value must be one of" in result.stderr
