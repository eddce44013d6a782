"""Slack messages of an incident: the parent (edited in place to show the current state), a
thread reply per update, the resolution; Block Kit plus a plain-text fallback, within Slack's
Block Kit limits; the chart's title and alt text. Pure.

The blocks are built with slack_sdk's Block Kit models (``slack_sdk.models.blocks``), whose
``to_dict`` checks the counts and section-text length Slack enforces; the texts are cut here
first, counted in UTF-16 units as Slack counts them (the models count code points and do not
cut). ``SlackMessage.blocks`` holds the dicts that go on the wire.

Untrusted text (doc types, reasons) is escaped for mrkdwn: ``&``, ``<``, ``>`` as entities so
``<!channel>`` is text, bare ``@here``/``@channel`` broken, doc types shown as inline code so
``*``/``_``/``~`` cannot format.
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
from anchorwatch.contracts import Reason

#: Slack's Block Kit limits.
SLACK_SECTION_MAX = 3_000
SLACK_FIELD_MAX = 2_000
SLACK_TEXT_MAX = 40_000
#: The buttons of an open incident's parent (``slack_actions.py`` answers them).
ACK = "anchorwatch_ack"
SILENCE_1H = "anchorwatch_silence_1h"
SILENCE_RESOLVED = "anchorwatch_silence_resolved"


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


def slack_parent(view: IncidentView, *, buttons: bool = False) -> SlackMessage:
    """The incident's parent message, edited in place to show the current state; with
    ``buttons`` (a signing secret is set) an open one carries the incident's buttons."""
    w = view.window
    icon = _STATE_ICON[view.state]
    sev = view.severity.upper()
    title = "Drift resolved" if view.state == "resolved" else "Drift alert"
    head = f"{icon} *{title}* {slack_literal(view.doc_type)} · *{sev}*"
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
        _section(head),
        SectionBlock(fields=[_mrkdwn(truncate(f, SLACK_FIELD_MAX)) for f in fields]),
    ]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    context = [f"incident {slack_literal(incident_label(view.incident_id))}"]
    if link := slack_link(view.dashboard_url, "dashboard"):
        context.append(link)
    blocks.append(ContextBlock(elements=[_mrkdwn(" · ".join(context))]))
    if view.acked_by:
        blocks.append(
            ContextBlock(
                elements=[_mrkdwn(f":eyes: Acknowledged by {slack_mention(view.acked_by)}")]
            )
        )
    if buttons and view.state != "resolved":
        blocks.append(_buttons(view))
    state = "resolved" if view.state == "resolved" else "open"
    text = (
        f"[{sev}] {title}: {slack_literal(view.doc_type)} mean drift {w.mean_drift:.3f} "
        f"vs threshold {view.threshold:.3f} ({state})"
    )
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
