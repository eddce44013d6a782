"""The breakdown end to end: verdicts whose windows carry it (per anchor kind, the worst
anchors, per model, request latency), produced to a real Kafka, through the alerting service
to the local Slack and Jira (the real slack_sdk and Jira clients): the parent message and
the ticket's description name the kind that moved and the model the drift is in, escaped;
the chart has its latency panel; the drift event carries the figures; the metrics split by
model; `anchorwatch read --by model` reads the verdicts back split."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from click.testing import CliRunner

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.integrations.slack.render import slack_literal
from anchorwatch.alerting.service import AlertingService
from anchorwatch.cli import cli
from anchorwatch.contracts import Verdict, WindowAggregate
from anchorwatch.contracts.models import KindFigures, ModelFigures, TopAnchor
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.policy.window import judge_window, verdict_for
from tests.support.alerting import LIFECYCLE, MINUTE, POLICY, T0, LocalSlackWithHistory
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

ROLLOUT = "contract"  # the drift lives in one model version, and in SECTION anchors
HOSTILE = "<!channel> please"  # every model drifts; its model names are hostile
HOSTILE_MODEL = "<!here> *m1* [~admin]"


def _window(doc_type: str, minute: int, mean: float) -> WindowAggregate:
    """A window of the lifecycle with its breakdown: quiet windows have every kind and model
    near 0.5; drifting ones have SECTION (or, for HOSTILE, TABLE) up and, for ROLLOUT, only
    claude-x-2 up (claude-x-1 stays under the static threshold of 0.85)."""
    drifting = mean > 0.85
    section = 0.95 if drifting and doc_type == ROLLOUT else 0.48
    table = 0.97 if drifting and doc_type == HOSTILE else 0.52
    if doc_type == ROLLOUT:
        x1, x2 = (0.80, 0.99) if drifting else (0.5, 0.5)
        models = [("claude-x-1", 30, x1), ("claude-x-2", 20, x2)]
    else:
        models = [(HOSTILE_MODEL, 25, mean), ("m_2", 25, mean)]
    start = T0 + minute * MINUTE
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=50,
        mean_drift=mean,
        p95_drift=min(1.0, mean + 0.04),
        kinds={
            "SECTION": KindFigures(anchor_count=400, mean_drift=section, max_drift=0.99),
            "TABLE": KindFigures(anchor_count=60, mean_drift=table, max_drift=0.99),
        },
        top_anchors=[
            TopAnchor(anchor_id="SECTION_012", position=1_204, drift_score=0.99, event_id="req-7")
        ],
        models=[ModelFigures(model=m, request_count=n, mean_drift=d) for m, n, d in models],
        latency_count=50,
        latency_p50_ms=400,
        latency_p95_ms=2_600 if drifting else 900,
    )


def _verdicts(doc_type: str, first_minute: int) -> list[Verdict]:
    windows = [_window(doc_type, first_minute + i, m) for i, m in enumerate(LIFECYCLE)]
    return [verdict_for(w, judge_window(w, None), "j1") for w in windows]


def _metric(url: str, line_start: str) -> float | None:
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _first_posted(message: dict[str, Any]) -> dict[str, Any]:
    """A parent as it was first posted (the local Slack keeps each edit's previous text)."""
    return message["edits"][0] if message["edits"] else message


def _parent_text(slack: LocalSlackWithHistory, doc_type: str) -> str:
    (parent,) = [
        m
        for m in slack.messages
        if not m.get("thread_ts") and slack_literal(doc_type) in _first_posted(m)["text"]
    ]
    first = _first_posted(parent)
    return "\n".join(
        [first["text"]]
        + [b["text"]["text"] for b in first["blocks"] if "text" in b]
        + [f["text"] for b in first["blocks"] for f in b.get("fields", [])]
    )


def test_the_alert_names_the_kind_and_the_model(
    job_settings: JobSettings, tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    config = service_config(job_settings, tmp_path / "state", slack, jira)
    config["policy"] = POLICY
    config["slack"]["charts"] = True
    service = AlertingService(load_settings(config)).start()
    try:
        wait_until(lambda: service.readiness()[0], 30, "the service to be ready")
        produced = produce(job_settings, _verdicts(ROLLOUT, 0) + _verdicts(HOSTILE, 1))
        wait_until(
            lambda: delivered_everything(tmp_path / "state", produced), 120, "every notification"
        )
        url = service.endpoint_url
        # The latest windows are quiet: the model series are those of the last window.
        drift = 'anchorwatch_alerting_window_model_mean_drift{doc_type="contract",model='
        assert _metric(url, drift + '"claude-x-2"}') == 0.5
        requests_x1 = 'anchorwatch_alerting_window_model_requests{doc_type="contract",model='
        assert _metric(url, requests_x1 + '"claude-x-1"}') == 30
        latency = 'anchorwatch_alerting_window_request_latency_seconds{doc_type="contract",'
        assert _metric(url, latency + 'quantile="0.95"}') == 0.9
        kind = 'anchorwatch_alerting_window_kind_mean_drift{doc_type="contract",kind="SECTION"}'
        assert _metric(url, kind) == 0.48
    finally:
        service.stop()

    # Slack: the parent as posted names the kind that moved, the worst anchor, the model the
    # drift is in and the latency next to the drift.
    rollout = _parent_text(slack, ROLLOUT)
    assert "SECTION anchors 0.95 against 0.48; TABLE steady" in rollout
    assert "`SECTION_012` at position 1,204: 0.99 (request `req-7`)" in rollout
    assert (
        "`claude-x-2` 0.99 over 40% of requests; `claude-x-1` 0.80 over 60%: concentrated in "
        "`claude-x-2`, a rollout problem: consider rolling back"
    ) in rollout
    assert "p95 latency 2,600 ms (p50 400 ms)" in rollout
    hostile = _parent_text(slack, HOSTILE)
    assert "TABLE anchors 0.97 against 0.52; SECTION steady" in hostile
    assert "spread over every model: look upstream of the model, e.g. the input" in hostile
    assert "`&lt;!here&gt; *m1* [~admin]`" in hostile
    for m in slack.messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"]})

    # Jira: the description says the same in wiki markup, the model name shown literally.
    descriptions = {
        doc: next(
            i["fields"]["description"]
            for i in jira.issues.values()
            if doc[:9] in i["fields"]["summary"]
        )
        for doc in (ROLLOUT, HOSTILE)
    }
    assert (
        "* Which model: claude\\-x\\-2 0.99 over 40% of requests; claude\\-x\\-1 0.80 over "
        "60%: concentrated in claude\\-x\\-2, a rollout problem: consider rolling back"
    ) in descriptions[ROLLOUT]
    assert (
        "* Where in the document: SECTION anchors 0.95 against 0.48; TABLE steady"
        in (descriptions[ROLLOUT])
    )
    assert "; p95 latency 2,600 ms (p50 400 ms)." in descriptions[ROLLOUT]
    assert "&lt;\\!here&gt; \\*m1\\* \\[\\~admin\\]" not in descriptions[HOSTILE]  # not HTML
    assert "<\\!here> \\*m1\\* \\[\\~admin\\] 0.88 over 50% of requests" in descriptions[HOSTILE]
    assert not [r for r in jira.requests if r["status"] >= 400]

    # The charts drawn for updates have the latency panel under the drift (300 + 160 px).
    charts = [f["data"] for f in slack.files.values() if f["data"]]
    assert charts
    for png in charts:
        assert struct.unpack(">II", png[16:24]) == (800, 460)

    # The drift event carries the figures of the window that opened the incident.
    (opened, *_) = [
        e
        for e in drift_events(job_settings)
        if e.doc_type == ROLLOUT and e.event_type == "ANCHOR_DRIFT_ALERT"
    ]
    assert [m.model for m in opened.evidence.models or []] == ["claude-x-1", "claude-x-2"]
    assert set(opened.evidence.kinds or {}) == {"SECTION", "TABLE"}
    assert opened.evidence.latency_p95_ms == 2_600

    # `anchorwatch read --by model` splits the verdicts on the topic.
    result = CliRunner().invoke(
        cli,
        ["read", job_settings.topics.verdicts, "--by", "model"],
        env={"ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS": job_settings.kafka.bootstrap_servers},
    )
    assert result.exit_code == 0, result.output
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2 * 2 * len(LIFECYCLE)
    first = [(r["model"], r["share"]) for r in rows if r["doc_type"] == ROLLOUT][:2]
    assert first == [("claude-x-1", 0.6), ("claude-x-2", 0.4)]
