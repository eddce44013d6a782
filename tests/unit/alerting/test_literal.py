"""Hostile doc types show as their literal text in Jira wiki markup and in Slack mrkdwn, as
the local Jira and Slack received them through the real clients.

``jira_shown`` reads wiki markup the way Jira's renderer does for inline text, from Jira's
own rules rather than from our escaper: a backslash escapes only ``-#*_+?^~|%{}[]()!@``
(``\\\\`` is a line break), character references (``&#92;``, ``&amp;``) show as the
character, and any other markup character left bare would format, link or draw an icon
(``:`` only when no space follows it: ``http:``, ``mailto:``, ``:P``).
"""

from __future__ import annotations

import html
import re
from dataclasses import replace
from typing import Any

import pytest
import requests
from slack_sdk.web import WebClient

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.integrations.jira.notifier import JiraNotifier, connect
from anchorwatch.alerting.integrations.jira.render import jira_escape, jira_summary
from anchorwatch.alerting.integrations.slack.chart import chart_alt_text, chart_title
from anchorwatch.alerting.integrations.slack.notifier import SlackNotifier
from anchorwatch.alerting.integrations.slack.render import (
    slack_parent,
    slack_resolved,
    slack_update,
)
from anchorwatch.alerting.notify import ManualClock, RetryPolicy
from anchorwatch.alerting.render import IncidentView, WindowPoint
from anchorwatch.alerting.settings import JiraSection, RoutingSection
from anchorwatch.contracts import Reason
from tests.support.alerting import JIRA_TOKEN, JIRA_USER
from tests.support.rendering import LITERAL, view

pytestmark = pytest.mark.local_jira(credentials=(JIRA_USER, JIRA_TOKEN))

#: Jira's BackslashEscapeRendererComponent: the characters a backslash escapes.
_ESCAPED_BY_BACKSLASH = set("-#*_+?^~|%{}[]()!@")
#: Characters that are markup when bare (the escapable ones, and ``:`` of ``http://`` and
#: of ``:P``/``:D``); a bare backslash is an escape or a line break.
_MARKUP = _ESCAPED_BY_BACKSLASH | {":", "\\"}
_REFERENCE = re.compile(r"&(#[0-9]+|#x[0-9a-fA-F]+|[A-Za-z]+);")


def jira_shown(markup: str) -> str:
    """The text Jira shows for inline wiki markup; AssertionError where it would not be
    plain text."""
    out, i = [], 0
    while i < len(markup):
        c = markup[i]
        if c == "\\":
            nxt = markup[i + 1 : i + 2]
            assert nxt in _ESCAPED_BY_BACKSLASH, f"bare backslash before {nxt!r} in {markup!r}"
            out.append(nxt)
            i += 2
        elif c == "&" and (m := _REFERENCE.match(markup, i)):
            out.append(html.unescape(m.group(0)))
            i = m.end()
        else:
            bare_colon_ok = c == ":" and markup[i + 1 : i + 2].isspace()
            assert c not in _MARKUP or bare_colon_ok, f"bare {c!r} at {i} in {markup!r}"
            out.append(c)
            i += 1
    return "".join(out)


def test_the_reader_refuses_what_jira_would_format() -> None:
    for markup in ["a\\\\b", "*b*", "http://x", ":)", ":P", "end:", "\\a", "x{y"]:
        with pytest.raises(AssertionError):
            jira_shown(markup)
    assert jira_shown("a\\*b&#92;&#58;&amp;") == "a*b\\:&"
    assert jira_shown("reason: text") == "reason: text"


@pytest.mark.parametrize("doc_type", LITERAL)
def test_jira_escape_shows_the_literal_text(doc_type: str) -> None:
    assert jira_shown(jira_escape(doc_type)) == doc_type


@pytest.mark.parametrize("doc_type", LITERAL)
def test_jira_summary_is_the_plain_text(doc_type: str) -> None:
    # The summary is plain text in Jira (not wiki markup): the doc type goes in as it is.
    assert jira_summary(view(doc_type), "{doc_type}") == " ".join(doc_type.split())


# --------------------------------------------------------------------------- through Jira


def _hostile_view(doc_type: str, **changes: Any) -> IncidentView:
    reason = Reason.model_construct(code="above_threshold", message=f"{doc_type} drifted")
    return replace(view(doc_type), reasons=[reason], **changes)


_DESCRIPTION_HEAD = re.compile(r"^\*Drift alert\* for document type \*(.*)\*: severity ")
_REASON_LINE = re.compile(r"^\* \*above\\_threshold\*: (.*)$", re.MULTILINE)


@pytest.mark.parametrize("doc_type", LITERAL)
def test_the_ticket_jira_received_shows_the_literal_doc_type(
    jira: LocalJira, doc_type: str
) -> None:
    clock = ManualClock(start=1_000_000.0)
    settings = JiraSection(enabled=True, url=jira.url, user=JIRA_USER, api_token=JIRA_TOKEN)
    retry = RetryPolicy(sleep=clock.sleep, clock=clock, rand=lambda: 0.0)
    n = JiraNotifier(lambda: connect(settings), settings, retry, clock_ms=clock.ms)
    first = n.open_or_reopen(_hostile_view(doc_type))
    n.comment(first.key, _hostile_view(doc_type, state="updated"), last_comment_ms=0)
    n.resolve(first.key, _hostile_view(doc_type, state="resolved", resolved_at_ms=1))
    (issue,) = requests.get(f"{jira.url}/_local/issues", timeout=5).json()["issues"]

    description = issue["fields"]["description"]
    update, _resolution = issue["comments"]
    head = _DESCRIPTION_HEAD.match(description)
    assert head is not None, description
    assert jira_shown(head.group(1)) == doc_type
    (reason,) = _REASON_LINE.findall(description)
    assert jira_shown(reason) == f"{doc_type} drifted"
    (reason,) = _REASON_LINE.findall(update)
    assert jira_shown(reason) == f"{doc_type} drifted"
    assert " ".join(doc_type.split()) in issue["fields"]["summary"]


# --------------------------------------------------------------------------- through Slack

_CODE_SPAN = re.compile(r"`([^`]*)`")


def slack_shown(span: str) -> str:
    """The text Slack shows for mrkdwn inside an inline-code span: only its three entities
    are decoded; a raw ``<`` or ``>`` would be a control sequence."""
    assert "<" not in span, span
    assert ">" not in span, span
    return span.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _mrkdwn_texts(message: dict[str, Any]) -> list[str]:
    texts = [str(message.get("text") or "")]
    for block in message.get("blocks") or []:
        for part in [block.get("text"), *(block.get("fields") or [])]:
            if part:
                texts.append(part["text"])
        for element in block.get("elements") or []:
            texts.append(element.get("text", ""))
    return texts


@pytest.mark.parametrize("doc_type", LITERAL)
def test_what_slack_received_shows_the_literal_doc_type(doc_type: str) -> None:
    clock = ManualClock()
    with LocalSlack(token="xoxb-t") as slack:
        client = WebClient(token="xoxb-t", base_url=slack.api_url, retry_handlers=[])
        n = SlackNotifier(
            client,
            RoutingSection(default_channel="#drift-alerts"),
            RetryPolicy(sleep=clock.sleep, clock=clock, rand=lambda: 0.0),
            chart_renderer=lambda points, title: b"\x89PNG\r\n\x1a\n",
        )
        incident = _hostile_view(doc_type)
        ref = n.open(incident)
        points = [WindowPoint(0, 60_000, 0.9, 0.85, 10)]
        n.update(ref, replace(incident, state="updated"), points)
        n.resolve(ref, replace(incident, state="resolved", resolved_at_ms=1))
        messages = requests.get(f"{slack.url}/_local/messages", timeout=5).json()["messages"]
        (upload,) = requests.get(f"{slack.url}/_local/files", timeout=5).json()["files"]

    shown = 0
    for message in [*messages, *(e for m in messages for e in m.get("edits", []))]:
        for text in _mrkdwn_texts(message):
            # Outside code spans, our own link is the only control sequence.
            outside = re.sub(r"<https://[^<>|\s]+\|dashboard>", "", _CODE_SPAN.sub("", text))
            assert "<" not in outside, text
            assert ">" not in outside, text
            for span in _CODE_SPAN.findall(text):
                if slack_shown(span) == doc_type:
                    shown += 1
    assert shown >= 4  # the parent, its fallback text, the update and resolution texts
    # The chart's title and alt text are plain text (never parsed as mrkdwn): literal.
    assert upload["title"] == chart_title(incident) == f"Drift of {doc_type} vs threshold"
    assert doc_type in chart_alt_text(incident, points)
    assert re.fullmatch(r"drift-aw-[0-9a-f]{12}-0\.png", upload["name"])


@pytest.mark.parametrize("doc_type", LITERAL)
def test_slack_renderers_keep_the_doc_type_in_one_literal_span(doc_type: str) -> None:
    v = _hostile_view(doc_type)
    for message in (slack_parent(v), slack_update(v), slack_resolved(v)):
        spans = [slack_shown(s) for s in _CODE_SPAN.findall(message.text)]
        assert doc_type in spans, message.text
