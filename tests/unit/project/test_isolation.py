"""The suite's isolation from the shell it runs in (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_settings_exported_in_the_shell_do_not_reach_a_test(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import os\n"
        "from anchorwatch.alerting.settings import AlertingSettings\n"
        "def test_probe():\n"
        "    assert 'ANCHORWATCH_JIRA__URL' not in os.environ\n"
        "    assert 'ANCHORWATCH_CONFIG' not in os.environ\n"
        "    assert os.environ['ANCHORWATCH_TEST_STATE_DIR'] == 'kept'\n"
        "    assert not AlertingSettings.load().jira.enabled\n"
    )
    env = {
        **os.environ,
        "ANCHORWATCH_JIRA__URL": "https://jira.example.com",
        "ANCHORWATCH_JIRA__ENABLED": "true",
        "ANCHORWATCH_CONFIG": str(tmp_path / "missing.toml"),
        "ANCHORWATCH_TEST_STATE_DIR": "kept",
    }
    done = subprocess.run(
        # The probe lives outside tests/: the suite's conftest is loaded as a plugin.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), str(probe)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
