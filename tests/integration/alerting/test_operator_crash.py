"""Issue 33: exactly once on the operator paths. A held incident released when its silence
ends (crash point release_before_commit) and an acknowledgement from Slack's button applied
with its thread reply, Jira comment and PagerDuty acknowledge (ack_before_commit), each
crashed there and then at a send of what it caused, restarted, and counted: per incident,
every Slack post and reply, Jira ticket and comment and PagerDuty event once, none lost.

The crash sequences run in the harness of tests/support/alerting_harness.py (in-process, a
manual clock: the silence ends while the "process" is down, and the real senders post to
the local Slack, Jira and PagerDuty); each scenario also runs once as the fault campaign
runs it (bench/fault_operator.py): the service as a process on Kafka, the silence made over
its HTTP API, the click posted signed by the local Slack, SIGKILL at the points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pagerduty import LocalPagerDuty
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.integrations.pagerduty import dedup_key
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.render import incident_label
from anchorwatch.jobs.settings import JobSettings
from bench.fault_operator import run_operator_trial
from bench.fault_plan import OPERATOR_EXPECTED, TrialSpec
from tests.support.alerting import lifecycle
from tests.support.alerting_harness import Crash, issues, settings_for
from tests.support.alerting_operator import OperatorHarness, operator_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SILENCED, ACKED, UNTOUCHED = "silenced-type", "acked-type", "untouched-type"


def _harness(
    tmp_path: Path, slack: LocalSlack, jira: LocalJira, pagerduty: LocalPagerDuty, clock: Any
) -> OperatorHarness:
    return OperatorHarness(operator_settings(settings_for(tmp_path, slack, jira), pagerduty), clock)


def _key(h: OperatorHarness, doc_type: str) -> str:
    return dedup_key(h.incident_id(doc_type))


def _both(doc: str, part: slice) -> list[Any]:
    """``doc``'s lifecycle and the untouched type's, window by window."""
    both = lifecycle(doc)[part] + lifecycle(UNTOUCHED)[part]
    return sorted(both, key=lambda v: v.window.window_start_ms)


@pytest.mark.parametrize(
    "then",
    [
        "send_before:slack@1",
        "send_after:slack@1",
        "done_in_commit:jira@1",
        "send_after:jira@1",
        "send_after:pagerduty@1",
    ],
)
def test_a_silence_ending_during_a_restart_is_posted_once_through_crashes(
    tmp_path: Path,
    slack: LocalSlack,
    jira: LocalJira,
    pagerduty: LocalPagerDuty,
    clock: ManualClock,
    then: str,
) -> None:
    h = _harness(tmp_path, slack, jira, pagerduty, clock)
    silence = h.add_silence(SILENCED, seconds=60)
    h.publish(_both(SILENCED, slice(None, 5)))
    h.run()
    assert h.received(SILENCED, slack, jira, pagerduty) == []  # held: nobody told yet
    # Down across the silence's end: the next start finds it ended, and dies releasing.
    clock.now = silence["ends_ms"] / 1000 + 1
    h.restart_armed("release_before_commit@1")
    with pytest.raises(Crash):
        h.engine.release_held(clock.ms())
    h.restart_armed(then)  # the release committed; dies at the first such send of it
    assert h.engine.release_held(clock.ms()) == 1
    with pytest.raises(Crash):
        h.drain()
    h.restart()
    assert h.engine.release_held(clock.ms()) == 0  # released once, not again
    h.run()
    h.publish(_both(SILENCED, slice(5, None)))
    h.run()

    assert h.crashes == 2
    assert h.received(SILENCED, slack, jira, pagerduty) == list(OPERATOR_EXPECTED["silenced"])
    assert h.received(UNTOUCHED, slack, jira, pagerduty) == list(OPERATOR_EXPECTED["untouched"])
    (alert,) = [a for a in pagerduty.alerts if a["dedup_key"] == _key(h, SILENCED)]
    assert alert["statuses"] == ["triggered", "resolved"]


@pytest.mark.parametrize(
    "then",
    ["send_before:jira@1", "send_after:jira@1", "done_in_commit:jira@1", "send_after:slack@1"],
)
def test_an_acknowledgement_crashed_before_its_jira_comment_is_applied_once(
    tmp_path: Path,
    slack: LocalSlack,
    jira: LocalJira,
    pagerduty: LocalPagerDuty,
    clock: ManualClock,
    then: str,
) -> None:
    h = _harness(tmp_path, slack, jira, pagerduty, clock)
    h.publish(_both(ACKED, slice(None, 4)))  # opened and escalated: paged
    h.run()
    assert h.click_ack(slack, ACKED) == {"ok": True, "text": "acknowledged by <@U0LOCAL>"}
    h.restart_armed("ack_before_commit@1")
    with pytest.raises(Crash):
        h.engine.apply_acks(clock.ms())
    h.restart_armed(then)  # applied and committed; dies around its first such send
    assert h.engine.apply_acks(clock.ms()) == 1
    with pytest.raises(Crash):
        h.drain()
    h.restart()
    assert h.engine.apply_acks(clock.ms()) == 0
    h.run()
    h.publish(_both(ACKED, slice(4, None)))
    h.run()

    assert h.crashes == 2
    assert h.received(ACKED, slack, jira, pagerduty) == list(OPERATOR_EXPECTED["acknowledged"])
    assert h.received(UNTOUCHED, slack, jira, pagerduty) == list(OPERATOR_EXPECTED["untouched"])
    label = incident_label(h.incident_id(ACKED))
    (ticket,) = [i for i in issues(jira) if label in i["fields"]["labels"]]
    (ack,) = [c for c in ticket["comments"] if c.startswith("Acknowledged")]
    assert ack.startswith("Acknowledged by local\\-user (Slack user U0LOCAL) in Slack")
    (alert,) = [a for a in pagerduty.alerts if a["dedup_key"] == _key(h, ACKED)]
    assert alert["statuses"] == ["triggered", "acknowledged", "resolved"]


@pytest.mark.parametrize(
    "spec",
    [
        TrialSpec(0, 1, "silence-expiry", 0.0, 0.0,
                  crash_points=("release_before_commit@1", "send_after:pagerduty@1")),
        TrialSpec(1, 1, "ack-crash", 0.0, 0.0,
                  crash_points=("ack_before_commit@1", "send_after:jira@1")),
    ],
    ids=lambda s: s.fault,
)  # fmt: skip
def test_the_campaign_trial_on_the_running_service_loses_and_doubles_nothing(
    job_settings: JobSettings, tmp_path: Path, spec: TrialSpec
) -> None:
    out = run_operator_trial(job_settings, spec, tmp_path, silence_s=10)
    print(f"\n{spec.describe()}: {out.detail}; {out.count}")
    assert out.problems == []
    assert out.crashed_at == list(spec.crash_points)  # SIGKILLed at each, in turn
    assert (out.count.lost, out.count.doubled) == (0, 0)
    roles = ("silenced" if spec.fault == "silence-expiry" else "acknowledged", "untouched")
    assert out.count.expected == sum(len(OPERATOR_EXPECTED[r]) for r in roles)
    assert out.restarts == len(spec.crash_points) + (spec.fault == "silence-expiry")
