"""`anchorwatch alerting serve` as a real process: killed with SIGKILL at chosen points and at
random times while verdicts keep arriving, restarted, and in the end every incident has
exactly one Slack thread with its replies in order, one Jira ticket with its comments in
order, and its drift events (deduplicated by id, as consumers do). Then 1,000 doc types
drifting at once: bounded memory, rate limits kept, everything delivered once.

Every chosen crash point must be reached: each run, armed at its point, is given the next
few verdicts, and one more each time it has done all it was given without reaching the
point; a point still not reached once every verdict is produced fails the trial, naming it.

The random kill times are drawn from a seed, printed at the start of the trial (pytest
shows it with a failure's captured output; ``-s`` shows it at once). To draw the same kill
times again, set ``ANCHORWATCH_TEST_CRASH_SEED`` to it (an ``ANCHORWATCH_TEST_`` variable:
tests/conftest.py keeps those, where it clears every other ``ANCHORWATCH_*``), e.g.::

    ANCHORWATCH_TEST_CRASH_SEED=1764403200 .venv/bin/pytest \\
        tests/integration/alerting/test_service_crash.py -k chosen_and_random

The rest of a run (where each kill lands in the service's work) is the machine's timing,
so a failure may take a few reruns with its seed to happen again. The other trials draw
nothing at random.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.store import Store, StoreError
from anchorwatch.contracts import Verdict
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

#: One run per point, in this order, armed at it (the test hook) and driven until it gets there.
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
SEED_ENV = "ANCHORWATCH_TEST_CRASH_SEED"
#: How long a run armed at a point is given to reach it once every verdict is produced.
LAST_WAIT_S = 20


def crash_seed() -> int:
    """``ANCHORWATCH_TEST_CRASH_SEED`` when set, else a new one; printed either way."""
    given = os.environ.get(SEED_ENV, "").strip()
    if given and not given.lstrip("-").isdigit():
        pytest.fail(f"{SEED_ENV}={given!r}: not an integer")
    seed = int(given) if given else int(time.time())
    print(f"\n{SEED_ENV}={seed}" + (" (from the environment)" if given else ""))
    return seed


def _window_times(texts: list[str]) -> list[str]:
    """The window start (HH:MM) an update reply or comment names."""
    return [t.split(" UTC")[0].rsplit(" ", 1)[-1].split("–")[0] for t in texts]


@dataclass
class Feed:
    """A trial's verdicts, produced a few at a time while the service crashes and
    restarts."""

    job: JobSettings
    left: deque[Verdict]
    produced: int = 0

    def next(self, n: int = 1) -> bool:
        """Produce the next ``n`` verdicts (what is left, at the end); False when none is."""
        if not self.left:
            return False
        some = [self.left.popleft() for _ in range(min(n, len(self.left)))]
        self.produced += produce(self.job, some)
        return True

    def rest(self) -> None:
        self.next(len(self.left))


def caught_up(state: Path, produced: int) -> bool:
    """The state says the service has done all it was given: every produced verdict
    consumed, no notification left to send."""
    try:
        store = Store(state, create=False)
    except StoreError:
        return False
    try:
        consumed = sum(store.restore().offsets.values())
        return consumed >= produced and not any(store.pending_counts().values())
    finally:
        store.close()


def crashes_at(
    point: str, env: dict[str, str], log: Path, state: Path, feed: Feed, first: int
) -> bool:
    """Run the service armed at ``point`` until it dies there (True), feeding it the next
    ``first`` verdicts, then one more each time it has done all it was given without
    reaching the point (as few as it takes: the points after it need verdicts too). Once
    none is left, it has ``LAST_WAIT_S`` more with the work it has; False if it did not
    get there."""
    process = ServiceProcess(env, log, crash_at=point)
    produced = feed.produced
    try:
        n = first
        while feed.next(n):
            n = 1
            wait_until(
                lambda: process.process.poll() is not None or caught_up(state, feed.produced),
                90,
                f"the service to crash at {point} or to do all of {feed.produced} verdicts",
            )
            if process.process.poll() is not None:
                break
        else:
            process.wait(LAST_WAIT_S)
        code = process.process.poll()
        print(
            f"{point}: {'reached' if code is not None else 'NOT reached'} after "
            f"{feed.produced - produced} new verdicts ({len(feed.left)} left)"
        )
        if code is None:
            return False
        assert code == -9, f"exited {code} instead of crashing at {point}: see {log}"
        return True
    finally:
        process.kill9()


def test_kill_9_at_chosen_and_random_points_delivers_exactly_once(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    seed = crash_seed()
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
    # The verdicts keep arriving while the service crashes and restarts: a few each run.
    feed = Feed(job_settings, deque(verdicts))
    per_run = len(verdicts) // (len(CHOSEN) + RANDOM_KILLS) + 1
    log = tmp_path / "service.log"
    unreached = [p for p in CHOSEN if not crashes_at(p, env, log, state, feed, per_run)]
    assert not unreached, f"seed {seed}: chosen crash points never reached: {unreached}"
    for _ in range(RANDOM_KILLS):
        feed.next(per_run)
        process = ServiceProcess(env, log)
        time.sleep(rng.uniform(1.0, 4.0))  # the random kill time: the seed's draw
        process.kill9()
    feed.rest()
    produced = feed.produced
    assert produced == len(verdicts)
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
    # Four types: enough verdicts for each point to be driven to, with some to spare.
    docs = ["chart-a", "chart-b", "chart-c", "chart-d"]
    verdicts = sorted(
        (v for i, d in enumerate(docs) for v in lifecycle(d, first_minute=i)),
        key=lambda v: v.window.window_start_ms,
    )
    # One verdict for each point, and more only as a point needs them.
    feed = Feed(job_settings, deque(verdicts))
    log = tmp_path / "service.log"
    points = CHART_AND_COMMIT_POINTS
    unreached = [p for p in points if not crashes_at(p, env, log, state, feed, first=1)]
    assert not unreached, f"kill points never reached: {unreached}"
    feed.rest()
    produced = feed.produced
    assert produced == len(verdicts)
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
