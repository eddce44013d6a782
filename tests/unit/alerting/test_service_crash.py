"""The alerting service crashing at every step that matters, without Kafka: the engine and
senders of tests/support/alerting_harness.py driven by hand on a manual clock; a "crash"
drops every object at a chosen point (the hook raises instead of killing the process) and
builds the service anew from its state file. Nothing decided is lost, nothing sent twice
(where Slack's history lets the service check), reconciliation before any retry."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.crash import CrashPoints
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.notify import ManualClock
from tests.support.alerting import (
    SLACK_TOKEN,
    LocalSlackWithHistory,
    lifecycle,
    parents_by_label,
    slack_threads,
    verdict,
)
from tests.support.alerting_harness import (
    Crash,
    Harness,
    assert_one_clean_lifecycle,
    settings_for,
)

# --------------------------------------------------------------------------- crashes


#: Slack's sends, in order: 1 parent, 2 escalation reply, 3 its chart, 4 progress reply,
#: 5 its chart, 6 resolution.
CRASHES = [
    "batch_before_commit@1",
    "batch_before_commit@2",
    "batch_in_commit@2",  # the escalation's batch written, its COMMIT not reached
    "send_before:slack@1",
    "send_after:slack@1",  # parent posted, not recorded
    "send_after:slack@2",  # escalation reply posted, not recorded; its chart not uploaded
    "send_before:slack@3",  # the chart's entry marked attempting, nothing uploaded
    "send_after:slack@3",  # chart uploaded, not recorded
    "send_after:slack@4",  # progress reply posted, its chart not uploaded
    "send_after:slack@6",  # resolution posted, not recorded
    "send_before:jira@2",
    "send_after:jira@1",  # ticket created, not recorded
    "send_after:jira@2",  # comment written, not recorded
    "send_after:jira@4",  # resolved, not recorded
    "send_after:events@1",
    "done_in_commit:slack@1",  # the parent posted, its thread not stored
    "done_in_commit:jira@2",  # the comment written, its done not committed
]


@pytest.mark.parametrize("crash", CRASHES)
def test_a_crash_at_any_step_neither_loses_nor_repeats(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    crash: str,
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock, crash=crash)
    h.publish(lifecycle("medical_report")[:5])
    h.run()
    h.publish(lifecycle("medical_report")[5:])
    h.run()
    assert h.crashes == 1
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    # Opening a ticket needs no reconciling: it searches by the incident's label first.
    point, integration = crash.split("@")[0].partition(":")[::2]
    accepted = point in ("send_after", "done_in_commit") and integration in ("slack", "jira")
    if accepted and crash != "send_after:jira@1":
        assert sum(r["outcome"] == "reconciled" for r in h.store.outbox_rows()) == 1


def test_crashing_again_and_again_still_delivers_once(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    a, b = lifecycle("medical_report"), lifecycle("invoice", first_minute=1)
    points = ["send_after:slack", "send_after:jira", "send_before:slack", "batch_before_commit"]
    for i in range(len(a)):
        h.publish([a[i], b[i]])  # the verdicts trickle in while the service keeps crashing
        h.restart()
        h._start(points[i % 4])
        try:
            h.consume()
            h.drain()
        except Crash:
            pass
        # Slack's clock is the real one: the search for a message reaches back two minutes
        # from the first attempt by our clock, which must not run ahead by more.
        clock.now += 5
    h.restart()
    h.run()
    assert h.crashes >= 6
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    assert_one_clean_lifecycle(h, slack, jira, "invoice", first_minute=1)


def test_without_channel_history_a_crash_after_posting_may_repeat_that_message(
    tmp_path: Path, jira: LocalJira, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A bot without the channels:history scope cannot read back: the one window left open."""
    with LocalSlack(token=SLACK_TOKEN) as slack:
        for method in ("conversations.history", "conversations.replies"):
            requests.post(
                f"{slack.url}/_local/faults",
                json={"method": method, "status": 200, "error": "missing_scope", "times": -1},
                timeout=5,
            ).raise_for_status()
        h = Harness(settings_for(tmp_path, slack, None), clock, crash="send_after:slack@1")
        h.publish(lifecycle("invoice")[:3])
        with caplog.at_level(logging.WARNING):
            h.run()
        assert sum(parents_by_label(slack.messages).values()) == 2
        assert "cannot tell whether a message was posted" in caplog.text


def test_an_ambiguous_failure_is_reconciled_before_it_is_retried(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    # The servers act, then drop the connection: the client cannot know it worked.
    for server, method in ((slack, "chat.postMessage"), (jira, "comment"), (jira, "transition")):
        requests.post(
            f"{server.url}/_local/faults",
            json={"method": method, "disconnect": True, "after": True, "times": 2},
            timeout=5,
        ).raise_for_status()
    # Parent and escalation reply; escalation and progress comments; the resolving
    # transition (the second transition fault stays unused).
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("medical_report"))
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="slack", outcome="retry")
        == 2
    )
    assert sum(r["outcome"] == "reconciled" for r in h.store.outbox_rows()) == 5


@pytest.mark.parametrize(
    ("method", "skip"),
    [
        ("chat.postMessage", 1),  # the escalation reply posted, its answer lost
        ("files.completeUploadExternal", 0),  # the chart shared, the answer lost
        ("files.getUploadURLExternal", 0),  # nothing uploaded, the answer lost
    ],
)
def test_a_lost_response_between_a_reply_and_its_chart_loses_no_chart(
    tmp_path: Path,
    slack: LocalSlackWithHistory,
    jira: LocalJira,
    clock: ManualClock,
    method: str,
    skip: int,
) -> None:
    """Each update's chart is its own outbox entry: found again in the thread by its file
    name when its answer was lost, uploaded when it never landed, never uploaded twice."""
    requests.post(
        f"{slack.url}/_local/faults",
        json={"method": method, "disconnect": True, "after": True, "skip": skip},
        timeout=5,
    ).raise_for_status()
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("medical_report"))
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")  # two charts, once each
    assert requests.get(f"{slack.url}/_local/faults", timeout=5).json()["faults"] == []
    charts = [r for r in h.store.outbox_rows() if r["action"] == "chart"]
    found = [r["outcome"] for r in charts]
    assert found == (["reconciled", "sent"] if method.startswith("files.c") else ["sent"] * 2)


def test_a_superseded_progress_update_takes_its_chart_with_it(
    tmp_path: Path, slack: LocalSlackWithHistory, clock: ManualClock
) -> None:
    settings = settings_for(tmp_path, slack, None, update_interval_s=60)
    h = Harness(settings, clock)
    h.publish(lifecycle("invoice")[:4])  # opened, escalated
    h.run()
    h.publish([verdict("invoice", m, 0.95) for m in range(4, 8)])  # four progress updates
    h.consume()
    h.run()
    rows = [r for r in h.store.outbox_rows() if r["integration"] == "slack"]
    progress = [(r["action"], r["outcome"]) for r in rows if r["kind"] in ("progress", "chart")]
    # The escalation's chart, then three progress updates skipped with their charts and
    # the last one posted with its chart.
    assert progress == [
        ("chart", "sent"),
        *[("update", "superseded"), ("chart", "superseded")] * 3,
        ("update", "sent"),
        ("chart", "sent"),
    ]
    thread = slack_threads(slack.messages)
    (replies,) = thread.values()
    assert ["chart" if m.get("files") else m["text"][:6] for m in replies] == [
        "Update",
        "chart",
        "Update",
        "chart",
    ]


def test_the_drainer_alone_retries_a_failed_call(
    tmp_path: Path, slack: LocalSlackWithHistory, clock: ManualClock
) -> None:
    """One attempt per call (no retry inside it, no sleep on the sender thread); the entry
    is rescheduled and the drainer tries again after its backoff."""
    requests.post(
        f"{slack.url}/_local/faults",
        json={"method": "chat.postMessage", "status": 503, "times": 1},
        timeout=5,
    ).raise_for_status()
    h = Harness(settings_for(tmp_path, slack, None), clock)
    h.publish(lifecycle("invoice")[:3])
    h.consume()
    started = clock.now
    h.drain()
    assert clock.now == started  # nothing slept
    assert [r["status"] for r in slack.requests if r["method"] == "chat.postMessage"] == [503]
    (row,) = [r for r in h.store.outbox_rows() if r["integration"] == "slack"]
    assert (row["status"], row["next_attempt_ms"] > clock.ms()) == ("attempting", True)
    h.run()
    assert [r["status"] for r in slack.requests if r["method"] == "chat.postMessage"] == [
        503,
        200,
    ]
    assert sum(parents_by_label(slack.messages).values()) == 1
    assert (
        h.value("anchorwatch_alerting_notifications_total", integration="slack", outcome="retry")
        == 1
    )


def test_a_failed_parent_edit_is_retried_without_a_second_reply(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    """The resolution's reply lands, its parent edit fails: the outbox retries the entry,
    whose reconciliation finds the reply and edits the parent, so the parent ends resolved."""
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    h.publish(lifecycle("medical_report")[:6])
    h.run()
    requests.post(
        f"{slack.url}/_local/faults",
        json={"method": "chat.update", "status": 503, "times": 1},
        timeout=5,
    ).raise_for_status()
    h.publish(lifecycle("medical_report")[6:])
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "medical_report")
    assert [r["status"] for r in slack.requests if r["method"] == "chat.update"][-2:] == [503, 200]
    slack_rows = [r for r in h.store.outbox_rows() if r["integration"] == "slack"]
    assert [r["outcome"] for r in slack_rows][-1] == "reconciled"


def test_crash_points_parse_and_fire_on_the_nth_hit() -> None:
    fired: list[int] = []
    hook = CrashPoints("send_after:jira@2, batch_before_commit", action=lambda: fired.append(1))
    hook("send_after", "slack")
    hook("send_after", "jira")
    assert fired == []
    hook("send_after", "jira")
    assert fired == [1]
    hook("batch_before_commit")
    assert fired == [1, 1]
    with pytest.raises(ValueError, match="unknown point"):
        CrashPoints("somewhere")
