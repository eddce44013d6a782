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

Each kind of incident (``render.IncidentView.kind``) has its own texts: a drift incident
its drift figures; a data-quality group its code and member types (open, recovered); the
watchdog's notice its blind types, the signals and what to check. The types of a group or
the notice are listed as doc types are shown (inline code, escaped), bounded with the count
of the rest. While a template is the default one, a group and the notice use their own
default; a custom template applies to every kind (its ``kind`` variable tells them apart).

A drift window with a breakdown (``breakdown_text.py``) adds its latency to the mean-drift
field and the thread replies, and a section under the fields: where in the document, the
worst anchors, which model; anchor ids, request ids and model names shown as doc types are.
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

from anchorwatch.alerting.breakdown_text import (
    NAME_MAX,
    model_phrase,
    where_phrase,
    window_latency,
    worst_anchors,
)
from anchorwatch.alerting.render import (
    BLIND_CHECKS,
    IncidentView,
    adapted_phrase,
    baseline_phrase,
    clean_text,
    duration,
    incident_label,
    kind_title,
    listed,
    member_types,
    safe_url,
    signal_words,
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
#: What a group and the notice show while the templates are the default ones.
KIND_TEXT_TEMPLATES = {
    "group": "[{{ severity_upper }}] {{ title }}: {{ subject }} ({{ state }})",
    "blind": "[{{ severity_upper }}] {{ title }} {{ subject }} ({{ state }})",
}
KIND_HEADLINE_TEMPLATES = {
    "group": "{{ icon }} *{{ title }}:* {{ subject }} · *{{ severity_upper }}*",
    "blind": "{{ icon }} *{{ title }}* {{ subject }} · *{{ severity_upper }}*",
}
#: How long (UTF-16 units) a list of types may grow: in a headline, in the parent's body.
SUBJECT_LIST_MAX = 600
BODY_LIST_MAX = 1_300


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


def slack_name(text: str) -> str:
    """An anchor id, request id or model name: untrusted, shown as a doc type is."""
    return slack_literal(text, NAME_MAX)


def slack_breakdown(view: IncidentView) -> str | None:
    """Where in the document, the worst anchors and which model, in mrkdwn (None: the
    window has no breakdown, and the message reads as before)."""
    lines = []
    if where := where_phrase(view):
        lines.append(f"*Where in the document*: {slack_escape(where)}")
    if worst := worst_anchors(view.window, slack_name, 3):
        lines.append("*Worst anchors*: " + " · ".join(worst))
    if model := model_phrase(view.window, view.threshold, slack_name):
        lines.append(f"*Which model*: {model}")
    return truncate("\n".join(lines), SLACK_SECTION_MAX) if lines else None


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


def slack_types(names: Sequence[str], limit: int) -> str:
    """Doc types as shown in Slack (inline code, escaped), bounded, with the count of the
    rest."""
    return listed(names, slack_literal, limit)


def slack_subject(view: IncidentView, limit: int = SUBJECT_LIST_MAX) -> str:
    """What the incident is about, in mrkdwn: the doc type; a group's code and count; the
    notice's count and types."""
    if view.kind == "group":
        return f"{slack_literal(view.code or '?')} across {len(view.members)} doc types"
    if view.kind == "blind":
        return f"{len(view.members)} doc types: {slack_types(member_types(view), limit)}"
    return slack_literal(view.doc_type)


def slack_variables(view: IncidentView, route: RouteInfo = NO_ROUTE) -> dict[str, Any]:
    """What the parent's templates are given: each value already safe in mrkdwn (untrusted
    text escaped, the doc type as inline code), so no template can let it format or notify."""
    w = view.window
    drift = view.kind == "drift"
    return {
        "kind": view.kind,
        "subject": slack_subject(view),
        "doc_types": slack_types(member_types(view), BODY_LIST_MAX),
        "doc_type_count": len(view.members),
        "doc_type": slack_literal(view.doc_type),
        "severity": view.severity,
        "severity_upper": view.severity.upper(),
        "title": kind_title(view),
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
        # A drift incident's breakdown, when its window has one (else None).
        "where": slack_escape(where) if drift and (where := where_phrase(view)) else None,
        "worst_anchors": worst_anchors(w, slack_name) if drift else [],
        "which_model": model_phrase(w, view.threshold, slack_name) if drift else None,
        "latency": window_latency(w) if drift else None,
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
    variables = slack_variables(view, route)
    if view.kind != "drift":  # the defaults of a group and the notice are their own
        if text_template == DEFAULT_TEXT_TEMPLATE:
            text_template = KIND_TEXT_TEMPLATES[view.kind]
        if headline_template == DEFAULT_HEADLINE_TEMPLATE:
            headline_template = KIND_HEADLINE_TEMPLATES[view.kind]
    head = render(headline_template, variables).strip() or variables["title"]
    blocks: list[Block] = [_section(truncate(head, SLACK_SECTION_MAX))]
    blocks += _parent_body(view)
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


def _parent_body(view: IncidentView) -> list[Block]:
    """The parent's blocks between the headline and the reasons, by kind."""
    if view.kind == "group":
        open_types, recovered = member_types(view, "open"), member_types(view, "recovered")
        fields = [
            f"*Fault*\n{slack_literal(view.code or '?')} (data quality)",
            f"*Doc types*\n{len(open_types)} open, {len(recovered)} recovered",
            f"*State*\n{state_phrase(view)}",
        ]
        lines = [
            f"*{name}* ({len(types)}): {slack_types(types, BODY_LIST_MAX)}"
            for name, types in (("Open", open_types), ("Recovered", recovered))
            if types
        ]
        return [_fields(fields), _section(truncate("\n".join(lines), SLACK_SECTION_MAX))]
    if view.kind == "blind":
        fields = [
            f"*Signal*\n{slack_escape(signal_words(view.signals))}",
            f"*Doc types*\n{len(view.members)} blind",
            f"*State*\n{state_phrase(view)}",
            "*What to check*\n" + "\n".join(f"• {c}" for c in BLIND_CHECKS),
        ]
        blocks: list[Block] = [_fields(fields)]
        if lines := _blind_lines(view):
            blocks.append(_section(truncate("\n".join(lines), SLACK_SECTION_MAX)))
        return blocks
    w = view.window
    latency = window_latency(w)
    fields = [
        f"*Mean drift*\n{w.mean_drift:.3f} (threshold {view.threshold:.3f})"
        + (f"\n{latency}" if latency else ""),
        f"*Requests*\n{w.request_count} in {window_span(w)}",
        f"*Peak mean drift*\n{view.peak_mean_drift:.3f}",
        f"*State*\n{state_phrase(view)}",
        f"*Compared with*\n{slack_escape(baseline_phrase(view))}",
    ]
    if (adapted := adapted_phrase(view, slack_literal)) is not None:
        fields.append(f"*Resolution*\n{adapted}")
    body: list[Block] = [_fields(fields)]
    if (breakdown := slack_breakdown(view)) is not None:
        body.append(_section(breakdown))
    return body


def _blind_lines(view: IncidentView) -> list[str]:
    """The notice's blind types, by the signal blinding them."""
    by_signal: dict[str, list[str]] = {}
    for doc, signal in view.members:
        by_signal.setdefault(signal, []).append(doc)
    limit = (SLACK_SECTION_MAX - 200) // max(len(by_signal), 1)
    return [
        f"*{slack_escape(signal_words([signal]))}* ({len(types)}): {slack_types(types, limit)}"
        for signal, types in by_signal.items()
    ]


def _fields(fields: Sequence[str]) -> SectionBlock:
    return SectionBlock(fields=[_mrkdwn(truncate(f, SLACK_FIELD_MAX)) for f in fields])


def _change_note(view: IncidentView) -> str | None:
    """A group's latest change (``joined: <type>``), escaped; None when it has none."""
    note = next((r.message for r in view.reasons if r.code == "group_change"), None)
    return slack_escape(truncate(note, 300)) if note else None


def slack_update(view: IncidentView) -> SlackMessage:
    """A thread reply with the latest window (a group: its change; the notice: what is
    blind now)."""
    if view.kind != "drift":
        return _kind_update(view)
    w = view.window
    latency = window_latency(w, short=True)
    line = (
        f":chart_with_upwards_trend: {window_span(w)}: mean drift *{w.mean_drift:.3f}* "
        f"(threshold {view.threshold:.3f}, {w.request_count} requests"
        f"{', ' + latency if latency else ''}) · "
        f"severity *{view.severity.upper()}* · peak {view.peak_mean_drift:.3f}"
    )
    blocks: list[Block] = [_section(line)]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    text = (
        f"Update {slack_literal(view.doc_type)}: mean drift {w.mean_drift:.3f} in {window_span(w)}"
    )
    return SlackMessage(text, _wire(blocks))


def _kind_update(view: IncidentView) -> SlackMessage:
    severity = f"severity *{view.severity.upper()}*"
    if view.kind == "group":
        open_types, recovered = member_types(view, "open"), member_types(view, "recovered")
        counts = f"{len(open_types)} open, {len(recovered)} recovered"
        line = (
            f":arrows_counterclockwise: *Data-quality fault* {slack_subject(view)}: "
            f"{counts} · {severity}"
        )
        text = f"Update {slack_subject(view)}: {_change_note(view) or counts}"
    else:
        line = (
            f":warning: *Still blind* to {slack_subject(view)} · signal "
            f"{slack_escape(signal_words(view.signals))} · {severity}"
        )
        text = f"Update: anchorwatch cannot see {slack_subject(view, 300)}"
    blocks: list[Block] = [_section(truncate(line, SLACK_SECTION_MAX))]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    return SlackMessage(truncate(text, SLACK_TEXT_MAX), _wire(blocks))


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
    if view.kind == "group":
        line = (
            f":white_check_mark: *Resolved* after {duration(end - view.opened_at_ms)}: every "
            f"doc type of the data-quality fault {slack_subject(view)} recovered."
        )
        text = f"Resolved: data-quality fault {slack_subject(view)}"
        return SlackMessage(text, _wire([_section(truncate(line, SLACK_SECTION_MAX))]))
    if view.kind == "blind":
        line = (
            f":white_check_mark: *Resolved* after {duration(end - view.opened_at_ms)}: "
            f"anchorwatch sees again {slack_subject(view)} (verdicts arrive again for them, "
            "or they stopped arriving)."
        )
        text = f"Resolved: anchorwatch sees {len(view.members)} doc types again"
        return SlackMessage(text, _wire([_section(truncate(line, SLACK_SECTION_MAX))]))
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
