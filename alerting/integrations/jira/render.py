"""Jira texts of an incident: the summary (from a template), the description (evidence in
wiki markup, REST v2), update and resolution comments, the labels that find its ticket, and
JQL quoting. Pure.

Untrusted text is escaped for wiki markup (backslash escapes, character references where
Jira has no escape) and JQL (a double-quoted string literal); a doc type's label always
carries a hash of the exact doc type, so two types never share one.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Sequence

from anchorwatch.alerting.render import (
    IncidentView,
    WindowPoint,
    adapted_phrase,
    baseline_phrase,
    clean_text,
    duration,
    hhmm,
    incident_label,
    safe_url,
    state_phrase,
    truncate,
    utc,
    window_span,
)
from anchorwatch.contracts import Reason

#: Jira's limits (characters; Jira counts UTF-16 code units).
JIRA_SUMMARY_MAX = 255
JIRA_TEXT_MAX = 32_767
LABEL_ALERT = "drift-alert"
DOC_LABEL_PREFIX = "doc-"
#: 64 bits: finding another text with the same label costs about 2**64 hashes.
DOC_LABEL_HASH_HEX = 16
DEFAULT_SUMMARY_TEMPLATE = "[URGENT] Drift Alert: {doc_type} - Score {avg_drift}"
SUMMARY_FIELDS = frozenset(
    {"doc_type", "avg_drift", "severity", "severity_upper", "threshold", "incident_label"}
)
_LINE_BREAKS = re.compile(r"[\r\n\u0085\u2028\u2029]")

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


# --------------------------------------------------------------------------- texts


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
        span = f"{utc(p.window_start_ms)[:-4]}–{hhmm(p.window_end_ms)}"
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
        f"severity *{view.severity.upper()}*, {state_phrase(view)}.",
        "",
        f"Mean drift *{w.mean_drift:.3f}* against threshold *{view.threshold:.3f}* "
        f"({jira_escape(baseline_phrase(view))}) over {w.request_count} requests in "
        f"{window_span(w)}.",
        "",
        "h4. Windows",
        *_jira_window_rows(view, history),
        "",
        "h4. Evidence",
        f"* Peak mean drift: {view.peak_mean_drift:.3f}",
        f"* Threshold: {view.threshold:.3f}",
        f"* Compared with: {jira_escape(baseline_phrase(view))}",
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


def jira_ack_comment(view: IncidentView) -> str:
    """Who acknowledged the incident in Slack (their name and Slack user id, shown literally)."""
    name = jira_escape(truncate(view.acked_name or view.acked_by or "someone", 200))
    who = f"{name} (Slack user {jira_escape(view.acked_by or '?')})"
    return f"Acknowledged by {who} in Slack: no more progress updates are posted."
