"""Operator templates of message texts (the Slack parent's fallback text and headline, the
Jira summary and description): Jinja2 in a sandbox. Pure: no I/O.

The environment is ``SandboxedEnvironment`` (no attribute starting with ``_``, no unsafe
callables, ranges bounded) with ``StrictUndefined`` (an unknown name is an error, not an
empty string) and autoescape off: every variable a template is given is already escaped
for the text it lands in (Slack mrkdwn, Jira wiki markup, or plain text), by the
integration's own escaper, so a doc type can never bring markup in through a template.

A template is checked when the settings load (``check_template``): parsed and rendered
against samples of the variables it will be given, one per kind of incident (drift, a
data-quality group, the watchdog's notice), so a syntax error, an unknown variable or an
unsafe access is refused at start, not at the first incident of a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from anchorwatch.alerting.render import IncidentKind, IncidentView
from anchorwatch.alerting.routing import NO_ROUTE, RouteInfo
from anchorwatch.contracts import Reason, WindowAggregate
from anchorwatch.contracts.models import KindFigures, ModelFigures, TopAnchor

#: A template's longest source; the rendered text is cut to its target's limit anyway.
TEMPLATE_MAX = 20_000
_MARKERS = ("{{", "{%", "{#")


def _environment() -> SandboxedEnvironment:
    # trim_blocks/lstrip_blocks: a {% tag %} on its own line leaves no line behind.
    return SandboxedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


_ENV = _environment()


def is_jinja(source: str) -> bool:
    """Whether ``source`` is a Jinja template (the Jira summary also takes the older
    ``{name}`` format strings)."""
    return any(m in source for m in _MARKERS)


@lru_cache(maxsize=64)
def compiled(source: str) -> Template:
    """The template, compiled once per source text (raises TemplateError)."""
    return _ENV.from_string(source)


def render(source: str, variables: Mapping[str, Any]) -> str:
    return compiled(source).render(**variables)


def check_template(
    source: str, variables: Callable[[IncidentView, RouteInfo], Mapping[str, Any]]
) -> str:
    """Raise ValueError saying what is wrong unless ``source`` parses and renders against the
    sample incidents (a drift incident open with a route and resolved without, a data-quality
    group and the watchdog's notice: a template is applied to every kind); return it."""
    if len(source) > TEMPLATE_MAX:
        raise ValueError(f"at most {TEMPLATE_MAX} characters")
    try:
        template = compiled(source)
        for view, route in SAMPLES:
            template.render(**variables(view, route))
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)  # syntax errors say where
        where = f" (line {line})" if line else ""
        raise ValueError(f"{exc.message or type(exc).__name__}{where}") from None
    except Exception as exc:  # e.g. {{ 1 / 0 }}: it would fail on every incident too
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    return source


def _sample_view(resolved: bool) -> IncidentView:
    """A drift incident: open, its window with a breakdown (anchor kinds, models, latency)
    to compare with the figures before it; resolved, a window without one (an older job)."""
    window = WindowAggregate(
        doc_type="sample_type",
        window_start_ms=1_767_621_720_000,
        window_end_ms=1_767_621_780_000,
        request_count=132,
        mean_drift=0.76,
        p95_drift=0.83,
        late_count=2,
    )
    if not resolved:
        window = window.model_copy(update=_SAMPLE_BREAKDOWN)
    return IncidentView(
        incident_id="i1-sample",
        doc_type="sample_type",
        severity="critical" if resolved else "warning",
        state="resolved" if resolved else "open",
        opened_at_ms=1_767_621_780_000,
        resolved_at_ms=1_767_625_380_000 if resolved else None,
        window=window,
        threshold=0.71,
        baseline_version=None if resolved else "b-20260104",
        reasons=[] if resolved else [Reason(code="above_threshold", message="mean drift high")],
        peak_mean_drift=0.76,
        dashboard_url=None if resolved else "https://grafana.example.com/d/x",
        acked_by=None if resolved else "U0SAMPLE",
        acked_name=None if resolved else "sample",
        kinds_before=None if resolved else {"SECTION": 0.61, "TABLE": 0.7},
        drift_before=None if resolved else 0.64,
    )


_SAMPLE_BREAKDOWN = {
    "kinds": {
        "SECTION": KindFigures(anchor_count=900, mean_drift=0.79, max_drift=0.98),
        "TABLE": KindFigures(anchor_count=120, mean_drift=0.71, max_drift=0.9),
    },
    "top_anchors": [
        TopAnchor(anchor_id="SECTION_004", position=1_204, drift_score=0.98, event_id="req-1")
    ],
    "models": [
        ModelFigures(model="sample-model-2", request_count=53, mean_drift=0.88),
        ModelFigures(model="sample-model-1", request_count=79, mean_drift=0.68),
    ],
    "latency_count": 132,
    "latency_p50_ms": 412,
    "latency_p95_ms": 1_790,
}


def _sample_kind(kind: IncidentKind) -> IncidentView:
    """A data-quality group (open, one type recovered) or the watchdog's notice (open)."""
    view = replace(_sample_view(False), kind=kind, reasons=[], baseline_version=None)
    if kind == "group":
        return replace(
            view,
            doc_type="snapshot_disabled: 3 doc types",
            code="snapshot_disabled",
            members=(("sample_a", "open"), ("sample_b", "open"), ("sample_c", "recovered")),
            reasons=[Reason(code="group_change", message="recovered: sample_c")],
        )
    return replace(
        view,
        doc_type="anchorwatch:watchdog",
        severity="critical",
        members=(("sample_a", "no_verdicts"), ("sample_b", "consumer_stalled")),
        signals=("no_verdicts", "consumer_stalled"),
        reasons=[Reason(code="no_verdicts", message="snapshots keep arriving, no verdicts")],
    )


SAMPLES: tuple[tuple[IncidentView, RouteInfo], ...] = (
    (
        _sample_view(False),
        RouteInfo(
            owner="team-sample",
            slack_mention="U0SAMPLE1",
            runbook_url="https://runbooks.example.com/sample",
            jira_project="OPS",
            jira_component="sample",
            jira_assignee="sample",
        ),
    ),
    (_sample_view(True), NO_ROUTE),
    (_sample_kind("group"), NO_ROUTE),
    (_sample_kind("blind"), NO_ROUTE),
)
