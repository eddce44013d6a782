"""Slack messages of an incident: the parent (edited in place to show the current state), a
thread reply per update, the resolution; Block Kit plus a plain-text fallback, within Slack's
Block Kit limits; the chart's title and alt text. Pure.

The blocks are built with slack_sdk's Block Kit models (``slack_sdk.models.blocks``), whose
``to_dict`` checks the counts and section-text length Slack enforces; the texts are cut here
first, counted in UTF-16 units as Slack counts them (the models count code points and do not
cut). ``SlackMessage.blocks`` holds the dicts that go on the wire.

Untrusted text (doc types, reasons) is escaped for mrkdwn: ``&``, ``<``, ``>`` as entities so
``<!channel>`` is text, bare ``@here``/``@channel`` broken, doc types shown as inline code so
``*``/``_``/``~`` cannot format. The parent's fallback text and headline come from templates
(``templates.py``) given only such escaped values (``slack_variables``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    SectionBlock,
)

from anchorwatch.alerting.render import (
    IncidentView,
    adapted_phrase,
    baseline_phrase,
    clean_text,
    duration,
    incident_label,
    safe_url,
    state_phrase,
    truncate,
    window_span,
)
from anchorwatch.alerting.routing import NO_ROUTE, RouteInfo
from anchorwatch.alerting.templates import check_template, render
from anchorwatch.contracts import Reason

#: Slack's Block Kit limits.
SLACK_SECTION_MAX = 3_000
SLACK_FIELD_MAX = 2_000
SLACK_TEXT_MAX = 40_000
#: The buttons of an open incident's parent (``slack_actions.py`` answers them).
ACK = "anchorwatch_ack"
SILENCE_1H = "anchorwatch_silence_1h"
SILENCE_RESOLVED = "anchorwatch_silence_resolved"
#: The parent's plain-text fallback (also the notification) and its headline block.
DEFAULT_TEXT_TEMPLATE = (
    "[{{ severity_upper }}] {{ title }}: {{ doc_type }} mean drift {{ mean_drift }} "
    "vs threshold {{ threshold }} ({{ state }})"
)
DEFAULT_HEADLINE_TEMPLATE = "{{ icon }} *{{ title }}* {{ doc_type }} · *{{ severity_upper }}*"


@dataclass(frozen=True)
class SlackMessage:
    text: str  # the notification / fallback text
    blocks: list[dict[str, Any]] = field(default_factory=list)


_MENTION = re.compile(r"@(?=(?:channel|here|everyone)\b)", re.IGNORECASE)
_WORD_JOINER = "\u2060"


def slack_escape(text: str) -> str:
    """Text safe for Slack mrkdwn: control sequences (``<!channel>``, ``<@U..>``, links)
    become plain text and bare ``@here``/``@channel``/``@everyone`` cannot notify."""
    escaped = clean_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MENTION.sub("@" + _WORD_JOINER, escaped)


def slack_literal(text: str, limit: int = 120) -> str:
    """Untrusted text shown verbatim as inline code: escaped, backticks swapped for a
    look-alike so the span cannot be closed early, so ``*``, ``_`` and ``~`` never format."""
    return "`" + slack_escape(truncate(text, limit)).replace("`", "\u02cb") + "`"


def slack_link(url: str | None, label: str) -> str | None:
    safe = safe_url(url)
    return f"<{safe}|{slack_escape(label)}>" if safe else None


_STATE_ICON = {
    "open": ":rotating_light:",
    "updated": ":rotating_light:",
    "resolved": ":white_check_mark:",
}


def slack_mention(user_id: str) -> str:
    """A Slack user as Slack shows one (the ids are checked where they come in)."""
    return f"<@{slack_escape(user_id)}>"


def _buttons(view: IncidentView) -> ActionsBlock:
    """Acknowledge (until someone has), Silence 1 h, Silence until resolved; the value is
    the incident id."""
    buttons: list[tuple[str, str, str | None]] = []
    if not view.acked_by:
        buttons.append((ACK, "Acknowledge", "primary"))
    buttons += [
        (SILENCE_1H, "Silence 1 h", None),
        (SILENCE_RESOLVED, "Silence until resolved", None),
    ]
    return ActionsBlock(
        block_id="anchorwatch_actions",
        elements=[
            ButtonElement(text=text, action_id=action, value=view.incident_id, style=style)
            for action, text, style in buttons
        ],
    )


def slack_variables(view: IncidentView, route: RouteInfo = NO_ROUTE) -> dict[str, Any]:
    """What the parent's templates are given: each value already safe in mrkdwn (untrusted
    text escaped, the doc type as inline code), so no template can let it format or notify."""
    w = view.window
    return {
        "doc_type": slack_literal(view.doc_type),
        "severity": view.severity,
        "severity_upper": view.severity.upper(),
        "title": "Drift resolved" if view.state == "resolved" else "Drift alert",
        "icon": _STATE_ICON[view.state],
        "state": "resolved" if view.state == "resolved" else "open",
        "state_phrase": state_phrase(view),
        "mean_drift": f"{w.mean_drift:.3f}",
        "threshold": f"{view.threshold:.3f}",
        "peak_mean_drift": f"{view.peak_mean_drift:.3f}",
        "requests": w.request_count,
        "window": window_span(w),
        "baseline": slack_escape(baseline_phrase(view)),
        "incident_label": incident_label(view.incident_id),
        "owner": slack_escape(truncate(route.owner, 200)) if route.owner else None,
        "owner_mention": route.mention,
        "runbook_url": safe_url(route.runbook_url),
        "dashboard_url": safe_url(view.dashboard_url),
        "acked_by": slack_mention(view.acked_by) if view.acked_by else None,
    }


def check_slack_template(source: str) -> str:
    """The template if it renders against a sample incident (ValueError otherwise)."""
    return check_template(source, slack_variables)


def slack_parent(
    view: IncidentView,
    *,
    buttons: bool = False,
    route: RouteInfo = NO_ROUTE,
    text_template: str = DEFAULT_TEXT_TEMPLATE,
    headline_template: str = DEFAULT_HEADLINE_TEMPLATE,
) -> SlackMessage:
    """The incident's parent message, edited in place to show the current state; with
    ``buttons`` (a signing secret is set) an open one carries the incident's buttons; the
    route's owner and runbook in its context line."""
    w = view.window
    variables = slack_variables(view, route)
    head = render(headline_template, variables).strip() or variables["title"]
    fields = [
        f"*Mean drift*\n{w.mean_drift:.3f} (threshold {view.threshold:.3f})",
        f"*Requests*\n{w.request_count} in {window_span(w)}",
        f"*Peak mean drift*\n{view.peak_mean_drift:.3f}",
        f"*State*\n{state_phrase(view)}",
        f"*Compared with*\n{slack_escape(baseline_phrase(view))}",
    ]
    if (adapted := adapted_phrase(view, slack_literal)) is not None:
        fields.append(f"*Resolution*\n{adapted}")
    blocks: list[Block] = [
        _section(truncate(head, SLACK_SECTION_MAX)),
        SectionBlock(fields=[_mrkdwn(truncate(f, SLACK_FIELD_MAX)) for f in fields]),
    ]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    context = [f"incident {slack_literal(incident_label(view.incident_id))}"]
    if link := slack_link(view.dashboard_url, "dashboard"):
        context.append(link)
    if route.owner or route.mention:
        owner = " ".join(v for v in (variables["owner"], route.mention) if v)
        context.append(f"owner {owner}")
    if link := slack_link(route.runbook_url, "runbook"):
        context.append(link)
    blocks.append(ContextBlock(elements=[_mrkdwn(truncate(" · ".join(context), SLACK_FIELD_MAX))]))
    if view.acked_by:
        blocks.append(
            ContextBlock(
                elements=[_mrkdwn(f":eyes: Acknowledged by {slack_mention(view.acked_by)}")]
            )
        )
    if buttons and view.state != "resolved":
        blocks.append(_buttons(view))
    text = render(text_template, variables).strip() or head
    return SlackMessage(truncate(text, SLACK_TEXT_MAX), _wire(blocks))


def slack_update(view: IncidentView) -> SlackMessage:
    """A thread reply with the latest window."""
    w = view.window
    line = (
        f":chart_with_upwards_trend: {window_span(w)}: mean drift *{w.mean_drift:.3f}* "
        f"(threshold {view.threshold:.3f}, {w.request_count} requests) · "
        f"severity *{view.severity.upper()}* · peak {view.peak_mean_drift:.3f}"
    )
    blocks: list[Block] = [_section(line)]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    text = (
        f"Update {slack_literal(view.doc_type)}: mean drift {w.mean_drift:.3f} in {window_span(w)}"
    )
    return SlackMessage(text, _wire(blocks))


def slack_acknowledged(view: IncidentView) -> SlackMessage:
    """The thread reply saying who acknowledged it (``view.acked_by``)."""
    who = slack_mention(view.acked_by or "?")
    line = (
        f":eyes: *Acknowledged* by {who}: no more progress updates; an escalation and the "
        "resolution are still posted."
    )
    return SlackMessage(f"Acknowledged by {who}", _wire([_section(line)]))


def slack_resolved(view: IncidentView) -> SlackMessage:
    w = view.window
    end = view.resolved_at_ms if view.resolved_at_ms is not None else w.window_end_ms
    line = (
        f":white_check_mark: *Resolved* after {duration(end - view.opened_at_ms)}: mean drift "
        f"back to {w.mean_drift:.3f} (threshold {view.threshold:.3f}) in {window_span(w)}. "
        f"Peak was {view.peak_mean_drift:.3f}."
    )
    text = f"Resolved: drift of {slack_literal(view.doc_type)} back to normal"
    if (adapted := adapted_phrase(view, slack_literal)) is not None:
        line = (
            f":white_check_mark: *Resolved* after {duration(end - view.opened_at_ms)}: "
            f"{adapted}. Peak was {view.peak_mean_drift:.3f}."
        )
        text = f"Resolved: {adapted}"
    return SlackMessage(text, _wire([_section(line)]))


def _slack_reasons(reasons: Sequence[Reason]) -> SectionBlock:
    lines = [
        f"• `{slack_escape(r.code)}` {slack_escape(truncate(r.message, 300))}" for r in reasons
    ]
    return _section(truncate("\n".join(lines), SLACK_SECTION_MAX))


def _mrkdwn(text: str) -> MarkdownTextObject:
    return MarkdownTextObject(text=text)


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=_mrkdwn(text))


def _wire(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    """The blocks as sent: ``to_dict`` raises SlackObjectFormationError past a Block Kit
    limit (a bug here: every text is cut to its limit above)."""
    return [block.to_dict() for block in blocks]
