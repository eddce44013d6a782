"""A resolution by adaptation (the type's level moved and stayed) says so in plain words in
every resolution message, with the doc type escaped for each markup."""

from __future__ import annotations

import json
from dataclasses import replace

from anchorwatch.alerting.integrations.jira.render import jira_resolved_comment
from anchorwatch.alerting.integrations.slack.render import slack_parent, slack_resolved
from anchorwatch.alerting.payload import view_from_json, view_to_json
from anchorwatch.alerting.render import IncidentView
from anchorwatch.contracts import WindowAggregate

# Slack shows doc types as inline code (so "*" or "_" in one never format).
SLACK_PHRASE = "`medical_report` moved from 0.52 to 0.61 and stayed: baseline adapted"


def resolved_view(doc_type: str = "medical_report", **changes: object) -> IncidentView:
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=1_767_625_200_000,
        window_end_ms=1_767_625_260_000,
        request_count=118,
        mean_drift=0.612,
    )
    view = IncidentView(
        incident_id="i1-abc",
        doc_type=doc_type,
        severity="warning",
        state="resolved",
        opened_at_ms=1_767_621_660_000,
        resolved_at_ms=1_767_625_260_000,
        window=window,
        threshold=0.6,
        baseline_version="b1-1",
        peak_mean_drift=0.64,
        adapted_from=0.52,
        adapted_to=0.61,
    )
    return replace(view, **changes)  # type: ignore[arg-type]


def test_adapted_resolution_is_said_in_slack_reply_parent_and_jira_comment() -> None:
    view = resolved_view()
    reply = slack_resolved(view)
    assert SLACK_PHRASE in reply.text
    assert SLACK_PHRASE in json.dumps(reply.blocks)
    assert "back to" not in json.dumps(reply.blocks)  # it did not go back: it stayed
    assert SLACK_PHRASE in json.dumps(slack_parent(view).blocks)
    comment = jira_resolved_comment(view)
    # Jira wiki markup escapes "_" in the doc type.
    assert "medical\\_report moved from 0.52 to 0.61 and stayed: baseline adapted" in comment
    assert "back to" not in comment


def test_a_clean_resolution_is_unchanged() -> None:
    view = resolved_view(adapted_from=None, adapted_to=None)
    assert "adapted" not in json.dumps(slack_resolved(view).blocks)
    assert "adapted" not in json.dumps(slack_parent(view).blocks)
    assert "back to 0.612" in jira_resolved_comment(view)


def test_adapted_phrase_escapes_a_hostile_doc_type() -> None:
    view = resolved_view(doc_type="<!channel> x")
    for text in (slack_resolved(view).text, json.dumps(slack_parent(view).blocks)):
        assert "<!channel>" not in text
        assert "`&lt;!channel&gt; x` moved from 0.52 to 0.61" in text


def test_adapted_figures_survive_the_outbox_payload() -> None:
    view = resolved_view()
    again = view_from_json(json.loads(json.dumps(view_to_json(view))))
    assert (again.adapted_from, again.adapted_to) == (0.52, 0.61)
    # Payloads queued before the fields existed still load.
    old = view_to_json(resolved_view(adapted_from=None, adapted_to=None))
    del old["adapted_from"], old["adapted_to"]
    assert view_from_json(old).adapted_from is None
