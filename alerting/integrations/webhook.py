"""A generic webhook whose body is Alertmanager's (webhook_config, version "4"), so a receiver
written for Alertmanager works unchanged: one group per incident holding its one alert,
``firing`` when the incident opens, re-opens or escalates (at a routed severity,
``[webhook] severities``; the rule is in ``paging_settings.py``), ``resolved`` when it
resolves.

    {"version": "4", "groupKey": "{}:{alertname=\"AnchorDrift\", incident_id=\"i1-...\"}",
     "truncatedAlerts": 0, "status": "firing", "receiver": "anchorwatch",
     "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...},
     "externalURL": "", "alerts": [{"status": "firing", "labels": {...},
     "annotations": {...}, "startsAt": "2026-01-05T14:03:00Z",
     "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "...", "fingerprint": "<16 hex>"}]}

Labels: ``alertname`` (AnchorDrift), ``doc_type`` (the exact doc type: the contracts keep it
to 512 characters without control or format characters, and JSON escapes the rest, so two
doc types never share a label), ``severity``, ``incident_id`` and ``incident_label`` (the
``aw-`` label of its Slack thread and Jira ticket). Annotations are for people: the doc type
made safe to show and cut (``render.clean_text``), lengths bounded.

Delivery is at least once, as Alertmanager's own: an entry a crash cut off between the
receiver's answer and the outbox's "done" is sent again. Receivers written for Alertmanager
already tolerate that; ``groupKey`` (one per incident) and the alert's ``fingerprint`` (one
per incident, stable across restarts and re-openings) with its ``status`` are what they
deduplicate on. The URL and the bearer token are secrets: never logged, not in errors.

A data-quality group and the watchdog's notice (``render.IncidentView.kind``) are alerts of
their own name (``AnchorDataQualityFault``, ``AnchorwatchBlind``) with a ``kind`` label
(``group``, ``blind``); their annotations say what they are and list their types (no drift
figures). A drift incident's body is as it always was.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from anchorwatch.alerting.integrations.base import Delivered, Integration, Sender
from anchorwatch.alerting.integrations.paging import ZERO_TIME, JsonPost, rfc3339
from anchorwatch.alerting.integrations.paging_settings import WebhookSection, routes
from anchorwatch.alerting.notify import Caller
from anchorwatch.alerting.payload import Note
from anchorwatch.alerting.render import (
    IncidentView,
    adapted_phrase,
    baseline_phrase,
    clean_text,
    incident_label,
    kind_summary,
    listed,
    member_types,
    safe_url,
    signal_words,
    state_phrase,
    truncate,
    window_span,
)
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import OutboxEntry

SERVICE: Final = "webhook"
ALERTNAME: Final = "AnchorDrift"
#: The alert's name by kind of incident.
ALERTNAMES: Final = {
    "drift": ALERTNAME,
    "group": "AnchorDataQualityFault",
    "blind": "AnchorwatchBlind",
}
#: Longest annotation value.
ANNOTATION_MAX: Final = 2000


def fingerprint(incident_id: str) -> str:
    """The alert's fingerprint: 16 hex digits as Alertmanager's, one per incident."""
    return hashlib.sha256(f"anchorwatch\x1f{incident_id}".encode()).hexdigest()[:16]


def alert_labels(view: IncidentView) -> dict[str, str]:
    labels = {
        "alertname": ALERTNAMES[view.kind],
        "doc_type": view.doc_type,
        "severity": view.severity,
        "incident_id": view.incident_id,
        "incident_label": incident_label(view.incident_id),
    }
    if view.kind != "drift":
        labels["kind"] = view.kind
    return labels


def group_key(group_labels: dict[str, str]) -> str:
    """As Alertmanager writes it: the route (the root, ``{}``) and the group's labels,
    sorted, each value quoted."""
    pairs = ", ".join(f"{k}={_quoted(v)}" for k, v in sorted(group_labels.items()))
    return "{}:{" + pairs + "}"


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _kind_lines(view: IncidentView) -> list[str]:
    """A group's or the notice's description: its state and its types, no drift figures."""

    def names(types: list[str]) -> str:
        return listed(types, lambda t: clean_text(truncate(t, 120)), 800)

    if view.kind == "group":
        open_types, recovered = member_types(view, "open"), member_types(view, "recovered")
        lines = [f"{state_phrase(view)}; data-quality fault {clean_text(view.code or '?')}."]
        if open_types:
            lines.append(f"open ({len(open_types)}): {names(open_types)}")
        if recovered:
            lines.append(f"recovered ({len(recovered)}): {names(recovered)}")
    else:
        lines = [
            f"{state_phrase(view)}; signal {signal_words(view.signals)}; check the drift job, "
            "its consumer group's lag and its watermark.",
            f"blind ({len(view.members)}): {names(member_types(view))}",
        ]
    return lines + [f"{r.code}: {clean_text(r.message)}" for r in view.reasons]


def alert_annotations(view: IncidentView, runbook_url: str | None) -> dict[str, str]:
    doc = truncate(clean_text(view.doc_type), 200)
    resolved = view.state == "resolved"
    summary = (
        f"Drift {'resolved' if resolved else 'alert'} ({view.severity}): {doc} mean drift "
        f"{view.window.mean_drift:.3f} vs threshold {view.threshold:.3f}"
    )
    if view.kind != "drift":
        summary = f"{kind_summary(view)} ({view.severity})"
    lines = [
        f"{state_phrase(view)}; mean drift {view.window.mean_drift:.3f} over "
        f"{view.window.request_count} requests in {window_span(view.window)} "
        f"({baseline_phrase(view)}); peak mean drift {view.peak_mean_drift:.3f}.",
    ]
    if adapted := adapted_phrase(view, clean_text):
        lines.append(adapted)
    lines += [f"{r.code}: {clean_text(r.message)}" for r in view.reasons]
    if view.kind != "drift":
        lines = _kind_lines(view)
    annotations = {
        "summary": truncate(summary, ANNOTATION_MAX),
        "description": truncate("\n".join(lines), ANNOTATION_MAX),
    }
    if dashboard := safe_url(view.dashboard_url):
        annotations["dashboard_url"] = dashboard
    if runbook_url:
        annotations["runbook_url"] = runbook_url
    return annotations


def alertmanager_body(
    view: IncidentView, resolved: bool, webhook: WebhookSection
) -> dict[str, Any]:
    """The webhook's body for one change of the incident (see the module's docstring)."""
    status = "resolved" if resolved else "firing"
    labels = alert_labels(view)
    annotations = alert_annotations(view, webhook.runbook_url)
    group_labels = {"alertname": labels["alertname"], "incident_id": view.incident_id}
    ends = view.resolved_at_ms or view.window.window_end_ms
    alert = {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(view.opened_at_ms),
        "endsAt": rfc3339(ends) if resolved else ZERO_TIME,
        "generatorURL": safe_url(view.dashboard_url) or "",
        "fingerprint": fingerprint(view.incident_id),
    }
    return {
        "version": "4",
        "groupKey": group_key(group_labels),
        "truncatedAlerts": 0,
        "status": status,
        "receiver": webhook.receiver,
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": webhook.external_url or "",
        "alerts": [alert],
    }


class WebhookSender(Sender):
    """One POST per entry (see the module's docstring)."""

    integration = SERVICE

    def __init__(self, post: JsonPost, webhook: WebhookSection) -> None:
        self._post = post
        self._webhook = webhook

    @classmethod
    def from_settings(cls, webhook: WebhookSection, caller: Caller) -> WebhookSender:
        url = webhook.target()
        if url is None:
            raise ValueError("webhook: no url")  # the settings refuse this first
        token = webhook.token()
        headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
        post = JsonPost(
            SERVICE, url.get_secret_value(), caller, timeout_s=webhook.timeout_s, headers=headers
        )
        return cls(post, webhook)

    def send(self, entry: OutboxEntry) -> Delivered:
        resolved = entry.action == "resolve"
        body = alertmanager_body(Note.of(entry).view, resolved, self._webhook)
        self._post.post("resolved" if resolved else "firing", body)
        return Delivered("sent")

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        """Never found: sent again (receivers deduplicate, as for Alertmanager)."""
        return None

    def close(self) -> None:
        self._post.close()


def describe(settings: AlertingSettings, entry: OutboxEntry) -> dict[str, Any]:
    """The body as it would be sent (the URL is a secret: not shown)."""
    view = Note.of(entry).view
    return {"body": alertmanager_body(view, entry.action == "resolve", settings.webhook)}


WEBHOOK = Integration(
    name=SERVICE,
    # Firing again on an escalation: the severity label changed (the fingerprint did not).
    actions={"opened": "open", "reopened": "open", "updated": "update", "resolved": "resolve"},
    routes=lambda settings, kind, payload: routes(
        settings.webhook.severities, kind, payload, escalations=True
    ),
    enabled=lambda settings: settings.webhook.enabled,
    sender=lambda settings, caller: WebhookSender.from_settings(settings.webhook, caller),
    describe=describe,
    rate_per_s=lambda settings: settings.webhook.rate_per_s,
)
