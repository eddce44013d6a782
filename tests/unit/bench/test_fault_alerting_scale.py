"""The fault campaign's kinds of instances sharing the work (alerting-scale, and the split
takeover and pause): selectable and planned like the others, run by two instances that
share the work (the settings the work split accepts), a join counted as done only once the
joiner holds a partition and none is left unheld, a takeover only once no partition of the
struck instance is held by it, the joiner's first post found in its log, and the times
summed up over the trials that ran them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.demo.journey_alerting_pair import JOINER, SPLIT_OFF
from bench.fault_alerting import (
    PAIR_FAULTS,
    SPLIT_FAULTS,
    TIMINGS,
    first_slack_send,
    rebalanced,
    scale_line,
    summary_lines,
    taken_over,
)
from bench.fault_plan import FAULTS, count_notifications, plan_trials

STATE = {"state_url": "postgresql://anchorwatch@127.0.0.1:5432/anchorwatch", "lease_s": 5}


def test_the_split_kinds_are_selectable_and_planned_with_two_instances_sharing_the_work() -> None:
    split = {"alerting-scale", "alerting-split-takeover", "alerting-split-pause"}
    assert set(SPLIT_FAULTS) == split
    assert split <= set(FAULTS)
    assert set(SPLIT_FAULTS) <= set(PAIR_FAULTS)  # run with two instances, not one
    specs = plan_trials(6, seed=21, only=("alerting-scale",))
    assert [s.fault for s in specs] == ["alerting-scale"] * 6
    assert all(0.1 <= s.at <= 0.55 for s in specs)
    assert specs[0].describe().startswith("alerting-scale at ")
    pauses = plan_trials(4, seed=21, only=("alerting-split-pause",))
    # Past the 5 s leases and the 6 s group session, and said in the trial's line.
    assert all(s.duration_s >= 12 for s in pauses)
    assert all(f"({s.duration_s:.0f}s)" in s.describe() for s in pauses)
    # Every kind is covered by as many trials as there are kinds.
    assert {s.fault for s in plan_trials(len(FAULTS), seed=21)} == set(FAULTS)


def test_the_split_settings_are_what_the_work_split_accepts() -> None:
    sections = {
        section: {**fields, **(STATE if section == "alerting" else {})}
        for section, fields in SPLIT_OFF.items()
    }
    settings = AlertingSettings.load(None, **sections)
    assert settings.alerting.work_split
    assert not settings.grouping.enabled
    assert not settings.watchdog.enabled
    assert not settings.alerting.refit


@pytest.mark.parametrize(
    ("owners", "done"),
    [
        ({"alerting": [0, 1], "alerting-2": [2, 3]}, False),  # the joiner holds nothing yet
        ({"alerting": [0, 1], "alerting-2": [3], JOINER: [2]}, True),
        ({"alerting": [0], "alerting-2": [3], JOINER: [2]}, False),  # partition 1 unheld
        ({"alerting": [0, 1], "alerting-2": [2, 3], JOINER: [2]}, False),  # 2 held twice
        ({"alerting": [0, 1], "?host:1:ab": [3], JOINER: [2]}, False),  # a stranger holds 3
    ],
)
def test_a_join_is_done_once_the_joiner_holds_a_partition_and_none_is_left(
    owners: dict[str, list[int]], done: bool
) -> None:
    assert rebalanced(owners, 4) is done


@pytest.mark.parametrize(
    ("owners", "done"),
    [
        # The struck one's leases, its pid stale, not yet ended.
        ({"alerting": [0, 1], "?vm:40:aa": [2, 3]}, False),
        ({"alerting": [0, 1, 2], "?vm:40:aa": [3]}, False),
        ({"alerting": [0, 1, 2, 3]}, True),
        ({"alerting": [0, 1, 3], "alerting-2": [2]}, True),  # restarted (a new pid), took one
        ({"alerting": [0, 1]}, False),  # 2 and 3 held by nobody yet
    ],
)
def test_a_takeover_is_done_once_the_others_hold_every_partition_of_the_struck_one(
    owners: dict[str, list[int]], done: bool
) -> None:
    assert taken_over(owners, [2, 3]) is done


def test_the_joiners_first_slack_post_is_read_from_its_log(tmp_path: Path) -> None:
    def line(at: float, integration: str, outcome: str) -> str:
        ts = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        return json.dumps(
            {"ts": ts, "logger": "anchorwatch.alerting.outbox", "msg": "notification",
             "integration": integration, "outcome": outcome},
            separators=(",", ":"),
        )  # fmt: skip

    log = tmp_path / "alerting-3.log"
    assert first_slack_send(log, 0.0) is None  # not started yet
    log.write_text(
        "\n".join(
            [
                line(1000.0, "slack", "sent"),  # before the join: another run's, say
                "not json at all",
                line(1010.0, "jira", "sent"),
                line(1011.5, "slack", "failed"),
                line(1012.25, "slack", "sent"),
                line(1013.0, "slack", "sent"),
            ]
        )
        + "\n"
    )
    assert first_slack_send(log, 1005.0) == pytest.approx(1012.25)
    assert first_slack_send(log, 1014.0) is None


def test_join_times_are_summed_up_beside_the_takeover_times() -> None:
    assert scale_line([{"takeover_s": 5.0}, {}]) is None  # no scale trial ran
    timings = [
        {"ready_s": 3.0, "owned_s": 7.5, "joined_post_s": 9.0},
        {"ready_s": 2.0, "owned_s": 12.1},  # no post was due after the join
        {"ready_s": 2.5, "owned_s": 6.0, "joined_post_s": 11.0},
        {"takeover_s": 4.4, "next_post_s": 5.0},
        {"split_takeover_s": 8.0, "split_post_s": 8.5},
        {"split_takeover_s": 6.0},
    ]
    assert all(set(t) <= set(TIMINGS) for t in timings)
    assert summary_lines(timings) == [
        "alerting takeover: 1 trials, fault to an instance leading median 4.4s, max 4.4s; "
        "to the next Slack post median 5.0s, max 5.0s",
        "alerting scale: 3 trials, a third instance's start to its holding partitions median "
        "7.5s, max 12.1s; to the next Slack post median 10.0s, max 11.0s",
        "alerting split takeover: 2 trials, fault to its partitions held by the others "
        "median 7.0s, max 8.0s; to the next Slack post median 8.5s, max 8.5s",
    ]


def test_a_chart_posted_twice_is_a_duplicate_notification() -> None:
    """What alerting-split-pause showed once (seed 22, trial 5): the paused instance's
    chart upload finished after it woke, besides the one its successor had posted."""

    def thread(*kinds: str) -> list[dict[str, object]]:
        out: list[dict[str, object]] = [{"ts": "1.0", "text": "parent"}]
        for i, kind in enumerate(kinds):
            reply: dict[str, object] = {"ts": f"2.{i}", "thread_ts": "1.0"}
            if kind == "chart":
                reply["subtype"] = "file_share"
            else:
                reply["text"] = f"{kind} {i}"  # update texts differ, as their figures do
            out.append(reply)
        return out

    issues = [{"key": "OPS-1", "comments": ["Update, 1", "Resolved"]}]
    alerts = {"i1": {"e1": "warning"}}
    clean = count_notifications(
        [("i1", "1.0", "OPS-1")], thread("Update", "chart", "Resolved:"), issues, alerts
    )
    assert (clean.duplicates, clean.problems) == (0, [])
    doubled = count_notifications(
        [("i1", "1.0", "OPS-1")],
        thread("Update", "chart", "Update", "chart", "chart", "Resolved:"),
        issues,
        alerts,
    )
    assert doubled.duplicates == 1
    assert any("1 repeated Slack replies" in p for p in doubled.problems)
