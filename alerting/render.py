"""Message text for people: Slack Block Kit and fallback text, Jira summary, description,
comments and labels, JQL quoting. Pure: no I/O, no client library, no clock.

Doc types come from request headers: untrusted. Everything shown from them passes through
one of the escapers here: Slack (``&``, ``<``, ``>`` as entities so ``<!channel>`` is text,
bare ``@here``/``@channel`` broken, shown as inline code so ``*``/``_``/``~`` cannot
format), Jira wiki markup (backslash escapes, character references where Jira has no
escape), JQL (double-quoted string literal), Jira labels (no spaces; always a hash of the
exact doc type, so two types never share one). Invisible and bidirectional-override
characters are replaced so nothing reorders or hides text.
"""

from __future__ import annotations

import hashlib
import re
import string
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from anchorwatch.contracts import Reason, Verdict, WindowAggregate

Severity = Literal["warning", "critical"]
IncidentState = Literal["open", "updated", "resolved"]

#: Jira's limits (characters; Jira counts UTF-16 code units).
JIRA_SUMMARY_MAX = 255
JIRA_TEXT_MAX = 32_767
#: Slack's Block Kit limits.
SLACK_SECTION_MAX = 3_000
SLACK_FIELD_MAX = 2_000
SLACK_TEXT_MAX = 40_000

LABEL_ALERT = "drift-alert"
INCIDENT_LABEL_PREFIX = "aw-"
DOC_LABEL_PREFIX = "doc-"
#: 64 bits: finding another text with the same label costs about 2**64 hashes.
DOC_LABEL_HASH_HEX = 16
DEFAULT_SUMMARY_TEMPLATE = "[URGENT] Drift Alert: {doc_type} - Score {avg_drift}"
SUMMARY_FIELDS = frozenset(
    {"doc_type", "avg_drift", "severity", "severity_upper", "threshold", "incident_label"}
)


@dataclass(frozen=True)
class IncidentView:
    """What the renderers and notifiers need to know about one incident."""

    incident_id: str
    doc_type: str
    severity: Severity
    state: IncidentState
    opened_at_ms: int
    resolved_at_ms: int | None
    window: WindowAggregate  # the latest window
    threshold: float
    baseline_version: str | None
    reasons: Sequence[Reason] = ()
    peak_mean_drift: float = 0.0
    dashboard_url: str | None = None
    # Resolved because the type's level moved and stayed (resolution "adapted"): the old and
    # new centers.
    adapted_from: float | None = None
    adapted_to: float | None = None


@dataclass(frozen=True)
class WindowPoint:
    """One window of a type's history, for charts and evidence tables."""

    window_start_ms: int
    window_end_ms: int
    mean_drift: float
    threshold: float
    request_count: int

    @classmethod
    def from_verdict(cls, verdict: Verdict) -> WindowPoint:
        w = verdict.window
        return cls(
            w.window_start_ms, w.window_end_ms, w.mean_drift, verdict.threshold, w.request_count
        )


@dataclass(frozen=True)
class SlackMessage:
    text: str  # the notification / fallback text
    blocks: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- escaping

_MENTION = re.compile(r"@(?=(?:channel|here|everyone)\b)", re.IGNORECASE)
_WORD_JOINER = "\u2060"
_LINE_BREAKS = re.compile(r"[\r\n\u0085\u2028\u2029]")


def clean_text(text: str) -> str:
    """Replace control, format (zero-width, bidi overrides) and unassigned characters."""
    return "".join(
        "\ufffd" if unicodedata.category(c) in ("Cc", "Cf", "Cn", "Cs", "Co") else c for c in text
    )


def truncate(text: str, limit: int) -> str:
    """Cut to ``limit`` characters counted as UTF-16 code units (Jira's and Slack's count),
    ending in an ellipsis when cut."""
    if _utf16_len(text) <= limit:
        return text
    out, used = [], 0
    for c in text:
        size = 2 if ord(c) > 0xFFFF else 1
        if used + size > limit - 1:
            break
        out.append(c)
        used += size
    return "".join(out) + "…"


def _utf16_len(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


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


def safe_url(url: str | None) -> str | None:
    """An http(s) URL with the characters that could end a Slack link or a Jira link
    (``<>|[]`` and whitespace) percent-encoded; anything else is refused (None)."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return quote(url.strip(), safe=":/?#@!$&'()*+,;=%-._~")


#: The characters Jira's renderer lets a backslash escape (its BackslashEscapeRendererComponent
#: and the Cloud converter use this set): each is written as ``\X``, so ``*bold*``, ``{macro}``,
#: ``[link]``, ``[~mention]``, ``|table|``, ``!image!`` and ``(!)``-style icons cannot form.
WIKI_ESCAPABLE = frozenset("-#*_+?^~|%{}[]()!@")
#: What is markup in Jira wiki text: the escapable characters; ``\`` (``\\`` is a line break,
#: ``\X`` an escape) and ``:`` unless a space follows (``http:``, ``mailto:`` and the other URL
#: schemes become links; ``:P``, ``:D`` icons), which have no escape and are written as
#: numeric character references (Jira's renderer keeps those as they are); ``&`` that would
#: start a reference (``&#92;``, ``&amp;``), written as ``&amp;``.
_WIKI_MARKUP = re.compile(r"[-#*_+?^~|%{}\[\]()!@\\]|:(?!\s)|&(?=#?[A-Za-z0-9]+;)")


def _wiki_literal(match: re.Match[str]) -> str:
    c = match.group()
    if c in WIKI_ESCAPABLE:
        return "\\" + c
    return "&amp;" if c == "&" else f"&#{ord(c)};"


def jira_escape(text: str) -> str:
    """Untrusted text shown literally in Jira wiki markup (REST v2 descriptions and
    comments): every markup character backslash-escaped as Jira documents, the ones it has
    no escape for as character references; line breaks become spaces."""
    return _WIKI_MARKUP.sub(_wiki_literal, clean_text(_LINE_BREAKS.sub(" ", text)))


def jql_quote(value: str) -> str:
    """A JQL string literal: double quotes with backslash escapes, so reserved words
    (``AND``, ``order``), quotes and backslashes are data, never syntax."""
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


# --------------------------------------------------------------------------- labels


def incident_label(incident_id: str) -> str:
    """Fixed-length label that finds the incident's ticket again (``aw-`` + 12 hex)."""
    return INCIDENT_LABEL_PREFIX + hashlib.sha256(incident_id.encode()).hexdigest()[:12]


def doc_type_label(doc_type: str) -> str:
    """A browsable, deterministic, injective label for the doc type:
    ``doc-<readable prefix>-<16 hex>``. The prefix (anything outside ``[A-Za-z0-9._-]`` as
    ``_``, at most 40 characters) is for people only; the hash of the exact doc type is
    always there, because a sanitised text can equal another type's name (``a b!`` and
    ``a_b``, or a type that spells out another's old label)."""
    prefix = re.sub(r"[^A-Za-z0-9._-]+", "_", doc_type).strip("_")[:40]
    digest = hashlib.sha256(doc_type.encode()).hexdigest()[:DOC_LABEL_HASH_HEX]
    return f"{DOC_LABEL_PREFIX}{prefix}-{digest}" if prefix else DOC_LABEL_PREFIX + digest


def jira_labels(view: IncidentView) -> list[str]:
    return [LABEL_ALERT, doc_type_label(view.doc_type), incident_label(view.incident_id)]


# --------------------------------------------------------------------------- shared bits


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _hhmm(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def window_span(window: WindowAggregate) -> str:
    return f"{utc(window.window_start_ms)[:-4]}–{_hhmm(window.window_end_ms)} UTC"


def duration(ms: int) -> str:
    minutes = max(ms, 0) // 60_000
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} d {hours % 24} h"


def _baseline(view: IncidentView) -> str:
    return f"baseline {view.baseline_version}" if view.baseline_version else "static rule"


def adapted_phrase(view: IncidentView, escape: Callable[[str], str]) -> str | None:
    """Plain words for a resolution by adaptation, the doc type passed through ``escape``
    (the markup's escaper), or None."""
    if view.adapted_from is None or view.adapted_to is None:
        return None
    return (
        f"{escape(truncate(view.doc_type, 120))} moved from {view.adapted_from:.2f} to "
        f"{view.adapted_to:.2f} and stayed: baseline adapted"
    )


def _state_phrase(view: IncidentView) -> str:
    if view.state == "resolved" and view.resolved_at_ms is not None:
        return (
            f"resolved {utc(view.resolved_at_ms)} after "
            f"{duration(view.resolved_at_ms - view.opened_at_ms)}"
        )
    return f"open since {utc(view.opened_at_ms)}"


# --------------------------------------------------------------------------- Slack

_STATE_ICON = {
    "open": ":rotating_light:",
    "updated": ":rotating_light:",
    "resolved": ":white_check_mark:",
}


def slack_parent(view: IncidentView) -> SlackMessage:
    """The incident's parent message, edited in place to show the current state."""
    w = view.window
    icon = _STATE_ICON[view.state]
    sev = view.severity.upper()
    title = "Drift resolved" if view.state == "resolved" else "Drift alert"
    head = f"{icon} *{title}* {slack_literal(view.doc_type)} · *{sev}*"
    fields = [
        f"*Mean drift*\n{w.mean_drift:.3f} (threshold {view.threshold:.3f})",
        f"*Requests*\n{w.request_count} in {window_span(w)}",
        f"*Peak mean drift*\n{view.peak_mean_drift:.3f}",
        f"*State*\n{_state_phrase(view)}",
        f"*Compared with*\n{slack_escape(_baseline(view))}",
    ]
    if (adapted := adapted_phrase(view, slack_literal)) is not None:
        fields.append(f"*Resolution*\n{adapted}")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": head}},
        {
            "type": "section",
            "fields": [{"type": "mrkdwn", "text": truncate(f, SLACK_FIELD_MAX)} for f in fields],
        },
    ]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    context = [f"incident {slack_literal(incident_label(view.incident_id))}"]
    if link := slack_link(view.dashboard_url, "dashboard"):
        context.append(link)
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]}
    )
    state = "resolved" if view.state == "resolved" else "open"
    text = (
        f"[{sev}] {title}: {slack_literal(view.doc_type)} mean drift {w.mean_drift:.3f} "
        f"vs threshold {view.threshold:.3f} ({state})"
    )
    return SlackMessage(truncate(text, SLACK_TEXT_MAX), blocks)


def slack_update(view: IncidentView) -> SlackMessage:
    """A thread reply with the latest window."""
    w = view.window
    line = (
        f":chart_with_upwards_trend: {window_span(w)}: mean drift *{w.mean_drift:.3f}* "
        f"(threshold {view.threshold:.3f}, {w.request_count} requests) · "
        f"severity *{view.severity.upper()}* · peak {view.peak_mean_drift:.3f}"
    )
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": line}}]
    if view.reasons:
        blocks.append(_slack_reasons(view.reasons))
    text = (
        f"Update {slack_literal(view.doc_type)}: mean drift {w.mean_drift:.3f} in {window_span(w)}"
    )
    return SlackMessage(text, blocks)


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
    return SlackMessage(text, [{"type": "section", "text": {"type": "mrkdwn", "text": line}}])


def _slack_reasons(reasons: Sequence[Reason]) -> dict[str, Any]:
    lines = [
        f"• `{slack_escape(r.code)}` {slack_escape(truncate(r.message, 300))}" for r in reasons
    ]
    return {
        "type": "section",
        "text": {"type": "mrkdwn", "text": truncate("\n".join(lines), SLACK_SECTION_MAX)},
    }


def chart_title(view: IncidentView) -> str:
    return f"Drift of {truncate(clean_text(view.doc_type), 60)} vs threshold"


def chart_alt_text(view: IncidentView, points: Sequence[WindowPoint]) -> str:
    above = sum(1 for p in points if p.mean_drift > p.threshold)
    return truncate(
        f"Mean drift per window of {clean_text(view.doc_type)} over the last {len(points)} "
        f"windows against its threshold; {above} above the threshold.",
        1000,
    )


# --------------------------------------------------------------------------- Jira


def check_summary_template(template: str) -> str:
    """Raise ValueError naming an unknown ``{field}``; return the template."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"not a valid format string: {exc}") from None
    unknown = sorted(n for n in names if n not in SUMMARY_FIELDS)
    if unknown or "" in names:
        raise ValueError(
            f"unknown placeholder(s) {unknown or ['{}']}; allowed: {sorted(SUMMARY_FIELDS)}"
        )
    return template


def jira_summary(view: IncidentView, template: str = DEFAULT_SUMMARY_TEMPLATE) -> str:
    """The ticket title from the template, on one line, at most 255 characters."""
    text = template.format(
        doc_type=clean_text(view.doc_type),
        avg_drift=f"{view.window.mean_drift:.3f}",
        severity=view.severity,
        severity_upper=view.severity.upper(),
        threshold=f"{view.threshold:.3f}",
        incident_label=incident_label(view.incident_id),
    )
    return truncate(" ".join(text.split()), JIRA_SUMMARY_MAX)


def _jira_window_rows(
    view: IncidentView, history: Sequence[WindowPoint], limit: int = 10
) -> list[str]:
    rows = ["||Window (UTC)||Requests||Mean drift||Threshold||"]
    points = list(history)[-limit:] or [
        WindowPoint(
            view.window.window_start_ms,
            view.window.window_end_ms,
            view.window.mean_drift,
            view.threshold,
            view.window.request_count,
        )
    ]
    for p in points:
        mark = " (!)" if p.mean_drift > p.threshold else ""
        span = f"{utc(p.window_start_ms)[:-4]}–{_hhmm(p.window_end_ms)}"
        rows.append(f"|{span}|{p.request_count}|{p.mean_drift:.3f}{mark}|{p.threshold:.3f}|")
    return rows


def _jira_reasons(reasons: Sequence[Reason]) -> list[str]:
    if not reasons:
        return ["* none"]
    return [f"* *{jira_escape(r.code)}*: {jira_escape(truncate(r.message, 500))}" for r in reasons]


def jira_description(view: IncidentView, history: Sequence[WindowPoint] = ()) -> str:
    """The ticket body (Jira wiki markup, REST v2): the evidence people need to act."""
    w = view.window
    lines = [
        f"*Drift alert* for document type *{jira_escape(truncate(view.doc_type, 300))}*: "
        f"severity *{view.severity.upper()}*, {_state_phrase(view)}.",
        "",
        f"Mean drift *{w.mean_drift:.3f}* against threshold *{view.threshold:.3f}* "
        f"({jira_escape(_baseline(view))}) over {w.request_count} requests in "
        f"{window_span(w)}.",
        "",
        "h4. Windows",
        *_jira_window_rows(view, history),
        "",
        "h4. Evidence",
        f"* Peak mean drift: {view.peak_mean_drift:.3f}",
        f"* Threshold: {view.threshold:.3f}",
        f"* Compared with: {jira_escape(_baseline(view))}",
    ]
    if w.p95_drift is not None:
        lines.append(f"* p95 drift in the latest window: {w.p95_drift:.3f}")
    if w.late_count:
        lines.append(f"* Late events in the latest window: {w.late_count}")
    lines += [
        f"* Incident: {jira_escape(incident_label(view.incident_id))} "
        f"(id {jira_escape(truncate(view.incident_id, 200))})",
        "",
        "h4. Diagnoses",
        *_jira_reasons(view.reasons),
        "",
    ]
    if url := safe_url(view.dashboard_url):
        lines += [f"[Dashboard|{url}]", ""]
    lines.append(
        "_Opened by anchorwatch. Updates arrive as comments; the ticket is transitioned "
        "when the drift is back to normal._"
    )
    return truncate("\n".join(lines), JIRA_TEXT_MAX)


def jira_update_comment(view: IncidentView) -> str:
    w = view.window
    lines = [
        f"Update, {window_span(w)}: mean drift *{w.mean_drift:.3f}* against threshold "
        f"{view.threshold:.3f} over {w.request_count} requests; severity "
        f"*{view.severity.upper()}*; peak so far {view.peak_mean_drift:.3f}.",
    ]
    if view.reasons:
        lines += ["", *_jira_reasons(view.reasons)]
    return truncate("\n".join(lines), JIRA_TEXT_MAX)


def jira_resolved_comment(view: IncidentView) -> str:
    w = view.window
    end = view.resolved_at_ms if view.resolved_at_ms is not None else w.window_end_ms
    if (adapted := adapted_phrase(view, jira_escape)) is not None:
        return (
            f"Resolved {utc(end)} after {duration(end - view.opened_at_ms)}: "
            f"{adapted}. Peak mean drift was {view.peak_mean_drift:.3f}."
        )
    return (
        f"Resolved {utc(end)} after {duration(end - view.opened_at_ms)}: mean drift back to "
        f"{w.mean_drift:.3f} (threshold {view.threshold:.3f}) in {window_span(w)}. "
        f"Peak mean drift was {view.peak_mean_drift:.3f}."
    )
