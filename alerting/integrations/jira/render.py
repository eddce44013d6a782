"""Jira texts of an incident: the summary (from a template), the description (evidence in
wiki markup, REST v2), update and resolution comments, the labels that find its ticket, and
JQL quoting. Pure.

Untrusted text is escaped for wiki markup (backslash escapes, character references where
Jira has no escape) and JQL (a double-quoted string literal); a doc type's label always
carries a hash of the exact doc type, so two types never share one. The summary and the
description come from templates (``templates.py``) given only values already made safe:
plain text for the summary, wiki-escaped text for the description.

Each kind of incident (``render.IncidentView.kind``) has its own texts: a drift incident
its drift evidence; a data-quality group its code and member types (open, recovered); the
watchdog's notice its blind types, the signals and what to check. Their types are listed as
doc types are shown (wiki-escaped), bounded with the count of the rest. While a template is
the default one, a group and the notice use their own default; a custom template applies
to every kind (its ``kind`` variable tells them apart).

A drift window with a breakdown (``breakdown_text.py``) adds its latency to the description's
figures and the update comments, and a section "Where and which model"; anchor ids, request
ids and model names wiki-escaped as doc types are.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

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
    WindowPoint,
    adapted_phrase,
    baseline_phrase,
    clean_text,
    duration,
    hhmm,
    incident_label,
    kind_title,
    listed,
    member_types,
    safe_url,
    signal_words,
    state_phrase,
    truncate,
    utc,
    window_span,
)
from anchorwatch.alerting.routing import NO_ROUTE, RouteInfo
from anchorwatch.alerting.templates import check_template, is_jinja, render
from anchorwatch.contracts import Reason

#: Jira's limits (characters; Jira counts UTF-16 code units).
JIRA_SUMMARY_MAX = 255
JIRA_TEXT_MAX = 32_767
LABEL_ALERT = "drift-alert"
DOC_LABEL_PREFIX = "doc-"
#: 64 bits: finding another text with the same label costs about 2**64 hashes.
DOC_LABEL_HASH_HEX = 16
DEFAULT_SUMMARY_TEMPLATE = "[URGENT] Drift Alert: {doc_type} - Score {avg_drift}"
#: The summaries of a group and the notice while the template is the default one.
KIND_SUMMARY_TEMPLATES = {
    "group": "[URGENT] {{ title }}: {{ subject }}",
    "blind": "[URGENT] {{ title }} {{ subject }}",
}
#: How long a list of types may grow: in a summary (plain), in a description (wiki).
SUMMARY_LIST_MAX = 180
DESCRIPTION_LIST_MAX = 4_000
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
    """Raise ValueError naming an unknown ``{field}`` (a format string) or what is wrong with
    a Jinja template (``{{ name }}``); return the template."""
    if is_jinja(template):
        return check_template(template, summary_variables)
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


def jira_subject(view: IncidentView, show: Callable[[str], str], limit: int) -> str:
    """What the incident is about, each untrusted text through ``show``: the doc type; a
    group's code and count; the notice's count and types (bounded)."""
    if view.kind == "group":
        return f"{show(view.code or '?')} across {len(view.members)} doc types"
    if view.kind == "blind":
        return f"{len(view.members)} doc types: {listed(member_types(view), show, limit)}"
    return show(view.doc_type)


def _plain(text: str) -> str:
    return clean_text(truncate(text, 120))


def summary_variables(view: IncidentView, route: RouteInfo = NO_ROUTE) -> dict[str, Any]:
    """What the summary template is given: plain text (a summary has no markup)."""
    return {
        "kind": view.kind,
        "title": kind_title(view),
        "subject": jira_subject(view, _plain, SUMMARY_LIST_MAX),
        "doc_types": listed(member_types(view), _plain, SUMMARY_LIST_MAX),
        "doc_type_count": len(view.members),
        "doc_type": clean_text(view.doc_type),
        "avg_drift": f"{view.window.mean_drift:.3f}",
        "mean_drift": f"{view.window.mean_drift:.3f}",
        "severity": view.severity,
        "severity_upper": view.severity.upper(),
        "threshold": f"{view.threshold:.3f}",
        "peak_mean_drift": f"{view.peak_mean_drift:.3f}",
        "requests": view.window.request_count,
        "incident_label": incident_label(view.incident_id),
        "owner": clean_text(route.owner) if route.owner else None,
    }


def jira_summary(
    view: IncidentView, template: str = DEFAULT_SUMMARY_TEMPLATE, route: RouteInfo = NO_ROUTE
) -> str:
    """The ticket title from the template, on one line, at most 255 characters."""
    variables = summary_variables(view, route)
    if view.kind != "drift" and template == DEFAULT_SUMMARY_TEMPLATE:
        template = KIND_SUMMARY_TEMPLATES[view.kind]
    if is_jinja(template):
        text = render(template, variables)
    else:
        text = template.format(**{k: variables[k] for k in SUMMARY_FIELDS})
    return truncate(" ".join(text.split()), JIRA_SUMMARY_MAX)


#: Today's description. trim_blocks: a line holding only a {% tag %} leaves nothing behind.
DEFAULT_DESCRIPTION_TEMPLATE = """\
*Drift alert* for document type *{{ doc_type }}*: severity *{{ severity_upper }}*, \
{{ state_phrase }}.

{% if owner %}
Owner: *{{ owner }}*{{ " · [Runbook|" ~ runbook_url ~ "]" if runbook_url else "" }}

{% elif runbook_url %}
[Runbook|{{ runbook_url }}]

{% endif %}
Mean drift *{{ mean_drift }}* against threshold *{{ threshold }}* ({{ baseline }}) over \
{{ requests }} requests in {{ window }}{{ "; " ~ latency if latency else "" }}.

{% if where or which_model %}
h4. Where and which model
{% if where %}
* Where in the document: {{ where }}
{% endif %}
{% for a in worst_anchors %}
* Worst anchor: {{ a }}
{% endfor %}
{% if which_model %}
* Which model: {{ which_model }}
{% endif %}

{% endif %}
h4. Windows
||Window (UTC)||Requests||Mean drift||Threshold||
{% for w in windows %}
|{{ w.span }}|{{ w.requests }}|{{ w.mean_drift }}{{ " (!)" if w.above else "" }}|{{ w.threshold }}|
{% endfor %}

h4. Evidence
* Peak mean drift: {{ peak_mean_drift }}
* Threshold: {{ threshold }}
* Compared with: {{ baseline }}
{% if p95_drift is not none %}
* p95 drift in the latest window: {{ p95_drift }}
{% endif %}
{% if late_count %}
* Late events in the latest window: {{ late_count }}
{% endif %}
* Incident: {{ incident_label }} (id {{ incident_id }})

h4. Diagnoses
{% for r in reasons %}
* *{{ r.code }}*: {{ r.message }}
{% else %}
* none
{% endfor %}

{% if dashboard_url %}
[Dashboard|{{ dashboard_url }}]

{% endif %}
_Opened by anchorwatch. Updates arrive as comments; the ticket is transitioned when the \
drift is back to normal._"""

#: A data-quality group's description (while ``description_template`` is unset).
GROUP_DESCRIPTION_TEMPLATE = """\
*Data-quality fault* *{{ code }}* across *{{ doc_type_count }} doc types*: severity \
*{{ severity_upper }}*, {{ state_phrase }}.

{% if owner %}
Owner: *{{ owner }}*{{ " · [Runbook|" ~ runbook_url ~ "]" if runbook_url else "" }}

{% elif runbook_url %}
[Runbook|{{ runbook_url }}]

{% endif %}
The snapshots of these doc types carry the diagnosis *{{ code }}*: a fault of the input, not \
drift. Their drift pages are held back while it lasts.

h4. Doc types
* Open ({{ open_count }}): {{ open_types or "none" }}
* Recovered ({{ recovered_count }}): {{ recovered_types or "none" }}

h4. Details
{% for r in reasons %}
* *{{ r.code }}*: {{ r.message }}
{% endfor %}
* Incident: {{ incident_label }} (id {{ incident_id }})

_Opened by anchorwatch. Doc types joining and recovering arrive as comments; the ticket is \
transitioned when every doc type has recovered._"""

#: The watchdog's notice's description (while ``description_template`` is unset).
BLIND_DESCRIPTION_TEMPLATE = """\
*anchorwatch cannot see {{ doc_type_count }} doc types*: severity *{{ severity_upper }}*, \
{{ state_phrase }}. Signal: *{{ signals }}*. Drift in these doc types goes unnoticed until \
the drift job's verdicts about them flow again.

{% if owner %}
Owner: *{{ owner }}*{{ " · [Runbook|" ~ runbook_url ~ "]" if runbook_url else "" }}

{% elif runbook_url %}
[Runbook|{{ runbook_url }}]

{% endif %}
h4. Blind doc types
{% for b in blind %}
* {{ b.signal }} ({{ b.count }}): {{ b.types }}
{% else %}
* none named
{% endfor %}

h4. What to check
{% for c in checks %}
* {{ c }}
{% endfor %}

h4. Details
{% for r in reasons %}
* *{{ r.code }}*: {{ r.message }}
{% endfor %}
* Incident: {{ incident_label }} (id {{ incident_id }})

_Opened by anchorwatch's watchdog. Changes arrive as comments; the ticket is transitioned \
when verdicts flow again._"""

KIND_DESCRIPTION_TEMPLATES = {
    "drift": DEFAULT_DESCRIPTION_TEMPLATE,
    "group": GROUP_DESCRIPTION_TEMPLATE,
    "blind": BLIND_DESCRIPTION_TEMPLATE,
}


def _jira_windows(
    view: IncidentView, history: Sequence[WindowPoint], limit: int = 10
) -> list[dict[str, Any]]:
    points = list(history)[-limit:] or [
        WindowPoint(
            view.window.window_start_ms,
            view.window.window_end_ms,
            view.window.mean_drift,
            view.threshold,
            view.window.request_count,
        )
    ]
    return [
        {
            "span": f"{utc(p.window_start_ms)[:-4]}–{hhmm(p.window_end_ms)}",
            "requests": p.request_count,
            "mean_drift": f"{p.mean_drift:.3f}",
            "threshold": f"{p.threshold:.3f}",
            "above": p.mean_drift > p.threshold,
            "latency_p95": f"{p.latency_p95_ms:,} ms" if p.latency_p95_ms is not None else None,
        }
        for p in points
    ]


def _jira_reasons(reasons: Sequence[Reason]) -> list[str]:
    if not reasons:
        return ["* none"]
    return [f"* *{jira_escape(r.code)}*: {jira_escape(truncate(r.message, 500))}" for r in reasons]


def description_variables(
    view: IncidentView, route: RouteInfo = NO_ROUTE, history: Sequence[WindowPoint] = ()
) -> dict[str, Any]:
    """What the description template is given: untrusted text wiki-escaped (shown
    literally: no markup, links, mentions or icons from a doc type), URLs made safe."""
    w = view.window
    drift = view.kind == "drift"
    return {
        **_kind_variables(view),
        "doc_type": jira_escape(truncate(view.doc_type, 300)),
        "severity": view.severity,
        "severity_upper": view.severity.upper(),
        "state": view.state,
        "state_phrase": state_phrase(view),
        "mean_drift": f"{w.mean_drift:.3f}",
        "threshold": f"{view.threshold:.3f}",
        "peak_mean_drift": f"{view.peak_mean_drift:.3f}",
        "requests": w.request_count,
        "window": window_span(w),
        "baseline": jira_escape(baseline_phrase(view)),
        "p95_drift": f"{w.p95_drift:.3f}" if w.p95_drift is not None else None,
        "late_count": w.late_count or 0,
        "incident_label": jira_escape(incident_label(view.incident_id)),
        "incident_id": jira_escape(truncate(view.incident_id, 200)),
        "windows": _jira_windows(view, history),
        "reasons": [
            {"code": jira_escape(r.code), "message": jira_escape(truncate(r.message, 500))}
            for r in view.reasons
        ],
        "dashboard_url": safe_url(view.dashboard_url),
        "owner": jira_escape(truncate(route.owner, 200)) if route.owner else None,
        "runbook_url": safe_url(route.runbook_url),
        # A drift incident's breakdown, when its window has one (else None, or no anchors).
        "where": jira_escape(where) if drift and (where := where_phrase(view)) else None,
        "worst_anchors": worst_anchors(w, jira_name) if drift else [],
        "which_model": model_phrase(w, view.threshold, jira_name) if drift else None,
        "latency": window_latency(w) if drift else None,
    }


def jira_name(text: str) -> str:
    """An anchor id, request id or model name: untrusted, shown literally."""
    return jira_escape(truncate(text, NAME_MAX))


def jira_doc_type(doc_type: str) -> str:
    """A doc type as the description shows it."""
    return jira_escape(truncate(doc_type, 300))


def jira_types(names: Sequence[str], limit: int = DESCRIPTION_LIST_MAX) -> str:
    """Doc types as the description shows them, bounded, with the count of the rest."""
    return listed(names, jira_doc_type, limit)


def _kind_variables(view: IncidentView) -> dict[str, Any]:
    """What a description of any kind is given about its kind (empty for a drift incident):
    a group's code and types by state, the notice's signals, types by signal and checks."""
    open_types, recovered = member_types(view, "open"), member_types(view, "recovered")
    by_signal: dict[str, list[str]] = {}
    if view.kind == "blind":
        for doc, signal in view.members:
            by_signal.setdefault(signal, []).append(doc)
    return {
        "kind": view.kind,
        "title": kind_title(view),
        "subject": jira_subject(view, jira_doc_type, 1_000),
        "code": jira_escape(view.code or ""),
        "doc_types": jira_types(member_types(view)),
        "doc_type_count": len(view.members),
        "open_types": jira_types(open_types) if view.kind == "group" else "",
        "open_count": len(open_types) if view.kind == "group" else 0,
        "recovered_types": jira_types(recovered),
        "recovered_count": len(recovered),
        "signals": jira_escape(signal_words(view.signals)) if view.kind == "blind" else "",
        "blind": [
            {
                "signal": jira_escape(signal_words([signal])),
                "count": len(types),
                "types": jira_types(types, DESCRIPTION_LIST_MAX // len(by_signal)),
            }
            for signal, types in by_signal.items()
        ],
        "checks": [jira_escape(c) for c in BLIND_CHECKS] if view.kind == "blind" else [],
    }


def check_description_template(source: str) -> str:
    """The template if it renders against a sample incident (ValueError otherwise)."""
    return check_template(source, description_variables)


def jira_description(
    view: IncidentView,
    history: Sequence[WindowPoint] = (),
    *,
    route: RouteInfo = NO_ROUTE,
    template: str | None = None,
) -> str:
    """The ticket body (Jira wiki markup, REST v2): the evidence people need to act."""
    variables = description_variables(view, route, history)
    text = render(template or KIND_DESCRIPTION_TEMPLATES[view.kind], variables)
    return truncate(text, JIRA_TEXT_MAX)


def jira_update_comment(view: IncidentView) -> str:
    if view.kind == "group":
        open_count = len(member_types(view, "open"))
        recovered = len(member_types(view, "recovered"))
        lines = [
            f"Update: data-quality fault *{jira_escape(view.code or '?')}*, {open_count} doc "
            f"types open, {recovered} recovered; severity *{view.severity.upper()}*."
        ]
        if view.reasons:
            lines += ["", *_jira_reasons(view.reasons)]
        return truncate("\n".join(lines), JIRA_TEXT_MAX)
    if view.kind == "blind":
        lines = [
            f"Update: anchorwatch cannot see {jira_subject(view, jira_doc_type, 2_000)}; "
            f"signal *{jira_escape(signal_words(view.signals))}*; severity "
            f"*{view.severity.upper()}*."
        ]
        if view.reasons:
            lines += ["", *_jira_reasons(view.reasons)]
        return truncate("\n".join(lines), JIRA_TEXT_MAX)
    w = view.window
    latency = window_latency(w)
    lines = [
        f"Update, {window_span(w)}: mean drift *{w.mean_drift:.3f}* against threshold "
        f"{view.threshold:.3f} over {w.request_count} requests; "
        f"{latency + '; ' if latency else ''}severity "
        f"*{view.severity.upper()}*; peak so far {view.peak_mean_drift:.3f}.",
    ]
    if view.reasons:
        lines += ["", *_jira_reasons(view.reasons)]
    return truncate("\n".join(lines), JIRA_TEXT_MAX)


def jira_resolved_comment(view: IncidentView) -> str:
    w = view.window
    end = view.resolved_at_ms if view.resolved_at_ms is not None else w.window_end_ms
    after = f"Resolved {utc(end)} after {duration(end - view.opened_at_ms)}"
    if view.kind == "group":
        return (
            f"{after}: every doc type of the data-quality fault "
            f"{jira_subject(view, jira_doc_type, 2_000)} recovered."
        )
    if view.kind == "blind":
        return (
            f"{after}: anchorwatch sees again {jira_subject(view, jira_doc_type, 2_000)} "
            "(verdicts arrive again for them, or they stopped arriving)."
        )
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
