"""Message rendering and escaping: hostile doc types never notify, format, break JQL or
overflow Jira's limits."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anchorwatch.alerting.fakes.jql import JqlError, parse_jql
from anchorwatch.alerting.integrations.jira.render import (
    DEFAULT_SUMMARY_TEMPLATE,
    check_summary_template,
    doc_type_label,
    jira_description,
    jira_escape,
    jira_labels,
    jira_summary,
    jql_quote,
)
from anchorwatch.alerting.integrations.slack.chart import render_chart
from anchorwatch.alerting.integrations.slack.render import (
    slack_escape,
    slack_literal,
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.render import (
    WindowPoint,
    incident_label,
    safe_url,
    truncate,
)
from anchorwatch.contracts import Reason
from tests.support.rendering import HOSTILE, assert_slack_safe, view


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_slack_messages_never_carry_control_sequences(doc_type: str) -> None:
    v = view(doc_type)
    for message in (slack_parent(v), slack_update(v), slack_resolved(v)):
        assert_slack_safe({"text": message.text, "blocks": message.blocks})
        # The doc type is shown as one inline-code span that cannot be closed early.
        literal = slack_literal(doc_type)
        assert literal.count("`") == 2
        assert literal in message.text


def test_slack_escape_and_literal() -> None:
    assert slack_escape("a & <b> <!here>") == "a &amp; &lt;b&gt; &lt;!here&gt;"
    assert slack_escape("@here") == "@\u2060here"
    assert slack_literal("x`y") == "`x\u02cby`"
    assert slack_literal("c" * 300).endswith("…`")
    assert len(slack_literal("c" * 300)) <= 122


def test_slack_blocks_respect_block_kit_limits() -> None:
    reasons = [Reason(code=f"r{i}", message="m" * 2000) for i in range(20)]
    message = slack_parent(view("c" * 512, reasons=reasons))
    assert len(message.blocks) <= 50
    for block in message.blocks:
        if "text" in block:
            assert len(block["text"]["text"]) <= 3000
        for f in block.get("fields", []):
            assert len(f["text"]) <= 2000


def test_slack_blocks_are_plain_block_kit_json() -> None:
    """What goes on the wire: section, fields and context blocks of mrkdwn text, nothing
    more (no block ids, no verbatim flags), as the hand-written dicts were."""

    def mrkdwn(text: str) -> dict[str, str]:
        return {"type": "mrkdwn", "text": text}

    reason = mrkdwn("• `above_critical` mean drift 0.912 above 0.900")
    assert slack_parent(view()).blocks == [
        {
            "type": "section",
            "text": mrkdwn(":rotating_light: *Drift alert* `purchase_contract` · *CRITICAL*"),
        },
        {
            "type": "section",
            "fields": [
                mrkdwn("*Mean drift*\n0.912 (threshold 0.850)"),
                mrkdwn("*Requests*\n120 in 2026-01-05 14:00–14:01 UTC"),
                mrkdwn("*Peak mean drift*\n0.930"),
                mrkdwn("*State*\nopen since 2026-01-05 14:01 UTC"),
                mrkdwn("*Compared with*\nbaseline b-1"),
            ],
        },
        {"type": "section", "text": reason},
        {
            "type": "context",
            "elements": [
                mrkdwn(
                    "incident `aw-186608b239fa` · "
                    "<https://grafana.example.com/d/aw?var-doc_type=x|dashboard>"
                )
            ],
        },
    ]
    assert slack_update(view(reasons=[])).blocks == [
        {
            "type": "section",
            "text": mrkdwn(
                ":chart_with_upwards_trend: 2026-01-05 14:00–14:01 UTC: mean drift *0.912* "
                "(threshold 0.850, 120 requests) · severity *CRITICAL* · peak 0.930"
            ),
        }
    ]


def test_parent_shows_state_and_dashboard_link() -> None:
    opened = slack_parent(view())
    assert ":rotating_light: *Drift alert* `purchase_contract` · *CRITICAL*" in json.dumps(
        opened.blocks, ensure_ascii=False
    )
    assert "<https://grafana.example.com/d/aw?var-doc_type=x|dashboard>" in json.dumps(
        opened.blocks
    )
    resolved = slack_parent(view(state="resolved", resolved_at_ms=1_767_623_460_000))
    text = json.dumps(resolved.blocks, ensure_ascii=False)
    assert "Drift resolved" in text
    assert "after 30 min" in text


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://g.example/d?x=a|b", "https://g.example/d?x=a%7Cb"),
        ("https://g.example/d?x=<a>", "https://g.example/d?x=%3Ca%3E"),
        ("https://g.example/d?x=[a] b", "https://g.example/d?x=%5Ba%5D%20b"),
        ("javascript:alert(1)", None),
        ("ftp://x.example/a", None),
        ("", None),
        (None, None),
    ],
)
def test_urls_cannot_escape_links(url: str | None, expected: str | None) -> None:
    assert safe_url(url) == expected


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_labels_are_deterministic_spaceless_and_distinct(doc_type: str) -> None:
    labels = jira_labels(view(doc_type))
    assert labels == jira_labels(view(doc_type))
    for label in labels:
        assert label
        assert len(label) <= 255
        assert not any(c.isspace() for c in label)
        assert re.fullmatch(r"[A-Za-z0-9._-]+", label), label
    assert labels[0] == "drift-alert"
    assert labels[2] == incident_label("inc-1")


def test_doc_type_label_is_a_readable_prefix_and_a_hash_of_the_exact_type() -> None:
    assert re.fullmatch(r"doc-purchase_contract-[0-9a-f]{16}", doc_type_label("purchase_contract"))
    a, b = doc_type_label("medical report"), doc_type_label("medical/report")
    assert a.startswith("doc-medical_report-")
    assert b.startswith("doc-medical_report-")
    assert a != b  # the hash of the original keeps them apart
    assert re.fullmatch(r"doc-[0-9a-f]{16}", doc_type_label("日本語"))
    assert len(doc_type_label("x" * 512)) == len("doc-") + 40 + 1 + 16


def test_a_type_that_spells_another_types_label_gets_its_own() -> None:
    # Under a hash-only-when-sanitised scheme "victim_two-658958e2" (clean already, so kept)
    # and "victim two!" (sanitised, hash appended) shared one label.
    assert doc_type_label("victim_two-658958e2") != doc_type_label("victim two!")
    assert doc_type_label("Victim_Two") != doc_type_label("victim_two")


@given(st.text(min_size=1, max_size=60))
def test_no_type_can_take_over_the_label_of_another(doc_type: str) -> None:
    # Whatever a type's label reads as, spelling that text as a doc type yields another label.
    spelled = doc_type_label(doc_type).removeprefix("doc-")
    if spelled != doc_type:
        assert doc_type_label(spelled) != doc_type_label(doc_type)


def test_incident_label_is_fixed_length_hex() -> None:
    for incident_id in ["a", "inc-" + "x" * 190, "日本"]:
        label = incident_label(incident_id)
        assert re.fullmatch(r"aw-[0-9a-f]{12}", label)
    assert incident_label("a") != incident_label("b")


@given(st.text(min_size=1, max_size=80))
def test_jql_quote_round_trips_through_a_strict_jql_parser(value: str) -> None:
    where, _ = parse_jql(f"labels = {jql_quote(value)} AND project = {jql_quote('OPS')}")
    assert where is not None
    assert where[1] == ("cmp", "labels", "=", value)


@pytest.mark.parametrize("word", ["AND", "order", "in", "not", "is", "select"])
def test_unquoted_reserved_words_are_jql_errors_quoted_ones_are_data(word: str) -> None:
    with pytest.raises(JqlError, match="reserved"):
        parse_jql(f"labels = {word}")
    where, _ = parse_jql(f"labels = {jql_quote(word)}")
    assert where == ("cmp", "labels", "=", word)


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_summary_is_one_line_within_255_utf16_units(doc_type: str) -> None:
    summary = jira_summary(view((doc_type * 3)[:512]))
    assert "\n" not in summary
    assert len(summary) + sum(1 for c in summary if ord(c) > 0xFFFF) <= 255
    assert summary.startswith("[URGENT] Drift Alert: ")


def test_summary_template_fields_and_validation() -> None:
    assert jira_summary(view()) == "[URGENT] Drift Alert: purchase_contract - Score 0.912"
    custom = "[{severity_upper}] {doc_type} {avg_drift}>{threshold} ({incident_label})"
    assert check_summary_template(custom) == custom
    assert jira_summary(view(), custom) == (
        f"[CRITICAL] purchase_contract 0.912>0.850 ({incident_label('inc-1')})"
    )
    assert check_summary_template(DEFAULT_SUMMARY_TEMPLATE)
    with pytest.raises(ValueError, match="unknown placeholder"):
        check_summary_template("{doc_type} {score}")
    with pytest.raises(ValueError, match="unknown placeholder"):
        check_summary_template("{} {doc_type}")
    with pytest.raises(ValueError, match="format string"):
        check_summary_template("{doc_type")


def test_truncate_counts_utf16_units_and_marks_the_cut() -> None:
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 3) == "ab…"
    assert truncate("🚨" * 10, 5) == "🚨🚨…"  # each emoji is two UTF-16 units


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_jira_description_escapes_wiki_markup(doc_type: str) -> None:
    text = jira_description(view(doc_type))
    first = text.splitlines()[0]
    for dangerous in ("{code}", "[~admin]", "|table|", "!image.png!"):
        assert dangerous not in first
    assert "\u202e" not in text


def test_jira_escape_and_description_limits() -> None:
    assert jira_escape("[~admin] {code} *x* a|b") == r"\[\~admin\] \{code\} \*x\* a\|b"
    assert jira_escape("two\nlines") == "two lines"
    reasons = [Reason(code="r", message="m" * 2000) for _ in range(40)]
    history = [
        WindowPoint(1_767_621_600_000 + i * 60_000, 1_767_621_660_000 + i * 60_000, 0.9, 0.85, 9)
        for i in range(30)
    ]
    text = jira_description(view(reasons=reasons), history)
    assert len(text) <= 32_767
    assert text.count("|2026-01-05") == 10  # the last ten windows, not all thirty
    assert "[Dashboard|https://grafana.example.com/d/aw?var-doc_type=x]" in jira_description(view())


def test_chart_is_a_png_and_survives_hostile_titles() -> None:
    points = [
        WindowPoint(1_767_621_600_000 + i * 60_000, 1_767_621_660_000 + i * 60_000,
                    0.5 + 0.015 * i, 0.85, 100)
        for i in range(30)
    ]  # fmt: skip
    for title in ["$\\frac{1}{0}$ <!channel>", "日本語 🚨", "x" * 500]:
        png = render_chart(points, title=title)
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert 5_000 < len(png) < 200_000
    with pytest.raises(ValueError, match="points"):
        render_chart([], title="x")
