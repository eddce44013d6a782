"""The alerting service against a real Kafka (verdicts produced to the test's private topic),
the local Slack and Jira through the real clients, and the drift-events topic read back."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.service import AlertingService
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import Baseline, encode
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from tests.support.alerting import (
    POLICY,
    LocalSlackWithHistory,
    lifecycle,
    parents_by_label,
    slack_threads,
    verdict,
)
from tests.support.alerting_kafka import (
    delivered_everything,
    drift_events,
    load_settings,
    produce,
    service_config,
)
from tests.support.rendering import assert_slack_safe
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC_TYPES = [
    "medical_report",
    "<!channel> please",
    'quote " and back\\slash',
    "order",
    "日本語の契約書 🚨",
    "c" * 300,
]


def _metric(url: str, line_start: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _posted(slack: LocalSlackWithHistory) -> list[dict[str, Any]]:
    return [m for m in slack.messages if m.get("subtype") is None]


def _done(service: AlertingService, produced: int) -> bool:
    return delivered_everything(service.settings.alerting.state_dir, produced)


def test_lifecycle_of_hostile_doc_types_to_slack_jira_and_drift_events(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    config = service_config(job_settings, tmp_path / "state", slack, jira)
    config["policy"] = POLICY
    service = AlertingService(load_settings(config)).start()
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready")
        verdicts = [v for i, d in enumerate(DOC_TYPES) for v in lifecycle(d, first_minute=i)]
        produced = produce(job_settings, verdicts)
        # The drift job's sink is at-least-once: the same verdicts again change nothing.
        produced += produce(job_settings, verdicts[:9])
        wait_until(lambda: _done(service, produced), 90, "every notification")
        url = service.endpoint_url
        assert _metric(url, 'anchorwatch_alerting_verdicts_total{outcome="replay"}') == 9
        assert _metric(url, 'anchorwatch_alerting_incidents_open{severity="critical"}') == 0
        assert (
            _metric(url, 'anchorwatch_alerting_window_mean_drift{doc_type="medical_report"}') == 0.5
        )
        assert (
            _metric(
                url, 'anchorwatch_alerting_notification_latency_seconds_count{integration="slack"}'
            )
            == 24
        )
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 200
    finally:
        service.stop()

    # The offsets the state holds are committed to Kafka too, for lag monitoring.
    consumer = Consumer(
        client_config(job_settings.kafka, **{"group.id": config["alerting"]["group_id"]})
    )
    try:
        stored = Store(tmp_path / "state", create=False).restore().offsets
        tps = [TopicPartition(t, p) for t, p in stored]
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, 10)}
    finally:
        consumer.close()
    assert committed == stored
    assert sum(stored.values()) == produced

    incidents = {r.row.doc_type: r for r in _listing(tmp_path)}
    assert set(incidents) == set(DOC_TYPES)
    events = drift_events(job_settings)
    threads = slack_threads(_posted(slack))
    parents = parents_by_label(slack.messages)
    for doc_type, listing in incidents.items():
        label = incident_label(listing.row.incident_id)
        assert parents[label] == 1, doc_type
        replies = threads[listing.refs.slack_ts or ""]
        assert [r["text"].split(" ")[0] for r in replies] == ["Update", "Update", "Resolved:"]
        (ticket,) = [i for i in jira.issues.values() if label in i["fields"]["labels"]]
        assert ticket["fields"]["status"] == "Done"
        assert [c["body"].split(" ")[0] for c in ticket["comments"]] == [
            "Update,",
            "Update,",
            "Resolved",
        ]
        mine = [e for e in events if e.incident_id == listing.row.incident_id]
        assert [e.event_type for e in mine] == [
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_ALERT",
            "ANCHOR_DRIFT_RESOLVED",
        ]
        assert {e.doc_type for e in mine} == {doc_type}
        assert [e.severity for e in mine] == ["warning", "critical", "critical"]
        assert mine[0].evidence.mean_drift == 0.88
    for m in slack.messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"]})
    assert not [r for r in jira.requests if r["status"] >= 400]


def _listing(tmp_path: Path) -> list[Any]:
    from anchorwatch.alerting.service import list_incidents

    return list_incidents(tmp_path / "state", open_only=False, limit=100)


def test_outages_of_slack_and_jira_then_recovery(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    requests.post(
        f"{slack.url}/_local/faults", json={"status": 503, "times": -1}, timeout=5
    ).raise_for_status()
    requests.post(
        f"{jira.url}/_local/faults", json={"status": 429, "retry_after": 1, "times": -1}, timeout=5
    ).raise_for_status()
    config = service_config(job_settings, tmp_path / "state", slack, jira)
    config["policy"] = POLICY
    service = AlertingService(load_settings(config)).start()
    try:
        docs = [f"outage-{i}" for i in range(5)]
        produced = produce(job_settings, [v for d in docs for v in lifecycle(d)])
        url = service.endpoint_url
        # Down: the consumer keeps deciding, drift events keep flowing, the rest queues.
        wait_until(
            lambda: (
                _metric(url, 'anchorwatch_alerting_verdicts_total{outcome="processed"}') == produced
                and len(drift_events(job_settings)) == 15
            ),
            60,
            "verdicts decided and drift events out during the outage",
        )
        wait_until(
            lambda: (
                _metric(
                    url,
                    'anchorwatch_alerting_notifications_total{integration="slack",outcome="retry"}',
                )
                >= 3
            ),
            60,
            "a few probes of Slack",
        )
        assert _posted(slack) == []
        assert jira.issues == {}
        assert _metric(url, 'anchorwatch_alerting_outbox_pending{integration="slack"}') == 20
        assert service.readiness()[0]  # an outage elsewhere does not make us unready
        requests.delete(f"{slack.url}/_local/faults", timeout=5).raise_for_status()
        requests.delete(f"{jira.url}/_local/faults", timeout=5).raise_for_status()
        wait_until(lambda: _done(service, produced), 90, "delivery after recovery")
    finally:
        service.stop()
    assert len(parents_by_label(slack.messages)) == 5
    assert all(n == 1 for n in parents_by_label(slack.messages).values())
    for replies in slack_threads(_posted(slack)).values():
        assert [r["text"].split(" ")[0] for r in replies] == ["Update", "Update", "Resolved:"]
    assert len(jira.issues) == 5
    for issue in jira.issues.values():
        assert issue["fields"]["status"] == "Done"
        assert len(issue["comments"]) == 3


def test_baselines_from_the_compacted_topic_feed_pooled_evidence(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    """A sparse type: no window alone has enough requests, but together they prove a rise.
    The service only sees that with the type's baseline, read from the baselines topic."""
    from confluent_kafka import Producer

    baseline = Baseline(
        doc_type="sparse",
        version="b-1",
        status="fitted",
        fitted_at_ms=1_767_600_000_000,
        history_start_ms=1_767_000_000_000,
        history_end_ms=1_767_600_000_000,
        window_count=5000,
        center=0.4,
        spread=0.01,
        p95=0.42,
        p99=0.43,
        typical_request_count=40,
        threshold=0.45,
        critical_threshold=0.6,
        min_requests=20,
    )
    producer = Producer(client_config(job_settings.kafka))
    producer.produce(job_settings.topics.baselines, encode(baseline), b"sparse")
    producer.produce(job_settings.topics.baselines, b"not a baseline", b"broken")
    assert producer.flush(30) == 0
    config = service_config(job_settings, tmp_path / "state", None, None)
    service = AlertingService(load_settings(config)).start()
    try:
        # 5 requests a window (under min_requests), each window well above the center.
        sparse = [verdict("sparse", i, 0.5, requests=5) for i in range(12)]
        produced = produce(job_settings, sparse)
        wait_until(lambda: _done(service, produced), 60, "the pooled incident")
        url = service.endpoint_url
        assert _metric(url, 'anchorwatch_alerting_baselines_total{outcome="applied"}') == 1
        assert _metric(url, 'anchorwatch_alerting_baselines_total{outcome="invalid"}') == 1
    finally:
        service.stop()
    by_type: dict[str, list[str]] = defaultdict(list)
    for e in drift_events(job_settings):
        by_type[e.doc_type].append(e.event_type)
    assert by_type["sparse"] == ["ANCHOR_DRIFT_ALERT"]
