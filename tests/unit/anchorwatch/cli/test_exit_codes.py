"""Exit codes as a script sees them: the installed `anchorwatch` command, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _anchorwatch(*args: str) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("anchorwatch")
    return subprocess.run(
        [str(command), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_stack_status_exits_1_when_nothing_runs(tmp_path: Path) -> None:
    done = _anchorwatch("stack", "status", "--state-dir", str(tmp_path / "stack"))
    assert "stopped" in done.stdout
    assert done.returncode == 1


def test_a_usage_error_exits_2_and_help_exits_0() -> None:
    assert _anchorwatch("stack", "status", "--no-such-option").returncode == 2
    assert _anchorwatch("stack", "status", "--help").returncode == 0
