"""A window's id set (jobs/jvm IdSet) adding a run of ids at a time, as the window operator
does, against adding them one at a time: the same "new" answers for every id (repeats within
a run and across runs, hashes sharing a slot, the all-zero hash) and the same set at the end,
in sets that grow from empty and in sets sized up front. Compiled and run against the jobs'
jar by bench/jvm/run.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN = Path(__file__).parents[3] / "bench" / "jvm" / "run.py"


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_run_at_a_time_answers_as_one_at_a_time(seed: int) -> None:
    done = subprocess.run([sys.executable, str(RUN), "idset-check", str(seed), "200000"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the same answers for 200,000 ids" in done.stdout
    assert "and the same set" in done.stdout
