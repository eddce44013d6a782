"""The service's HTTP endpoint as it runs (``http.py`` serves): /metrics, the probes, the
silences API and Slack's buttons. The last two write the state directly, so a standby
serves them too."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.http import Endpoint, Probe
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.silence_api import SilenceApi
from anchorwatch.alerting.slack_actions import SlackInteractions


def start_endpoint(
    settings: AlertingSettings,
    state: StateLocation,
    registry: CollectorRegistry,
    health: Probe,
    readiness: Probe,
    clock: Callable[[], float],
) -> Endpoint:
    a = settings.alerting
    token = a.token()
    api = SilenceApi(state, token.get_secret_value() if token else None)
    secret = settings.slack.signing() if settings.slack.buttons else None  # else: 404
    slack = SlackInteractions(state, secret.get_secret_value() if secret else None, clock=clock)
    return Endpoint(
        a.metrics_host,
        a.metrics_port,
        registry,
        health,
        readiness,
        api=api.handle,
        slack=slack.handle,
    ).start()
