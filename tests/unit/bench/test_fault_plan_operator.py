"""The fault campaign's operator trials, their pure parts (bench/fault_plan.py): which crash
points each trial arms, and how what Slack, Jira and PagerDuty received is counted against
what people must get (lost, doubled, out of order)."""

from __future__ import annotations

from typing import Any

from bench.fault_plan import (
    FAULTS,
    OPERATOR_EXPECTED,
    OPERATOR_SCENARIOS,
    count_operator,
    notification_kinds,
    plan_trials,
)

LABEL, KEY = "aw-0123456789ab", "anchorwatch/i1-abc"


def test_every_operator_scenario_is_planned_with_its_crash_points_and_named() -> None:
    specs = [s for s in plan_trials(len(FAULTS), seed=17) if s.fault in OPERATOR_SCENARIOS]
    assert sorted(s.fault for s in specs) == ["ack-crash", "silence-expiry"]
    for spec in plan_trials(40, seed=5, only=tuple(OPERATOR_SCENARIOS)):
        first, then = spec.crash_points
        point, _, integration = then.partition("@")[0].partition(":")
        assert point in ("send_before", "send_after", "done_in_commit")
        assert then.endswith("@1")
        if spec.fault == "ack-crash":
            assert (first, integration) == ("ack_before_commit@1", "jira")
            assert "a crash between an acknowledgement and its Jira comment" in spec.describe()
        else:
            assert first == "release_before_commit@1"
            assert integration in ("slack", "jira", "pagerduty")
            assert "a silence expiring during a restart" in spec.describe()


def test_the_journey_never_arms_the_operator_points() -> None:
    armed = {s.crash_point for s in plan_trials(200, seed=3, only=("alerting-kill",))}
    assert not any(p and p.startswith(("release_", "ack_")) for p in armed)


def _slack(label: str, replies: list[str]) -> list[dict[str, Any]]:
    meta = {"event_payload": {"incident_label": label}}
    parent = {"ts": "1.1", "thread_ts": None, "text": "[CRITICAL]", "params": {"metadata": meta}}
    return [parent] + [{"ts": f"1.{i + 2}", "thread_ts": "1.1", "text": t} for i, t in
                       enumerate(replies)]  # fmt: skip


def _acknowledged(replies: list[str], comments: list[str], alerts: list[list[str]]) -> list[str]:
    issue = {"key": "OPS-1", "fields": {"labels": ["drift-alert", LABEL]}, "comments": comments}
    found = [{"dedup_key": KEY, "statuses": statuses} for statuses in alerts]
    other = [{"dedup_key": "anchorwatch/other", "statuses": ["triggered"]}]
    return notification_kinds(LABEL, KEY, _slack(LABEL, replies), [issue], found + other)


def test_what_people_got_once_each_counts_clean() -> None:
    got = _acknowledged(
        ["Update `t`", "Acknowledged by <@U0>", "Resolved: back"],
        ["Update, 14:03", "Acknowledged by u", "Resolved 14:09"],
        # An acknowledge sent again after a crash: PagerDuty folds it into the alert.
        [["triggered", "acknowledged", "acknowledged", "resolved"]],
    )
    assert got == list(OPERATOR_EXPECTED["acknowledged"])
    count = count_operator(
        {"acknowledged": OPERATOR_EXPECTED["acknowledged"]}, {"acknowledged": got}
    )
    assert (count.expected, count.lost, count.doubled, count.problems) == (11, 0, 0, [])


def test_a_repeated_reply_a_second_alert_and_a_missing_comment_are_counted() -> None:
    got = _acknowledged(
        ["Update `t`", "Acknowledged by <@U0>", "Acknowledged by <@U0>", "Resolved: back"],
        ["Update, 14:03", "Resolved 14:09"],
        [["triggered", "acknowledged", "resolved"], ["triggered"]],
    )
    count = count_operator(
        {"acknowledged": OPERATOR_EXPECTED["acknowledged"]}, {"acknowledged": got}
    )
    assert (count.lost, count.doubled) == (1, 2)
    (problem,) = count.problems
    assert problem.startswith("acknowledged: lost 1, doubled 2")


def test_an_incident_nobody_was_told_of_is_all_lost_and_order_matters() -> None:
    want = OPERATOR_EXPECTED["silenced"]
    count = count_operator({"silenced": want}, {})
    assert (count.lost, count.doubled) == (len(want), 0)
    swapped = [want[0], want[2], want[1], *want[3:]]
    count = count_operator({"silenced": want}, {"silenced": swapped})
    assert (count.lost, count.doubled) == (0, 0)
    assert count.problems == [f"silenced: out of order: {swapped}"]
