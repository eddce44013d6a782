"""The three kinds of incident as people and receivers see them (``IncidentView.kind``): a
data-quality group ("Data-quality fault: <code> across N doc types", its types listed and
escaped as doc types are, bounded) and the watchdog's notice ("anchorwatch cannot see N doc
types: ...", its signals and what to check), neither with drift figures or a drift chart;
in Slack (blocks and text), Jira (summary, description, comments), PagerDuty and the
webhook; the templates' ``kind``; a drift incident's payload as it was."""

from __future__ import annotations

import re
from dataclasses import replace

import orjson
import pytest

from anchorwatch.alerting.grouping import group_view, new_group, with_member
from anchorwatch.alerting.integrations.jira.render import (
    jira_description,
    jira_escape,
    jira_resolved_comment,
    jira_summary,
    jira_update_comment,
)
from anchorwatch.alerting.integrations.pagerduty import pagerduty_event
from anchorwatch.alerting.integrations.slack.render import (
    SlackMessage,
    check_slack_template,
    slack_literal,
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.integrations.webhook import alertmanager_body
from anchorwatch.alerting.payload import view_from_json, view_to_json
from anchorwatch.alerting.render import IncidentView, truncate
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import IncidentRow
from anchorwatch.alerting.templates import SAMPLES
from anchorwatch.contracts import Reason
from tests.support.alerting import T0
from tests.support.rendering import HOSTILE, assert_slack_safe, view

TYPES = [f"form_{i}" for i in range(1, 7)]
#: What only a drift incident shows.
DRIFT_WORDS = re.compile(r"mean drift|threshold|peak|drift alert|drift resolved", re.I)


def _member(doc_type: str, i: int) -> IncidentRow:
    return IncidentRow(
        incident_id=f"i-{i}",
        doc_type=doc_type,
        rule="drift",
        state="open",
        severity="warning",
        opened_at_ms=T0 + i,
        resolved_at_ms=None,
        record={"peak_mean_drift": 0.9, "threshold": 0.85},
        next_seq=2,
        last_update_window_ms=T0,
        updated_ms=T0,
        quality_code="snapshot_disabled",
    )


def group(types: list[str], kind: str = "opened", recovered: int = -1) -> IncidentView:
    """The group incident of ``types`` (the one at ``recovered`` recovered) as the engine
    makes it."""
    members = [_member(d, i) for i, d in enumerate(types)]
    row = new_group("snapshot_disabled", members, T0)
    if recovered >= 0:
        row = with_member(row, members[recovered], "resolved", T0 + 60_000)
    note = f"recovered: {types[recovered]}" if recovered >= 0 else f"{len(types)} doc types"
    return group_view(row, kind, None, note)


def notice(types: dict[str, str], state: str = "open") -> IncidentView:
    """The watchdog's notice (``watchdog_post.py`` builds it so)."""
    return replace(
        view("anchorwatch:watchdog"),
        incident_id="w1-notice",
        state=state,  # type: ignore[arg-type]
        resolved_at_ms=T0 + 600_000 if state == "resolved" else None,
        opened_at_ms=T0,
        kind="blind",
        members=tuple(sorted(types.items())),
        signals=tuple(dict.fromkeys(types.values())),
        baseline_version=None,
        reasons=[Reason(code="no_verdicts", message="snapshots keep arriving, no verdicts")],
    )


def _all_text(message: SlackMessage) -> str:
    return message.text + orjson.dumps(message.blocks).decode()


# --------------------------------------------------------------------------- Slack


def test_a_group_in_slack_is_a_data_quality_fault_listing_its_types() -> None:
    v = group(TYPES, recovered=2)
    parent = slack_parent(v, buttons=True)
    assert (
        parent.text == "[WARNING] Data-quality fault: `snapshot_disabled` across 6 doc types (open)"
    )
    head = parent.blocks[0]["text"]["text"]
    assert head == (
        ":rotating_light: *Data-quality fault:* `snapshot_disabled` across 6 doc types · *WARNING*"
    )
    listing = parent.blocks[2]["text"]["text"]
    open_ = ", ".join(f"`{d}`" for d in TYPES if d != "form_3")
    assert listing == f"*Open* (5): {open_}\n*Recovered* (1): `form_3`"
    assert "*Doc types*\\n5 open, 1 recovered" in orjson.dumps(parent.blocks).decode()
    assert not DRIFT_WORDS.search(_all_text(parent))
    assert_slack_safe(parent.blocks)

    update = slack_update(replace(v, state="updated"))
    assert update.text == "Update `snapshot_disabled` across 6 doc types: recovered: form_3"
    assert not DRIFT_WORDS.search(_all_text(update))
    resolved = slack_resolved(replace(v, state="resolved", resolved_at_ms=T0 + 600_000))
    assert resolved.text == "Resolved: data-quality fault `snapshot_disabled` across 6 doc types"
    assert not DRIFT_WORDS.search(_all_text(resolved))
    done = slack_parent(replace(v, state="resolved", resolved_at_ms=T0 + 600_000))
    assert done.text.startswith("[WARNING] Data-quality fault resolved: `snapshot_disabled`")


def test_the_notice_in_slack_names_the_blind_types_the_signal_and_what_to_check() -> None:
    v = notice({"invoice": "no_verdicts", "receipt": "no_verdicts", "x": "consumer_stalled"})
    parent = slack_parent(v)
    assert (
        parent.text
        == "[CRITICAL] anchorwatch cannot see 3 doc types: `invoice`, `receipt`, `x` (open)"
    )
    blocks = orjson.dumps(parent.blocks).decode()
    assert "*Signal*\\nno verdicts, consumer stalled" in blocks
    for check in ("drift job", "consumer group's lag", "watermark"):
        assert check in blocks
    assert "*no verdicts* (2): `invoice`, `receipt`\\n*consumer stalled* (1): `x`" in blocks
    assert not DRIFT_WORDS.search(_all_text(parent))
    assert_slack_safe(parent.blocks)

    update = slack_update(replace(v, state="updated"))
    assert update.text == "Update: anchorwatch cannot see 3 doc types: `invoice`, `receipt`, `x`"
    resolved = replace(v, state="resolved", resolved_at_ms=T0 + 600_000)
    assert slack_resolved(resolved).text == "Resolved: anchorwatch sees 3 doc types again"
    assert slack_parent(resolved).text.startswith("[CRITICAL] anchorwatch sees again 3 doc types")
    for message in (update, slack_resolved(resolved)):
        assert not DRIFT_WORDS.search(_all_text(message))


def test_hostile_doc_types_in_a_group_stay_escaped_as_doc_types_are() -> None:
    v = group(HOSTILE)
    parent = slack_parent(v)
    assert_slack_safe(parent.blocks)
    listing = parent.blocks[2]["text"]["text"]
    shown = [d for d in HOSTILE if slack_literal(d) in listing]
    more = re.search(r" \(\+(\d+) more\)$", listing.split("\n")[0])
    assert len(shown) + (int(more.group(1)) if more else 0) == len(HOSTILE)
    assert shown[:5] == HOSTILE[:5]  # "<!channel>", "<!here> please", "@here look", ...
    assert "<!channel>" not in _all_text(parent)

    description = jira_description(v)
    for doc in HOSTILE:
        assert jira_escape(truncate(doc, 300)) in description
    assert "{code}[~admin]" not in description
    assert "<!channel>" not in jira_summary(v)  # only the code and the count


def test_a_long_list_of_types_is_bounded_and_counted() -> None:
    types = [f"type_{i:04d}_{'y' * 40}" for i in range(2_000)]
    v = group(types)
    parent = slack_parent(v)
    listing = parent.blocks[2]["text"]["text"]
    assert len(listing) <= 3_000
    shown = listing.count("`") // 2
    assert listing.endswith(f" (+{2_000 - shown} more)")
    description = jira_description(v)
    assert len(description) < 10_000
    (line,) = [x for x in description.splitlines() if x.startswith("* Open (2000)")]
    assert line.endswith(f" (+{2_000 - line.count(', ') - 1} more)")
    big = notice(dict.fromkeys(types, "no_verdicts"))
    assert all(len(b.get("text", {}).get("text", "")) <= 3_000 for b in slack_parent(big).blocks)
    assert len(jira_summary(big)) <= 255


# --------------------------------------------------------------------------- Jira


def test_a_group_in_jira_is_a_data_quality_fault() -> None:
    v = group(TYPES, recovered=2)
    assert jira_summary(v) == "[URGENT] Data-quality fault: snapshot_disabled across 6 doc types"
    description = jira_description(v)
    assert description.startswith(
        r"*Data-quality fault* *snapshot\_disabled* across *6 doc types*: severity *WARNING*"
    )
    assert r"* Open (5): form\_1, form\_2, form\_4, form\_5, form\_6" in description
    assert r"* Recovered (1): form\_3" in description
    assert "h4. Windows" not in description
    assert not DRIFT_WORDS.search(description)
    comment = jira_update_comment(replace(v, state="updated"))
    assert r"recovered: form\_3" in comment
    assert not DRIFT_WORDS.search(comment)
    resolved = jira_resolved_comment(replace(v, state="resolved", resolved_at_ms=T0 + 600_000))
    assert r"every doc type of the data-quality fault snapshot\_disabled across 6" in resolved


def test_the_notice_in_jira_names_the_types_the_signal_and_what_to_check() -> None:
    v = notice({"invoice": "no_verdicts", "receipt": "watermark_stalled"})
    assert jira_summary(v) == "[URGENT] anchorwatch cannot see 2 doc types: invoice, receipt"
    description = jira_description(v)
    assert description.startswith("*anchorwatch cannot see 2 doc types*: severity *CRITICAL*")
    assert "Signal: *no verdicts, watermark stalled*" in description
    assert "* no verdicts (1): invoice" in description
    assert "* watermark stalled (1): receipt" in description
    assert "h4. What to check" in description
    for check in ("drift job", "consumer group", "watermark"):
        assert check in description
    assert not DRIFT_WORDS.search(description)
    resolved = replace(v, state="resolved", resolved_at_ms=T0 + 600_000)
    assert "anchorwatch sees again 2 doc types" in jira_resolved_comment(resolved)


# --------------------------------------------------------------------------- the rest


def test_pagerduty_and_the_webhook_name_the_kind() -> None:
    settings = AlertingSettings.load()
    g, n = group(TYPES), notice({"invoice": "no_verdicts"})
    trigger = pagerduty_event("trigger", g, "anchorwatch")["payload"]
    assert (
        trigger["summary"] == "[WARNING] Data-quality fault: snapshot_disabled across 6 doc types"
    )
    assert trigger["class"] == "data_quality"
    assert trigger["custom_details"]["kind"] == "group"
    assert "mean_drift" not in trigger["custom_details"]
    trigger = pagerduty_event("trigger", n, "anchorwatch")["payload"]
    assert trigger["summary"] == (
        "[CRITICAL] anchorwatch cannot see 1 doc types (no verdicts): invoice"
    )
    assert trigger["class"] == "anchorwatch_blind"
    assert trigger["custom_details"]["doc_types"] == {"invoice": "no_verdicts"}

    body = alertmanager_body(g, False, settings.webhook)
    labels = body["alerts"][0]["labels"]
    assert (labels["alertname"], labels["kind"]) == ("AnchorDataQualityFault", "group")
    summary = body["commonAnnotations"]["summary"]
    assert summary == "Data-quality fault: snapshot_disabled across 6 doc types (warning)"
    body = alertmanager_body(n, False, settings.webhook)
    assert body["alerts"][0]["labels"]["alertname"] == "AnchorwatchBlind"
    assert "drift job" in body["commonAnnotations"]["description"]
    drift = alertmanager_body(view(), False, settings.webhook)
    assert drift["alerts"][0]["labels"]["alertname"] == "AnchorDrift"
    assert "kind" not in drift["alerts"][0]["labels"]


def test_a_view_of_each_kind_survives_the_outbox_and_a_drift_payload_is_as_before() -> None:
    for v in (group(TYPES, recovered=1), notice({"a": "no_verdicts"})):
        assert view_from_json(orjson.loads(orjson.dumps(view_to_json(v)))) == v
    drift = view_to_json(view())
    assert not {"kind", "code", "members", "signals"} & set(drift)
    assert view_from_json(drift).kind == "drift"


def test_templates_are_checked_against_every_kind_and_can_tell_them_apart() -> None:
    assert {v.kind for v, _ in SAMPLES} == {"drift", "group", "blind"}
    source = (
        "{% if kind == 'drift' %}{{ doc_type }} {{ mean_drift }}{% else %}{{ subject }}{% endif %}"
    )
    assert check_slack_template(source) == source
    parent = slack_parent(group(TYPES), text_template=source)
    assert parent.text == "`snapshot_disabled` across 6 doc types"
    # An older custom template still renders every kind (as it always framed them).
    assert slack_parent(group(TYPES), text_template="{{ doc_type }} {{ mean_drift }}").text
    with pytest.raises(ValueError, match="undefined"):
        check_slack_template("{% if kind == 'group' %}{{ members_typo }}{% endif %}")
