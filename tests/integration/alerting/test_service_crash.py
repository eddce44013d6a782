"""`anchorwatch alerting serve` as a real process: killed with SIGKILL at chosen points and at
random times while verdicts keep arriving, restarted, and in the end every incident has
exactly one Slack thread with its replies in order, one Jira ticket with its comments in
order, and its drift events (deduplicated by id, as consumers do). Then 1,000 doc types
drifting at once: bounded memory, rate limits kept, everything delivered once."""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import Store
from anchorwatch.jobs.settings import JobSettings
from tests.support.alerting import (
    POLICY,
    SLACK_TOKEN,
    LocalSlackWithHistory,
    lifecycle,
    parents_by_label,
    slack_threads,
    verdict,
)
from tests.support.alerting_kafka import (
    ServiceProcess,
    delivered_everything,
    drift_events,
    produce,
    ready,
    service_config,
    service_env,
)
from tests.support.rendering import assert_slack_safe
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Each run crashes at the first of these it reaches (the test hook), in this order.
CHOSEN = [
    "batch_before_commit@2",
    "send_after:slack@1",
    "batch_after_commit@1",
    "send_after:jira@1",
    "send_before:slack@2",
    "send_after:slack@3",
    "send_after:jira@3",
    "send_after:events@1",
]
RANDOM_KILLS = 6


def _window_times(texts: list[str]) -> list[str]:
    """The window start (HH:MM) an update reply or comment names."""
    return [t.split(" UTC")[0].rsplit(" ", 1)[-1].split("–")[0] for t in texts]


def test_kill_9_at_chosen_and_random_points_delivers_exactly_once(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    seed = int(time.time())
    rng = random.Random(seed)
    state = tmp_path / "state"
    config = service_config(job_settings, state, slack, jira, batch_max=4)
    config["policy"] = POLICY  # the lifecycle escalates on its first critical window
    env = service_env(config)
    docs = [f"crash-{i}" for i in range(6)] + ['<!here> "hostile" \\ AND']
    # As the drift job writes them: window by window, every type's verdict of a window.
    verdicts = sorted(
        (v for i, d in enumerate(docs) for v in lifecycle(d, first_minute=i % 3)),
        key=lambda v: v.window.window_start_ms,
    )
    rounds = len(CHOSEN) + RANDOM_KILLS
    per_round = len(verdicts) // rounds + 1
    produced = 0
    log = tmp_path / "service.log"
    crashed = 0
    for round_ in range(rounds):
        # The verdicts keep arriving while the service crashes and restarts.
        produced += produce(job_settings, verdicts[round_ * per_round : (round_ + 1) * per_round])
        if round_ < len(CHOSEN):
            process = ServiceProcess(env, log, crash_at=CHOSEN[round_])
            code = process.wait(25)
            if code is None:  # that point was not reached this time
                process.kill9()
            else:
                assert code == -9, f"seed {seed}: exited {code} at {CHOSEN[round_]}"
                crashed += 1
        else:
            process = ServiceProcess(env, log)
            time.sleep(rng.uniform(1.0, 4.0))
            process.kill9()
    assert produced == len(verdicts)
    assert crashed >= 5, f"seed {seed}: only {crashed} chosen crash points were reached"
    final = ServiceProcess(env, log)
    try:
        wait_until(lambda: ready(config), 30, "the last run to be ready")
        wait_until(lambda: delivered_everything(state, produced), 90, "the last run to finish")
    finally:
        assert final.stop() == 0

    incidents = list_incidents(state, open_only=False, limit=100)
    assert {i.row.doc_type for i in incidents} == set(docs), f"seed {seed}"
    parents = parents_by_label(slack.messages)
    threads = slack_threads([m for m in slack.messages if m.get("subtype") is None])
    events = drift_events(job_settings)
    for item in incidents:
        label = incident_label(item.row.incident_id)
        assert parents[label] == 1, f"seed {seed}: {item.row.doc_type} has {parents[label]}"
        replies = [r["text"] for r in threads[item.refs.slack_ts or ""]]
        assert [r.split(" ")[0] for r in replies] == ["Update", "Update", "Resolved:"], (
            f"seed {seed}: {item.row.doc_type}: {replies}"
        )
        times = _window_times(replies[:2])
        assert times == sorted(times)
        (ticket,) = [i for i in jira.issues.values() if label in i["fields"]["labels"]]
        comments = [c["body"] for c in ticket["comments"]]
        assert [c.split(" ")[0] for c in comments] == ["Update,", "Update,", "Resolved"], (
            f"seed {seed}: {item.row.doc_type}: {comments}"
        )
        assert ticket["fields"]["status"] == "Done"
        mine = {e.event_id: e for e in events if e.incident_id == item.row.incident_id}
        assert [e.event_type for e in mine.values()] == [
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_RESOLVED",
        ]
    assert len(jira.issues) == len(docs)
    # The crashes after Slack or Jira accepted were found there, not sent again.
    store = Store(state, create=False)
    try:
        outcomes = Counter(r["outcome"] for r in store.outbox_rows())
    finally:
        store.close()
    assert outcomes["reconciled"] >= 2, f"seed {seed}: {outcomes}"
    for m in slack.messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"]})


def test_a_thousand_doc_types_drifting_at_once(
    job_settings: JobSettings, tmp_path: Path, jira: LocalJira
) -> None:
    from anchorwatch.alerting.fakes.slack import LocalSlack

    types = [f"type-{i:04d}" for i in range(1000)]
    means = [0.5, 0.87, 0.88, 0.5, 0.5, 0.5]  # opens on the third window, resolves on the sixth
    verdicts = [verdict(d, m, mean) for m, mean in enumerate(means) for d in types]
    state = tmp_path / "state"
    rate = 100.0
    with LocalSlack(token=SLACK_TOKEN) as slack:
        config = service_config(
            job_settings,
            state,
            slack,
            jira,
            update_interval_s=0,
            slack_rate_per_s=rate,
            jira_rate_per_s=rate,
            rate_burst=5,
        )
        produced = produce(job_settings, verdicts)
        started = time.monotonic()
        service = ServiceProcess(service_env(config), tmp_path / "service.log")
        peak_rss = 0
        try:
            proc = psutil.Process(service.pid)
            wait_until(lambda: ready(config), 30, "the service to be ready")

            def done() -> bool:
                nonlocal peak_rss
                peak_rss = max(peak_rss, proc.memory_info().rss)
                return delivered_everything(state, produced)

            wait_until(done, 170, "1,000 incidents opened and resolved everywhere")
        finally:
            assert service.stop() == 0
        took = time.monotonic() - started
        messages = list(slack.messages)
        posts = [r["at"] for r in slack.requests if r["method"] == "chat.postMessage"]

    print(f"\n1,000 doc types: {took:.1f} s, peak RSS {peak_rss / 2**20:.0f} MiB")
    # Measured about 90 MiB (Python, librdkafka, slack_sdk, jira, the state's page cache).
    assert peak_rss < 200 * 2**20
    parents = parents_by_label(messages)
    assert len(parents) == 1000
    assert set(parents.values()) == {1}
    threads = slack_threads(messages)
    assert len(threads) == 1000
    assert all([r["text"].split(" ")[0] for r in t] == ["Resolved:"] for t in threads.values())
    assert len(jira.issues) == 1000
    assert {i["fields"]["status"] for i in jira.issues.values()} == {"Done"}
    events = drift_events(job_settings)
    kinds = Counter(e.event_type for e in {e.event_id: e for e in events}.values())
    assert kinds == {"ANCHOR_DRIFT_ALERT": 1000, "ANCHOR_DRIFT_RESOLVED": 1000}
    # Slack's rate kept: in any one second at most the rate plus the burst.
    per_second: dict[int, int] = defaultdict(int)
    start = min(posts)
    for at in posts:
        per_second[int((at - start) * 10)] += 1  # tenths of a second
    windows = [sum(per_second.get(t + k, 0) for k in range(10)) for t in range(max(per_second))]
    assert max(windows) <= rate + 5


#: Kills between an update's reply and its chart, during a chart's upload, and inside the
#: SQLite commits (a batch written, not committed; a delivery's done, not committed), in
#: this order, one process each; the local Slack also loses the answer to one update reply
#: and to one chart upload.
CHART_AND_COMMIT_POINTS = [
    "batch_in_commit@1",
    "send_after:slack@2",
    "batch_in_commit@2",
    "done_in_commit:slack@2",
    "send_after:slack@3",
    "send_before:slack@2",
    "done_in_commit:jira@2",
    "send_after:slack@2",
    "done_in_commit:slack@1",
    "batch_in_commit@1",
]


def test_kill_9_between_replies_and_charts_and_inside_commits_delivers_each_once(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    state = tmp_path / "state"
    config = service_config(job_settings, state, slack, jira, batch_max=3)
    config["slack"]["charts"] = True
    config["policy"] = POLICY
    env = service_env(config)
    faults: list[dict[str, Any]] = [
        {"method": "chat.postMessage", "disconnect": True, "after": True, "skip": 3},
        {"method": "files.completeUploadExternal", "disconnect": True, "after": True},
    ]
    for fault in faults:
        requests.post(f"{slack.url}/_local/faults", json=fault, timeout=5).raise_for_status()
    docs = ["chart-a", "chart-b", "chart-c"]
    verdicts = sorted(
        (v for i, d in enumerate(docs) for v in lifecycle(d, first_minute=i)),
        key=lambda v: v.window.window_start_ms,
    )
    rounds = len(CHART_AND_COMMIT_POINTS)
    per_round = len(verdicts) // rounds + 1
    log = tmp_path / "service.log"
    produced = crashed = 0
    for round_, point in enumerate(CHART_AND_COMMIT_POINTS):
        produced += produce(job_settings, verdicts[round_ * per_round : (round_ + 1) * per_round])
        process = ServiceProcess(env, log, crash_at=point)
        code = process.wait(20)
        if code is None:  # that point was not reached this time
            process.kill9()
        else:
            assert code == -9, f"exited {code} at {point}"
            crashed += 1
    assert produced == len(verdicts)
    print(f"\n{crashed} of {rounds} kill points reached")
    assert crashed >= 6, f"only {crashed} of the points were reached"
    final = ServiceProcess(env, log)
    try:
        wait_until(lambda: ready(config), 30, "the last run to be ready")
        wait_until(lambda: delivered_everything(state, produced), 90, "the last run to finish")
    finally:
        assert final.stop() == 0

    incidents = list_incidents(state, open_only=False, limit=100)
    assert {i.row.doc_type for i in incidents} == set(docs)
    parents = parents_by_label(slack.messages)
    threads = slack_threads(slack.messages)
    for item in incidents:
        label = incident_label(item.row.incident_id)
        assert parents[label] == 1
        thread = threads[item.refs.slack_ts or ""]
        shape = ["chart" if m.get("files") else m["text"].split(" ")[0] for m in thread]
        # Each update's chart once, right after its reply.
        assert shape == ["Update", "chart", "Update", "chart", "Resolved:"], (
            f"{item.row.doc_type}: {shape}"
        )
        names = [slack.files[f]["name"] for m in thread for f in m.get("files", [])]
        assert len(set(names)) == 2
        (ticket,) = [i for i in jira.issues.values() if label in i["fields"]["labels"]]
        comments = [c["body"].split(" ")[0] for c in ticket["comments"]]
        assert comments == ["Update,", "Update,", "Resolved"], f"{item.row.doc_type}: {comments}"
    store = Store(state, create=False)
    try:
        rows = store.outbox_rows()
    finally:
        store.close()
    charts = Counter(r["outcome"] for r in rows if r["action"] == "chart")
    assert charts["reconciled"] >= 1, charts  # the upload whose answer was lost, found
    assert sum(charts.values()) == 2 * len(docs)
    assert requests.get(f"{slack.url}/_local/faults", timeout=5).json()["faults"] == []
