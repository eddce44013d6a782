"""The watchdog in the running service against a real Kafka: snapshots keep arriving on the
job's input topic while the stand-in drift job (tests/support/watchdog_feed.py) stops writing
verdicts and committing; the notice reaches the local Slack once, survives a restart of the
service without a second post, and resolves when verdicts resume. The timings are shrunk
(two-second windows, a six-second blind_after_s); bench/watchdog.py measures the defaults."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.store import Store
from anchorwatch.alerting.watchdog_post import WATCHDOG_DOC_TYPE
from anchorwatch.jobs.settings import JobSettings
from tests.support.alerting import POLICY, LocalSlackWithHistory, slack_threads
from tests.support.alerting_kafka import drift_events, load_settings, service_config
from tests.support.waiting import wait_until
from tests.support.watchdog_feed import FeedAndJob

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BLIND_AFTER_S = 6


def _notices(slack: LocalSlackWithHistory) -> list[dict[str, Any]]:
    return [
        m
        for m in slack.messages
        if not m.get("thread_ts")
        and m.get("subtype") is None
        and ("cannot see" in m["text"] or "sees again" in m["text"])
    ]


def _checks(service: AlertingService, outcome: str) -> float:
    value = service.registry.get_sample_value(
        "anchorwatch_alerting_watchdog_checks_total", {"outcome": outcome}
    )
    return value or 0.0


def _outbox(state_dir: Path) -> list[dict[str, Any]]:
    store = Store(state_dir, create=False)
    try:
        return [r for r in store.outbox_rows() if r["incident_id"].startswith("w1-")]
    finally:
        store.close()


def test_a_stopped_job_is_noticed_once_across_a_restart_and_resolves(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory
) -> None:
    group = f"drift-{tmp_path.name}"
    config = service_config(job_settings, tmp_path / "state", slack, None)
    config["policy"] = POLICY
    config["watchdog"] = {
        "check_interval_s": 1,
        "blind_after_s": BLIND_AFTER_S,
        "update_interval_s": 0,
        "job_group_id": group,
    }
    feed = FeedAndJob(
        job_settings,
        ["invoice", "receipt"],
        group_id=group,
        snapshots_per_s=50,
        window_s=2,
        watermark_delay_s=0.5,
        checkpoint_s=1,
    ).start()
    try:
        _stop_then_restart(config, feed, tmp_path, slack)
    finally:
        feed.stop()

    events = [e for e in drift_events(job_settings) if e.doc_type == WATCHDOG_DOC_TYPE]
    kinds = [e.event_type for e in events]
    assert kinds[0] == "ANCHOR_DRIFT_ALERT"
    assert kinds[-1] == "ANCHOR_DRIFT_RESOLVED"
    assert kinds.count("ANCHOR_DRIFT_RESOLVED") == 1
    assert len({e.incident_id for e in events}) == 1


def _stop_then_restart(
    config: dict[str, Any], feed: FeedAndJob, tmp_path: Path, slack: LocalSlackWithHistory
) -> None:
    service = AlertingService(load_settings(config)).start()
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready")
        # Seeing: past the warm-up with verdicts flowing, and no notice.
        wait_until(lambda: _checks(service, "seeing") >= 5, 60, "checks that see")
        assert feed.verdicts > 0
        assert _notices(slack) == []

        feed.kill()
        killed = time.monotonic()
        wait_until(lambda: len(_notices(slack)) == 1, 120, "the blind notice in Slack")
        took = time.monotonic() - killed
        print(f"\nwatchdog: notice {took:.1f} s after the job stopped (blind_after_s 6)")
        assert took < 180
        notice = _notices(slack)[0]
        assert "invoice" in notice["text"] or "receipt" in notice["text"]
        time.sleep(BLIND_AFTER_S)  # the other type joins, as an update in the thread
    finally:
        service.stop()
    entries = _outbox(tmp_path / "state")
    assert entries
    assert all(r["status"] == "done" for r in entries)

    service = AlertingService(load_settings(config)).start()
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready again")
        # Past the new warm-up, still blind: nothing posted again.
        wait_until(lambda: _checks(service, "blind") >= 5, 60, "checks that are blind")
        assert len(_notices(slack)) == 1
        assert _outbox(tmp_path / "state") == entries

        feed.revive()
        ts = notice["ts"]

        def resolved() -> bool:
            replies = slack_threads(slack.messages).get(ts, [])
            return any(r["text"].startswith("Resolved") for r in replies)

        wait_until(resolved, 60, "the notice resolved in its thread")
        assert len(_notices(slack)) == 1
        parent = next(m for m in slack.messages if m["ts"] == ts)
        assert parent["text"].startswith("[CRITICAL] anchorwatch sees again")  # edited in place
        assert "Drift" not in parent["text"]
        assert _checks(service, "seeing") > 0
    finally:
        service.stop()
