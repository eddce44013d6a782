"""PagerDuty, Events API v2: one alert per incident, under one ``dedup_key`` derived from the
incident id, triggered at the incident's first routed severity (``[pagerduty] severities``;
the rule is in ``paging_settings.py``) and resolved with it; a re-opened incident triggers
again under the same key (PagerDuty opens a new alert once the old one is resolved).

``POST {url}`` with ``{routing_key, event_action, dedup_key, payload, links, client,
client_url}``: 202 accepted; 429 and 5xx retried by the outbox (``Retry-After`` honoured when
given, else its backoff); 400 (an invalid event) fails the entry for good.

No reconciliation is needed: a resend under the same dedup_key is harmless. PagerDuty folds
a trigger into the open alert of its key (no second incident), and a resolve (or an
acknowledge) of a key with no open alert is accepted and does nothing. So an entry a crash
cut off between PagerDuty's answer and the outbox's "done" is simply sent again.

The routing key is a secret: it is added to the event as it is sent, never stored in the
outbox, never logged, and left out of what a dry run shows. ``acknowledge`` goes out when
someone acknowledges the incident in Slack (``slack_actions.py``), under the same key, when
the incident was paged (its severity routed, as for the resolve).

A data-quality group and the watchdog's notice (``render.IncidentView.kind``) say what they
are in the summary ("Data-quality fault: <code> across N doc types", "anchorwatch cannot see
N doc types: ..."), their ``class`` (``data_quality``, ``anchorwatch_blind``) and details
(``kind``, the types: no drift figures); a drift incident's event is as it always was.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import SecretStr

from anchorwatch.alerting.breakdown_text import (
    NAME_MAX,
    model_phrase,
    where_phrase,
    worst_anchors,
)
from anchorwatch.alerting.integrations.base import Delivered, Integration, Sender, missing
from anchorwatch.alerting.integrations.paging import JsonPost, rfc3339
from anchorwatch.alerting.integrations.paging_settings import PagerDutySection, routes
from anchorwatch.alerting.notify import Caller
from anchorwatch.alerting.payload import Note
from anchorwatch.alerting.render import (
    IncidentView,
    baseline_phrase,
    clean_text,
    incident_label,
    kind_summary,
    safe_url,
    state_phrase,
    truncate,
    window_span,
)
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import OutboxEntry

SERVICE: Final = "pagerduty"
EventAction = Literal["trigger", "acknowledge", "resolve"]
#: The outbox action each entry carries, as the event action it is sent as.
EVENT_ACTIONS: Final[dict[str, EventAction]] = {
    "open": "trigger",
    "acknowledge": "acknowledge",
    "resolve": "resolve",
}
#: PagerDuty's own limits: the summary's length, and the reasons kept in the details.
SUMMARY_MAX: Final = 1024
REASONS_MAX: Final = 10
#: The doc types a group's or the notice's details name at most.
TYPES_MAX: Final = 50
#: The event's class, by kind of incident.
CLASSES: Final = {"drift": "semantic_drift", "group": "data_quality", "blind": "anchorwatch_blind"}


def dedup_key(incident_id: str) -> str:
    """The incident's key in PagerDuty: the same for every event of it, after a restart too."""
    return f"anchorwatch/{incident_id}"


def pagerduty_summary(view: IncidentView) -> str:
    """One line, at most 1024 characters; the doc type made safe to show and cut."""
    if view.kind != "drift":
        return truncate(f"[{view.severity.upper()}] {kind_summary(view)}", SUMMARY_MAX)
    doc = truncate(clean_text(view.doc_type), 200)
    return truncate(
        f"[{view.severity.upper()}] Drift alert: {doc} mean drift "
        f"{view.window.mean_drift:.3f} vs threshold {view.threshold:.3f}",
        SUMMARY_MAX,
    )


def custom_details(view: IncidentView) -> dict[str, Any]:
    """What the alert's details show; ``doc_type`` is the exact doc type (JSON-escaped).
    With the window's breakdown, when it has one: where in the document, which model, the
    request latency."""
    if view.kind != "drift":
        return _kind_details(view)
    return _drift_details(view) | _breakdown_details(view)


def _plain_name(text: str) -> str:
    return clean_text(truncate(text, NAME_MAX))


def _breakdown_details(view: IncidentView) -> dict[str, Any]:
    w = view.window
    details: dict[str, Any] = {}
    if where := where_phrase(view):
        details["where"] = where
    if worst := worst_anchors(w, _plain_name):
        details["worst_anchors"] = worst
    if model := model_phrase(w, view.threshold, _plain_name):
        details["which_model"] = model
    if w.latency_p95_ms is not None:
        details["latency_p95_ms"] = w.latency_p95_ms
    if w.latency_p50_ms is not None:
        details["latency_p50_ms"] = w.latency_p50_ms
    return details


def _drift_details(view: IncidentView) -> dict[str, Any]:
    return {
        "doc_type": view.doc_type,
        "incident_id": view.incident_id,
        "incident_label": incident_label(view.incident_id),
        "severity": view.severity,
        "state": state_phrase(view),
        "mean_drift": view.window.mean_drift,
        "threshold": view.threshold,
        "peak_mean_drift": view.peak_mean_drift,
        "requests": view.window.request_count,
        "window": window_span(view.window),
        "compared_with": baseline_phrase(view),
        "reasons": [
            f"{r.code}: {truncate(clean_text(r.message), 300)}"
            for r in list(view.reasons)[:REASONS_MAX]
        ],
    }


def _kind_details(view: IncidentView) -> dict[str, Any]:
    """A group's or the notice's details: its kind and types (the first TYPES_MAX, exact,
    JSON-escaped, with their state or signal), no drift figures."""
    details: dict[str, Any] = {
        "kind": view.kind,
        "doc_type": view.doc_type,
        "incident_id": view.incident_id,
        "incident_label": incident_label(view.incident_id),
        "severity": view.severity,
        "state": state_phrase(view),
        "doc_type_count": len(view.members),
        "doc_types": {doc: state for doc, state in view.members[:TYPES_MAX]},
    }
    if view.kind == "group":
        details["code"] = view.code
    else:
        details["signals"] = list(view.signals)
    details["reasons"] = [
        f"{r.code}: {truncate(clean_text(r.message), 300)}"
        for r in list(view.reasons)[:REASONS_MAX]
    ]
    return details


def pagerduty_event(action: EventAction, view: IncidentView, source: str) -> dict[str, Any]:
    """The event without its routing key. A trigger carries the alert's payload and links;
    acknowledge and resolve need only the key."""
    event: dict[str, Any] = {"event_action": action, "dedup_key": dedup_key(view.incident_id)}
    if action != "trigger":
        return event
    event["payload"] = {
        "summary": pagerduty_summary(view),
        "source": source,
        "severity": view.severity,  # warning and critical are PagerDuty's words too
        "timestamp": rfc3339(view.window.window_end_ms),
        "component": truncate(clean_text(view.doc_type), 255),
        "group": "anchorwatch",
        "class": CLASSES[view.kind],
        "custom_details": custom_details(view),
    }
    event["client"] = "anchorwatch"
    if dashboard := safe_url(view.dashboard_url):
        event["links"] = [{"href": dashboard, "text": "Dashboard"}]
        event["client_url"] = dashboard
    return event


def _action(entry: OutboxEntry) -> EventAction:
    action = EVENT_ACTIONS.get(entry.action)
    if action is None:
        raise missing(SERVICE, entry.action, f"no PagerDuty event for action {entry.action!r}")
    return action


class PagerDutySender(Sender):
    """One event per entry (see the module's docstring)."""

    integration = SERVICE

    def __init__(self, post: JsonPost, routing_key: SecretStr, source: str) -> None:
        self._post = post
        self._routing_key = routing_key
        self._source = source

    @classmethod
    def from_settings(cls, settings: PagerDutySection, caller: Caller) -> PagerDutySender:
        key = settings.key()
        if key is None:
            raise ValueError("pagerduty: no routing key")  # the settings refuse this first
        post = JsonPost(SERVICE, settings.url, caller, timeout_s=settings.timeout_s)
        return cls(post, key, settings.source)

    def send(self, entry: OutboxEntry) -> Delivered:
        action = _action(entry)
        event = pagerduty_event(action, Note.of(entry).view, self._source)
        self._post.post(action, {"routing_key": self._routing_key.get_secret_value(), **event})
        return Delivered("sent")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        """Never found: sent again, which PagerDuty deduplicates by the key."""
        return None

    def close(self) -> None:
        self._post.close()


def describe(settings: AlertingSettings, entry: OutboxEntry) -> dict[str, Any]:
    """The event as it would be sent, without the routing key."""
    event = pagerduty_event(_action(entry), Note.of(entry).view, settings.pagerduty.source)
    return {"url": settings.pagerduty.url, "event": event}


PAGERDUTY = Integration(
    name=SERVICE,
    # Paged at the first routed severity: the opening, or the escalation to critical.
    actions={
        "opened": "open",
        "reopened": "open",
        "updated": "open",
        "resolved": "resolve",
        "acknowledged": "acknowledge",
    },
    routes=lambda settings, kind, payload: routes(
        settings.pagerduty.severities, kind, payload, escalations=False
    ),
    enabled=lambda settings: settings.pagerduty.enabled,
    sender=lambda settings, caller: PagerDutySender.from_settings(settings.pagerduty, caller),
    describe=describe,
    rate_per_s=lambda settings: settings.pagerduty.rate_per_s,
)
