"""The fault campaign (bench/faults.py), short: one trial of the whole pipeline on a cluster
of three Kafka nodes and two TaskManagers, the leader broker killed -9 (a killed TaskManager
has its own test: tests/integration/anchorwatch/stack/test_cluster.py), counted against the
ground truth: nothing acknowledged lost, nothing doubled, every window exact, one Slack
thread and one Jira ticket per incident.

Starts a cluster of its own (the session stack has one broker). On the 2-core machine
loaded by other work two trials took over 10 minutes; one trial fits CI's budget.
The long campaign, every fault kind: `.venv/bin/python bench/faults.py --trials 14`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from anchorwatch.demo.journey_plan import INCIDENTS
from bench.fault_plan import plan_trials
from bench.faults import campaign, campaign_stack, final_line

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# Beyond the suite's 600 s: on a machine loaded by other work a trial takes 3.5-5.5 minutes.
@pytest.mark.timeout(1800)
def test_a_fault_trial_loses_doubles_and_repeats_nothing(tmp_path: Path) -> None:
    specs = plan_trials(1, seed=17, only=("broker-kill",))
    assert [s.fault for s in specs] == ["broker-kill"]
    lines: list[str] = []
    with campaign_stack(tmp_path / "stack") as stack:
        results = campaign(stack, specs, tmp_path / "runs", lines.append, CI_OPTIONS)
    log = "\n".join(lines)
    print(f"\n{log}\n{final_line(results)}")
    assert final_line(results) == (
        "faults: 1 trials, lost 0, doubled 0, wrong windows 0, duplicate notifications 0"
    ), log
    for r in results:
        assert r.problems == [], log
        assert r.acked > 10_000, log
        assert r.figures["incidents"] == r.figures["labels"] == len(INCIDENTS), log
        assert not r.figures["injected"].startswith(("injection failed", "not injected")), log


#: Shorter than the bench's trials, to fit CI's budget: two hours of history (the baselines
#: need 60 windows per type) and the live span replayed at 40x instead of 30x.
CI_OPTIONS = {"history_minutes": 120, "speed": 40.0}
