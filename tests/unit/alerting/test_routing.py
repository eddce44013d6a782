"""Routes (owner, channel, Jira target, runbook per doc-type pattern) and the sandboxed
templates of the Slack parent and the Jira summary and description: today's texts by
default, custom ones checked at load, doc types never bringing markup in."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from anchorwatch.alerting.integrations.jira.render import jira_description, jira_summary
from anchorwatch.alerting.integrations.slack.notifier import ParentStyle
from anchorwatch.alerting.integrations.slack.render import slack_parent
from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.routing import RouteInfo
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.contracts import Reason, WindowAggregate
from anchorwatch.settings import SettingsError
from tests.support.rendering import assert_slack_safe, view

ROUTING: dict[str, Any] = {
    "severity_channels": {"critical": "#ops-pager"},
    "doc_type_channels": {"invoice_legacy": "#legacy"},
    "default_route": {"owner": "platform", "runbook_url": "https://runbooks.example.com/drift"},
    "routes": [
        {
            "doc_types": ["medical_*", "lab_result"],
            "owner": "Team Med",
            "slack_mention": "S0MEDTEAM",
            "channel": "#med-alerts",
            "jira_project": "MED",
            "jira_component": "Ingest",
            "jira_assignee": "oncall",
            "runbook_url": "https://runbooks.example.com/med",
        },
        {"doc_types": ["medical_report"], "owner": "never: the route above wins"},
        {
            "doc_types": ["invoice*"],
            "channel": "#billing",
            "severity_channels": {"critical": "#billing-pager"},
        },
    ],
}


def _settings(**sections: Any) -> AlertingSettings:
    return AlertingSettings.load(None, **sections)


def _refused(**sections: Any) -> str:
    with pytest.raises(SettingsError) as caught:
        _settings(**sections)
    return str(caught.value)


# --------------------------------------------------------------------------- routes


def test_the_first_matching_route_wins_and_unset_fields_come_from_the_default() -> None:
    routing = _settings(routing=ROUTING).routing
    med = routing.route_for("medical_report")
    assert med == RouteInfo(
        owner="Team Med",
        slack_mention="S0MEDTEAM",
        runbook_url="https://runbooks.example.com/med",
        jira_project="MED",
        jira_component="Ingest",
        jira_assignee="oncall",
    )
    assert routing.route_for("lab_result").jira_project == "MED"
    invoice = routing.route_for("invoice")
    assert (invoice.owner, invoice.runbook_url) == (
        "platform",
        "https://runbooks.example.com/drift",
    )
    assert invoice.jira_project is None  # jira.project
    # Patterns are case-sensitive and whole: not a prefix, not another case.
    assert routing.route_for("Medical_report").owner == "platform"
    assert routing.route_for("lab_results").owner == "platform"


@pytest.mark.parametrize(
    ("doc_type", "severity", "channel"),
    [
        ("medical_report", "warning", "#med-alerts"),
        ("medical_report", "critical", "#ops-pager"),  # the severity channel still applies
        ("invoice", "warning", "#billing"),
        ("invoice", "critical", "#billing-pager"),  # unless the route says otherwise
        ("invoice_legacy", "critical", "#legacy"),  # the exact type's channel wins over all
        ("receipt", "warning", "#drift-alerts"),
        ("receipt", "critical", "#ops-pager"),
    ],
)
def test_channels_keep_the_old_rules_and_add_the_routes(
    doc_type: str, severity: Any, channel: str
) -> None:
    assert _settings(routing=ROUTING).routing.channel_for(doc_type, severity) == channel


def test_jira_assignee_on_acknowledgement_prefers_the_mapped_slack_user() -> None:
    routing = _settings(routing={**ROUTING, "jira_users": {"U0ANA": "ana@example.com"}}).routing
    assert routing.jira_assignee("medical_report", "U0ANA") == "ana@example.com"
    assert routing.jira_assignee("medical_report", "U0BO") == "oncall"
    assert routing.jira_assignee("invoice", "U0BO") is None
    assert routing.jira_assignee("invoice", "U0ANA") == "ana@example.com"


@pytest.mark.parametrize(
    ("route", "field", "problem"),
    [
        ({"doc_types": []}, "routing.routes.0.doc_types", "at least 1 item"),
        ({"doc_types": ["a"], "slack_mention": "<!channel>"}, "slack_mention", "not a Slack"),
        ({"doc_types": ["a"], "channel": "Not A Channel"}, "routing.routes.0.channel", "channel"),
        ({"doc_types": ["a"], "jira_project": "med"}, "jira_project", "project key"),
        ({"doc_types": ["a"], "runbook_url": "javascript:alert(1)"}, "runbook_url", "http"),
        ({"doc_types": ["a"], "owner": "two\nlines"}, "routing.routes.0.owner", "one line"),
        ({"doc_types": ["a"], "colour": "red"}, "routing.routes.0.colour", "Extra inputs"),
    ],
)
def test_bad_routes_are_refused_naming_the_field(
    route: dict[str, Any], field: str, problem: str
) -> None:
    message = _refused(routing={"routes": [route]})
    assert field in message
    assert problem in message


def test_a_jira_user_map_with_a_bad_slack_id_is_refused() -> None:
    message = _refused(routing={"jira_users": {"ana": "ana@example.com"}})
    assert "routing.jira_users" in message
    assert "'ana' is not a Slack user id" in message


# --------------------------------------------------------------------------- defaults


def _docs_view() -> tuple[IncidentView, list[WindowPoint]]:
    """The incident docs/alerting.md shows under "What people see"."""
    window = WindowAggregate(
        doc_type="medical_report",
        window_start_ms=1_767_621_720_000,
        window_end_ms=1_767_621_780_000,
        request_count=132,
        mean_drift=0.76,
        p95_drift=0.83,
    )
    reasons = [
        Reason(
            code="above_threshold",
            message="mean drift 0.760 above threshold 0.710 (132 requests)",
        ),
        Reason(
            code="zero_anchors",
            message="31% of requests had no anchors (drift stuck at 0.0): documents without "
            "anchor markers",
        ),
    ]
    incident = IncidentView(
        incident_id="i1-ccc1734c5922d32796e718b5a346ce7b",
        doc_type="medical_report",
        severity="warning",
        state="open",
        opened_at_ms=1_767_621_780_000,
        resolved_at_ms=None,
        window=window,
        threshold=0.71,
        baseline_version="b-20260104",
        reasons=reasons,
        peak_mean_drift=0.76,
        dashboard_url="https://grafana.example.com/d/anchorwatch?var-doc_type=medical_report",
    )
    history = [
        WindowPoint(1_767_621_600_000 + i * 60_000, 1_767_621_660_000 + i * 60_000, d, 0.71, n)
        for i, (d, n) in enumerate([(0.63, 130), (0.74, 131), (0.76, 132)])
    ]
    return incident, history


DOCS_DESCRIPTION = r"""*Drift alert* for document type *medical\_report*: severity *WARNING*, open since 2026-01-05 14:03 UTC.

Mean drift *0.760* against threshold *0.710* (baseline b\-20260104) over 132 requests in 2026-01-05 14:02–14:03 UTC.

h4. Windows
||Window (UTC)||Requests||Mean drift||Threshold||
|2026-01-05 14:00–14:01|130|0.630|0.710|
|2026-01-05 14:01–14:02|131|0.740 (!)|0.710|
|2026-01-05 14:02–14:03|132|0.760 (!)|0.710|

h4. Evidence
* Peak mean drift: 0.760
* Threshold: 0.710
* Compared with: baseline b\-20260104
* p95 drift in the latest window: 0.830
* Incident: aw\-11cbd206b4d9 (id i1\-ccc1734c5922d32796e718b5a346ce7b)

h4. Diagnoses
* *above\_threshold*: mean drift 0.760 above threshold 0.710 \(132 requests\)
* *zero\_anchors*: 31\% of requests had no anchors \(drift stuck at 0.0\): documents without anchor markers

[Dashboard|https://grafana.example.com/d/anchorwatch?var-doc_type=medical_report]

_Opened by anchorwatch. Updates arrive as comments; the ticket is transitioned when the drift is back to normal._"""  # noqa: E501


def test_without_templates_or_routes_the_texts_are_the_documented_ones() -> None:
    incident, history = _docs_view()
    assert jira_description(incident, history) == DOCS_DESCRIPTION
    assert jira_summary(incident) == "[URGENT] Drift Alert: medical_report - Score 0.760"
    parent = ParentStyle.of(_settings().slack, _settings().routing).parent(incident)
    assert parent.text == (
        "[WARNING] Drift alert: `medical_report` mean drift 0.760 vs threshold 0.710 (open)"
    )
    assert parent.blocks[0]["text"]["text"] == (
        ":rotating_light: *Drift alert* `medical_report` · *WARNING*"
    )
    assert parent.blocks[-1]["elements"][0]["text"] == (
        "incident `aw-11cbd206b4d9` · <https://grafana.example.com/d/anchorwatch?var-doc_type="
        "medical_report|dashboard>"
    )


# --------------------------------------------------------------------------- routes shown


def test_owner_mention_and_runbook_show_in_the_slack_parent_and_the_jira_description() -> None:
    incident, history = _docs_view()
    route = _settings(routing=ROUTING).routing.route_for("medical_report")
    parent = slack_parent(incident, route=route)
    context = parent.blocks[-1]["elements"][0]["text"]
    assert context.endswith(
        " · owner Team Med <!subteam^S0MEDTEAM> · <https://runbooks.example.com/med|runbook>"
    )
    description = jira_description(incident, history, route=route)
    assert description.splitlines()[2] == (
        "Owner: *Team Med* · [Runbook|https://runbooks.example.com/med]"
    )
    # Without an owner, the runbook alone.
    alone = jira_description(incident, history, route=RouteInfo(runbook_url="https://r.example/x"))
    assert alone.splitlines()[2] == "[Runbook|https://r.example/x]"


def test_a_hostile_owner_is_escaped_like_a_doc_type() -> None:
    incident, _ = _docs_view()
    route = RouteInfo(owner="<!channel> *ops* [x|javascript:y]", runbook_url="https://r/<x>|y")
    parent = slack_parent(incident, route=route)
    assert_slack_safe({"text": parent.text, "blocks": parent.blocks})
    assert "<!channel>" not in orjson.dumps(parent.blocks).decode()
    assert "<https://r/%3Cx%3E%7Cy|runbook>" in orjson.dumps(parent.blocks).decode()
    description = jira_description(incident, route=route)
    assert description.splitlines()[2] == (
        r"Owner: *<\!channel> \*ops\* \[x\|javascript&#58;y\]* · [Runbook|https://r/%3Cx%3E%7Cy]"
    )


# --------------------------------------------------------------------------- templates


CUSTOM = {
    "slack": {
        "text_template": "{{ severity_upper }} {{ doc_type }} owned by {{ owner or 'nobody' }}"
        "{% if owner_mention %} {{ owner_mention }}{% endif %}",
        "headline_template": ":fire: {{ doc_type }} drift {{ mean_drift }} · "
        "{% if runbook_url %}<{{ runbook_url }}|runbook>{% endif %}",
    },
    "jira": {
        "summary_template": "{{ severity_upper }} drift in {{ doc_type }} ({{ owner }})",
        "description_template": "h3. {{ doc_type }}\n{% for r in reasons %}* {{ r.code }}\n"
        "{% endfor %}Runbook: {{ runbook_url }}",
    },
}


def test_custom_templates_render_with_the_route() -> None:
    s = _settings(routing=ROUTING, **CUSTOM)
    incident, history = _docs_view()
    route = s.routing.route_for("medical_report")
    parent = ParentStyle.of(s.slack, s.routing).parent(incident)
    assert parent.text == "WARNING `medical_report` owned by Team Med <!subteam^S0MEDTEAM>"
    assert parent.blocks[0]["text"]["text"] == (
        ":fire: `medical_report` drift 0.760 · <https://runbooks.example.com/med|runbook>"
    )
    assert len(parent.blocks) == 4  # Block Kit structure kept: head, fields, reasons, context
    summary = jira_summary(incident, s.jira.summary_template, route)
    assert summary == "WARNING drift in medical_report (Team Med)"
    description = jira_description(
        incident, history, route=route, template=s.jira.description_template
    )
    assert description == (
        "h3. medical\\_report\n* above\\_threshold\n* zero\\_anchors\n"
        "Runbook: https://runbooks.example.com/med"
    )


HOSTILE_TYPE = "<!channel> *bold* [link|http://evil] {color:red}x{color} @here `tick` {{ 7*7 }}"


def test_a_doc_type_cannot_inject_markup_through_a_template() -> None:
    s = _settings(routing=ROUTING, **CUSTOM)
    incident, _ = _docs_view()
    hostile = IncidentView(**{**incident.__dict__, "doc_type": HOSTILE_TYPE})
    parent = ParentStyle.of(s.slack, s.routing).parent(hostile)
    assert_slack_safe({"text": parent.text, "blocks": parent.blocks})
    # Inline code, entities, @here broken, backticks swapped; a doc type is never a template.
    assert parent.text == (
        "WARNING `&lt;!channel&gt; *bold* [link|http://evil] {color:red}x{color} @\u2060here "
        "\u02cbtick\u02cb {{ 7*7 }}` owned by platform"
    )
    description = jira_description(hostile, template=s.jira.description_template)
    assert description.splitlines()[0] == (
        r"h3. <\!channel> \*bold\* \[link\|http&#58;//evil\] \{color&#58;red\}x\{color\} "
        r"\@here `tick` \{\{ 7\*7 \}\}"
    )
    summary = jira_summary(hostile, s.jira.summary_template, s.routing.route_for(HOSTILE_TYPE))
    assert summary == f"WARNING drift in {HOSTILE_TYPE} (platform)"  # plain, shown as it is


@pytest.mark.parametrize(
    ("section", "field", "template", "problem"),
    [
        ("jira", "description_template", "{{ foo }}", "'foo' is undefined"),
        ("jira", "summary_template", "{{ doc_type }} {{ score }}", "'score' is undefined"),
        ("slack", "text_template", "{% if owner %}never closed", "Unexpected end of template"),
        ("slack", "headline_template", "{{ doc_type | nosuchfilter }}", "nosuchfilter"),
        ("jira", "description_template", "{{ reasons[0].nope }}", "has no attribute 'nope'"),
        ("jira", "description_template", "{{ 1 / 0 }}", "ZeroDivisionError"),
    ],
)
def test_a_template_that_would_fail_is_refused_at_load_naming_the_field(
    section: str, field: str, template: str, problem: str
) -> None:
    message = _refused(**{section: {field: template}})
    assert f"{section}.{field}" in message
    assert problem in message


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__ }}",
        "{{ doc_type.__class__.__mro__[1].__subclasses__() }}",
        "{{ reasons.__len__() }}",
        "{% for w in windows %}{{ w.__class__ }}{% endfor %}",
    ],
)
def test_the_sandbox_refuses_attribute_access_at_load(template: str) -> None:
    message = _refused(jira={"description_template": template})
    assert "jira.description_template" in message
    assert "unsafe" in message


def test_the_older_summary_placeholders_still_work() -> None:
    s = _settings(jira={"summary_template": "{severity_upper}: {doc_type} {incident_label}"})
    incident, _ = _docs_view()
    assert jira_summary(incident, s.jira.summary_template) == (
        "WARNING: medical_report aw-11cbd206b4d9"
    )
    message = _refused(jira={"summary_template": "{doc_type} {owner}"})
    assert "jira.summary_template" in message
    assert "unknown placeholder" in message


def test_a_custom_summary_is_one_line_within_255_characters() -> None:
    template = "{{ doc_type }}\n{% for i in range(300) %}x{% endfor %}"
    s = _settings(jira={"summary_template": template})
    summary = jira_summary(view("a\nb"), s.jira.summary_template)
    assert "\n" not in summary
    assert summary.startswith("a\ufffdb x")  # the control character replaced, as today
    assert len(summary) == 255
    assert summary.endswith("…")
