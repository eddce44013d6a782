"""Settings of the paging receivers, ``[pagerduty]`` (Events API v2) and ``[webhook]`` (a
generic webhook with Alertmanager's body), and the rule that routes incident changes to them
by severity (``routes``).

Their own module, beside ``settings.py`` (which lists them in ``AlertingSettings``), so that
file stays within the house's size. The secret rule is ``settings.py``'s: a value or a
``*_file``, not both, read and checked at load, ``SecretStr`` (printed as ``**********``).
It is repeated here because ``settings.py`` imports this module.

The routing rule. Severities only rise while an incident lives (warning, then critical; a
re-opening keeps the highest it had), and a receiver's ``severities`` are refused unless they
hold every severity above the lowest they name (``["warning"]`` alone would page a warning
and never resolve it once it escalated). So the incident's severity at any change says
whether the receiver heard of it before: an opening or re-opening is sent when its severity
is routed; an escalation when critical is routed (for PagerDuty only when it is the
incident's first routed severity: an incident pages once); a resolution when its (highest)
severity is routed, which is exactly when something was sent before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import Field, SecretStr, field_validator, model_validator

from anchorwatch.alerting.render import Severity
from anchorwatch.alerting.secret_fields import http_url, one_secret
from anchorwatch.settings import Section

#: Lowest first.
SEVERITIES: Final[tuple[Severity, ...]] = ("warning", "critical")


def _critical() -> list[Severity]:
    return ["critical"]


def _all() -> list[Severity]:
    return list(SEVERITIES)


PAGERDUTY_EVENTS_URL: Final = "https://events.pagerduty.com/v2/enqueue"


def _routed_severities(value: list[Severity]) -> list[Severity]:
    """Each once, lowest first; refused when empty or when one above a routed one is not."""
    if not value:
        raise ValueError("route at least one severity (or turn the receiver off)")
    lowest = min(SEVERITIES.index(s) for s in value)
    if set(value) != set(SEVERITIES[lowest:]):
        raise ValueError(
            f"{sorted(value)} leaves out a higher severity: an incident escalating past the "
            f"routed ones would never be resolved; use {list(SEVERITIES[lowest:])}"
        )
    return list(SEVERITIES[lowest:])


def routes(
    severities: Sequence[str], kind: str, payload: Mapping[str, Any], *, escalations: bool
) -> bool:
    """Whether a change of ``kind`` (its notification ``payload``) goes to a receiver routing
    ``severities`` (see the module's docstring); ``escalations``: an escalation is sent again
    to a receiver that heard of the incident as a warning."""
    severity = payload["view"]["severity"]
    if severity not in severities:
        return False
    if kind == "updated":  # an escalation: warning to critical
        return escalations or "warning" not in severities
    return True


class PagerDutySection(Section):
    """PagerDuty Events API v2: one alert per incident under one dedup_key, triggered at its
    first routed severity and resolved with it (docs/alerting.md, Paging receivers)."""

    enabled: bool = Field(False, description="Trigger and resolve PagerDuty alerts.")
    routing_key: SecretStr | None = Field(
        None, description="Integration key (routing key) of the PagerDuty service's Events v2."
    )
    routing_key_file: Path | None = Field(None, description="File holding the routing key.")
    url: str = Field(
        PAGERDUTY_EVENTS_URL,
        description="Events API v2 enqueue URL; point it at `anchorwatch alerting "
        "local-pagerduty` to run without PagerDuty.",
    )
    severities: list[Severity] = Field(
        default_factory=_critical,
        description="Incident severities that page (a warning routed needs critical too).",
    )
    source: str = Field(
        "anchorwatch",
        min_length=1,
        max_length=255,
        description="The alerts' payload.source (where the problem is).",
    )
    timeout_s: float = Field(10, gt=0, le=120, description="Timeout of one HTTP request.")
    rate_per_s: float = Field(
        2.0,
        gt=0,
        le=1000,
        description="Most events sent per second (PagerDuty takes about 120 a minute per key).",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value, "url", secret=True)

    @field_validator("severities")
    @classmethod
    def _severities(cls, value: list[Severity]) -> list[Severity]:
        return _routed_severities(value)

    @model_validator(mode="after")
    def _secrets(self) -> PagerDutySection:
        key = self.key()
        if self.enabled and key is None:
            raise ValueError(
                "routing_key: required when enabled (ANCHORWATCH_PAGERDUTY__ROUTING_KEY or "
                "ANCHORWATCH_PAGERDUTY__ROUTING_KEY_FILE)"
            )
        return self

    def key(self) -> SecretStr | None:
        return one_secret(
            self.routing_key,
            self.routing_key_file,
            "routing_key",
            "ANCHORWATCH_PAGERDUTY__ROUTING_KEY",
        )


class WebhookSection(Section):
    """A webhook receiving Alertmanager's webhook body (version 4): a receiver written for
    Alertmanager works unchanged (docs/alerting.md, Paging receivers)."""

    enabled: bool = Field(False, description="POST firing and resolved alerts to the webhook.")
    url: SecretStr | None = Field(
        None, description="The receiver's URL (a secret, as in Alertmanager: it may carry a key)."
    )
    url_file: Path | None = Field(None, description="File holding the URL.")
    bearer_token: SecretStr | None = Field(
        None, description="Sent as Authorization: Bearer when set."
    )
    bearer_token_file: Path | None = Field(None, description="File holding the bearer token.")
    severities: list[Severity] = Field(
        default_factory=_all,
        description="Incident severities sent (a warning routed needs critical too).",
    )
    receiver: str = Field(
        "anchorwatch", min_length=1, max_length=255, description="The body's receiver name."
    )
    external_url: str | None = Field(
        None, description="The body's externalURL (a link back to anchorwatch; unset: empty)."
    )
    runbook_url: str | None = Field(
        None, description="Added to every alert's annotations as runbook_url."
    )
    timeout_s: float = Field(10, gt=0, le=120, description="Timeout of one HTTP request.")
    rate_per_s: float = Field(
        10.0, gt=0, le=1000, description="Most webhook calls started per second."
    )

    @field_validator("external_url", "runbook_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value, "external_url/runbook_url", secret=True)

    @field_validator("severities")
    @classmethod
    def _severities(cls, value: list[Severity]) -> list[Severity]:
        return _routed_severities(value)

    @model_validator(mode="after")
    def _secrets(self) -> WebhookSection:
        self.token()
        url = self.target()
        if self.enabled and url is None:
            raise ValueError(
                "url: required when enabled (ANCHORWATCH_WEBHOOK__URL or "
                "ANCHORWATCH_WEBHOOK__URL_FILE)"
            )
        if url is not None:
            http_url(url.get_secret_value(), "url", secret=True)
        return self

    def target(self) -> SecretStr | None:
        """The URL, from the value or the file."""
        return one_secret(self.url, self.url_file, "url", "ANCHORWATCH_WEBHOOK__URL")

    def token(self) -> SecretStr | None:
        return one_secret(
            self.bearer_token,
            self.bearer_token_file,
            "bearer_token",
            "ANCHORWATCH_WEBHOOK__BEARER_TOKEN",
        )
