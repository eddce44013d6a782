"""The breakdown in the messages: the Slack parent and update, the Jira description and
comment, PagerDuty's details name the kinds that moved, the worst anchors, the model and the
latency; hostile anchor ids and model names are escaped as doc types are; a window without
a breakdown renders as before; the outbox payload carries it through a resend."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from anchorwatch.alerting.breakdown_text import with_history
from anchorwatch.alerting.integrations.jira.render import (
    check_description_template,
    description_variables,
    jira_description,
    jira_escape,
    jira_update_comment,
)
from anchorwatch.alerting.integrations.pagerduty import custom_details
from anchorwatch.alerting.integrations.slack.render import (
    check_slack_template,
    slack_literal,
    slack_parent,
    slack_update,
    slack_variables,
)
from anchorwatch.alerting.payload import (
    history_from_json,
    history_to_json,
    notification_payload,
    view_from_json,
)
from anchorwatch.alerting.render import IncidentView, WindowPoint, pack_kind_means
from anchorwatch.contracts import WindowAggregate
from anchorwatch.contracts.models import KindFigures, ModelFigures, TopAnchor
from anchorwatch.policy.window import judge_window, verdict_for
from tests.support.rendering import HOSTILE, LITERAL, assert_slack_safe, view

T0 = 1_767_621_600_000
MINUTE = 60_000
BREAKDOWN: dict[str, Any] = {
    "kinds": {
        "SECTION": KindFigures(anchor_count=300, mean_drift=0.92, max_drift=0.99),
        "TABLE": KindFigures(anchor_count=40, mean_drift=0.63, max_drift=0.97),
    },
    "top_anchors": [
        TopAnchor(anchor_id="TABLE_003", position=1_204, drift_score=0.97, event_id="ev-1"),
        TopAnchor(anchor_id="SECTION_001", position=3, drift_score=0.96, event_id="ev-2"),
    ],
    "models": [
        ModelFigures(model="claude-x-1", request_count=72, mean_drift=0.71),
        ModelFigures(model="claude-x-2", request_count=48, mean_drift=0.93),
    ],
    "latency_count": 120,
    "latency_p50_ms": 420,
    "latency_p95_ms": 1_840,
}


def history() -> list[WindowPoint]:
    """Ten quiet windows before the incident's (T0), with the kinds' figures."""
    means = pack_kind_means({"SECTION": 0.55, "TABLE": 0.62})
    return [
        WindowPoint(T0 - i * MINUTE, T0 - (i - 1) * MINUTE, 0.6, 0.85, 100, 400, 1_200, means)
        for i in range(10, 0, -1)
    ]


def drift_view(doc_type: str = "purchase_contract", **breakdown: Any) -> IncidentView:
    v = view(doc_type)
    window = v.window.model_copy(update={**BREAKDOWN, **breakdown})
    return with_history(replace(v, window=window), history())


def test_slack_parent_says_where_which_model_and_the_latency() -> None:
    message = slack_parent(drift_view())
    fields = message.blocks[1]["fields"]
    assert fields[0]["text"] == (
        "*Mean drift*\n0.912 (threshold 0.850)\np95 latency 1,840 ms (p50 420 ms)"
    )
    assert message.blocks[2]["text"]["text"] == (
        "*Where in the document*: SECTION anchors 0.92 against 0.55; TABLE steady\n"
        "*Worst anchors*: `TABLE_003` at position 1,204: 0.97 (request `ev-1`) · "
        "`SECTION_001` at position 3: 0.96 (request `ev-2`)\n"
        "*Which model*: `claude-x-2` 0.93 over 40% of requests; `claude-x-1` 0.71 over 60%: "
        "concentrated in `claude-x-2`, a rollout problem: consider rolling back"
    )
    update = slack_update(drift_view()).blocks[0]["text"]["text"]
    assert "(threshold 0.850, 120 requests, p95 latency 1,840 ms)" in update


def test_jira_description_and_update_say_it_too() -> None:
    text = jira_description(drift_view(), history())
    assert (
        "over 120 requests in 2026-01-05 14:00–14:01 UTC; p95 latency 1,840 ms (p50 420 ms)."
        in text
    )
    assert (
        "h4. Where and which model\n"
        "* Where in the document: SECTION anchors 0.92 against 0.55; TABLE steady\n"
        "* Worst anchor: TABLE\\_003 at position 1,204: 0.97 (request ev\\-1)\n"
        "* Worst anchor: SECTION\\_001 at position 3: 0.96 (request ev\\-2)\n"
        "* Which model: claude\\-x\\-2 0.93 over 40% of requests; claude\\-x\\-1 0.71 over "
        "60%: concentrated in claude\\-x\\-2, a rollout problem: consider rolling back\n"
        "\nh4. Windows"
    ) in text
    comment = jira_update_comment(drift_view())
    assert "over 120 requests; p95 latency 1,840 ms (p50 420 ms); severity *CRITICAL*" in comment


def test_pagerduty_details_carry_the_breakdown_in_plain_text() -> None:
    details = custom_details(drift_view())
    assert details["where"] == "SECTION anchors 0.92 against 0.55; TABLE steady"
    assert details["which_model"].startswith("claude-x-2 0.93 over 40% of requests")
    assert details["worst_anchors"][0] == "TABLE_003 at position 1,204: 0.97 (request ev-1)"
    assert (details["latency_p50_ms"], details["latency_p95_ms"]) == (420, 1_840)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_anchor_ids_and_model_names_never_notify_or_format_in_slack(name: str) -> None:
    hostile = {
        # Not validated: the renderers hold up even for what the contract would refuse.
        "top_anchors": [
            TopAnchor.model_construct(anchor_id=name, position=1, drift_score=0.9, event_id=name)
        ],
        "models": [
            ModelFigures.model_construct(model=name, request_count=10, mean_drift=0.95),
            ModelFigures.model_construct(model=None, request_count=10, mean_drift=0.5),
        ],
    }
    v = drift_view(name, **hostile)
    for message in (slack_parent(v), slack_update(v)):
        assert_slack_safe({"text": message.text, "blocks": message.blocks})
    body = slack_parent(v).blocks[2]["text"]["text"]
    literal = slack_literal(name, 60)
    assert f"*Worst anchors*: {literal} at position 1: 0.90 (request {literal})" in body
    assert f"concentrated in {literal}, a rollout problem" in body
    assert "unknown model 0.50" in body


@pytest.mark.parametrize("name", LITERAL)
def test_hostile_anchor_ids_and_model_names_show_literally_in_jira(name: str) -> None:
    v = drift_view(
        top_anchors=[TopAnchor.model_construct(anchor_id=name, position=1, drift_score=0.9)],
        models=[
            ModelFigures.model_construct(model=name, request_count=10, mean_drift=0.95),
            ModelFigures.model_construct(model="b", request_count=10, mean_drift=0.95),
        ],
    )
    text = jira_description(v, history())
    escaped = jira_escape(name[:59] + "…" if len(name) > 60 else name)
    assert f"* Worst anchor: {escaped} at position 1: 0.90\n" in text
    assert f"* Which model: {escaped} 0.95 over 50% of requests; b 0.95 over 50%: spread" in text


def test_names_are_bounded() -> None:
    long = "x" * 10_000
    v = drift_view(
        top_anchors=[TopAnchor.model_construct(anchor_id=long, position=1, drift_score=0.9)],
        models=[ModelFigures.model_construct(model=long, request_count=10, mean_drift=0.95)],
    )
    body = slack_parent(v).blocks[2]["text"]["text"]
    assert "x" * 60 not in body
    assert "x" * 59 + "…" in body
    assert len(jira_description(v, history())) < 5_000


def test_a_window_without_a_breakdown_renders_as_before() -> None:
    """Same messages as a view that never heard of the breakdown, whatever the history
    holds: the figures explicitly None are the figures absent."""
    old = view()
    explicit = replace(
        old,
        window=old.window.model_copy(
            update={k: None for k in (*BREAKDOWN, "other_models", "latency_count")}
        ),
    )
    for v in (explicit, with_history(explicit, history())):
        assert slack_parent(v) == slack_parent(old)
        assert slack_update(v) == slack_update(old)
        assert jira_description(v, history()) == jira_description(old, history())
        assert jira_update_comment(v) == jira_update_comment(old)
        assert custom_details(v) == custom_details(old)
    assert len(slack_parent(old).blocks) == 4  # headline, fields, reasons, context
    text = jira_description(old, history())
    assert "Where and which model" not in text
    assert "latency" not in text


@pytest.mark.parametrize("kind", ["group", "blind"])
def test_only_a_drift_incident_shows_a_breakdown(kind: str) -> None:
    v = replace(
        drift_view(),
        kind=kind,  # type: ignore[arg-type]
        code="snapshot_disabled",
        members=(("a", "open"),),
        signals=("no_verdicts",),
    )
    assert slack_variables(v)["which_model"] is None
    assert slack_variables(v)["latency"] is None
    assert description_variables(v)["worst_anchors"] == []
    assert description_variables(v)["where"] is None
    assert "Which model" not in str(slack_parent(v).blocks)
    assert "which model" not in jira_description(v, history())


def test_templates_may_use_the_breakdown() -> None:
    check_slack_template(
        "{{ doc_type }} {{ which_model or '' }} {{ where or '' }} {{ latency or '' }}"
        "{% for a in worst_anchors %}{{ a }}{% endfor %}"
    )
    check_description_template(
        "{% for w in windows %}{{ w.latency_p95 or '-' }}{% endfor %}{{ which_model }}"
    )


# --------------------------------------------------------------------------- the payload


def test_the_payload_carries_the_comparison_and_history_through_a_resend() -> None:
    v = replace(drift_view(), kinds_before=None, drift_before=None)
    payload = notification_payload(v, history())
    assert payload["view"]["kinds_before"] == {"SECTION": 0.55, "TABLE": 0.62}
    assert payload["view"]["drift_before"] == pytest.approx(0.6)
    assert payload["history"][0] == [
        T0 - 10 * MINUTE, T0 - 9 * MINUTE, 0.6, 0.85, 100, 400, 1_200,
        [0.55, None, 0.62, None, None, None, None, None],
    ]  # fmt: skip
    again = view_from_json(payload["view"])
    assert slack_parent(again) == slack_parent(drift_view())
    assert jira_description(again, history_from_json(payload["history"])) == jira_description(
        drift_view(), history()
    )


def test_an_unknown_model_survives_the_payload() -> None:
    """``model`` None is a value (requests naming no model), kept through the outbox."""
    models = [
        ModelFigures(model=None, request_count=30, mean_drift=0.95),
        ModelFigures(model="m-1", request_count=70, mean_drift=0.6),
    ]
    v = drift_view(models=models)
    again = view_from_json(orjson.loads(orjson.dumps(notification_payload(v, history())))["view"])
    assert again.window.models == models
    assert "concentrated in unknown model" in slack_parent(again).blocks[2]["text"]["text"]


def test_history_rows_without_a_breakdown_keep_five_values() -> None:
    plain = [WindowPoint(T0, T0 + MINUTE, 0.5, 0.85, 10)]
    assert history_to_json(plain) == [[T0, T0 + MINUTE, 0.5, 0.85, 10]]
    assert history_from_json(history_to_json(plain)) == plain
    latency_only = [WindowPoint(T0, T0 + MINUTE, 0.5, 0.85, 10, None, 900)]
    assert history_to_json(latency_only)[0][5:] == [None, 900, None]
    assert history_from_json(history_to_json(latency_only)) == latency_only
    points = history()
    assert history_from_json(history_to_json(points)) == points
    assert points[0].kind_means() == pytest.approx({"SECTION": 0.55, "TABLE": 0.62})
    payload = notification_payload(view(), plain)
    assert "kinds_before" not in payload["view"]
    assert "drift_before" not in payload["view"]


def test_a_point_of_a_verdict_keeps_its_latency_and_kind_means() -> None:
    window = WindowAggregate(
        doc_type="d", window_start_ms=T0, window_end_ms=T0 + MINUTE, request_count=5,
        mean_drift=0.5, **BREAKDOWN,
    )  # fmt: skip
    point = WindowPoint.from_verdict(verdict_for(window, judge_window(window, None), "j1"))
    assert (point.latency_p50_ms, point.latency_p95_ms) == (420, 1_840)
    assert point.kind_means() == pytest.approx({"SECTION": 0.92, "TABLE": 0.63})
    older = window.model_copy(update={"kinds": None})
    old = WindowPoint.from_verdict(verdict_for(older, judge_window(older, None), "j1"))
    assert old.kind_drift == b""
    assert old.kind_means() is None
