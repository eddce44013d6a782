"""Settings of the alerting service: ``[alerting]`` (the service itself: state, consumer,
endpoint, pacing), its integrations ``[slack]``, ``[jira]``, ``[routing]`` and ``[retry]``
(the paging receivers' ``[pagerduty]`` and ``[webhook]`` are in
``integrations/paging_settings.py``), and the detection policy ``[policy]`` (shared with the
baseline fit and the backtest).

Environment: ``ANCHORWATCH_<SECTION>__<FIELD>``; file: ``field`` under ``[section]``.
Secrets (the Slack bot token, the webhook URL, the Jira API token) come from the
environment or from a file named by the matching ``*_file`` setting; they are
``SecretStr`` (printed as ``**********``) and the file is read and checked at load.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from anchorwatch.alerting.grouping_settings import GroupingSection
from anchorwatch.alerting.integrations.jira.render import (
    DEFAULT_SUMMARY_TEMPLATE,
    check_description_template,
    check_summary_template,
)
from anchorwatch.alerting.integrations.paging_settings import PagerDutySection, WebhookSection
from anchorwatch.alerting.integrations.slack.render import (
    DEFAULT_HEADLINE_TEMPLATE,
    DEFAULT_TEXT_TEMPLATE,
    check_slack_template,
)
from anchorwatch.alerting.notify import NotifyMetrics, RetryPolicy
from anchorwatch.alerting.render import Severity
from anchorwatch.alerting.routing import (
    PROJECT_KEY,
    DefaultRoute,
    Route,
    RouteInfo,
    check_channel,
    first_route,
    resolve,
    route_channel,
)
from anchorwatch.alerting.secret_fields import http_url, one_secret
from anchorwatch.alerting.silences import MaintenanceWindow
from anchorwatch.alerting.state_settings import StateFields
from anchorwatch.alerting.watchdog_settings import WatchdogSection
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.settings import Section, ServiceSettings

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,30}$")


class SlackSection(Section):
    mode: Literal["off", "bot", "webhook"] = Field(
        "off",
        description="off; bot (bot token: threads, edits, charts); webhook (incoming webhook: "
        "one message per change, no threading, no charts).",
    )
    bot_token: SecretStr | None = Field(
        None, description="Bot token (xoxb-...), scopes chat:write and files:write."
    )
    bot_token_file: Path | None = Field(None, description="File holding the bot token.")
    webhook_url: SecretStr | None = Field(
        None, description="Incoming webhook URL (a secret: it grants posting)."
    )
    webhook_url_file: Path | None = Field(None, description="File holding the webhook URL.")
    api_url: str = Field(
        "https://slack.com/api/",
        description="Web API base URL; point it at `anchorwatch alerting local-slack` to run "
        "without Slack.",
    )
    timeout_s: float = Field(10, gt=0, le=120, description="Timeout of one HTTP request.")
    charts: bool = Field(True, description="Upload a drift chart into the thread on updates.")
    chart_windows: int = Field(
        30, ge=2, le=1440, description="How many recent windows the chart shows."
    )
    broadcast_resolution: bool = Field(
        True, description="Also show the resolution reply in the channel, not only the thread."
    )
    signing_secret: SecretStr | None = Field(
        None,
        description="The Slack app's signing secret: turns on the buttons of the parent "
        "message (bot mode) and POST /slack/interactions on the metrics port; unset, neither.",
    )
    signing_secret_file: Path | None = Field(None, description="File holding the signing secret.")
    text_template: str = Field(
        DEFAULT_TEXT_TEMPLATE,
        min_length=1,
        description="Jinja template (sandboxed) of the parent's plain-text fallback, the "
        "notification's text; its variables are mrkdwn-escaped.",
    )
    headline_template: str = Field(
        DEFAULT_HEADLINE_TEMPLATE,
        min_length=1,
        description="Jinja template (sandboxed) of the parent's first block, in mrkdwn; its "
        "variables are mrkdwn-escaped.",
    )

    @field_validator("text_template", "headline_template")
    @classmethod
    def _templates(cls, value: str) -> str:
        return check_slack_template(value)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return http_url(value, "api_url").rstrip("/") + "/"

    @model_validator(mode="after")
    def _secrets(self) -> SlackSection:
        token = one_secret(
            self.bot_token, self.bot_token_file, "bot_token", "ANCHORWATCH_SLACK__BOT_TOKEN"
        )
        hook = one_secret(
            self.webhook_url, self.webhook_url_file, "webhook_url", "ANCHORWATCH_SLACK__WEBHOOK_URL"
        )
        one_secret(
            self.signing_secret,
            self.signing_secret_file,
            "signing_secret",
            "ANCHORWATCH_SLACK__SIGNING_SECRET",
        )
        if self.mode == "bot" and token is None:
            raise ValueError(
                "bot_token: required when mode is 'bot' (ANCHORWATCH_SLACK__BOT_TOKEN or "
                "ANCHORWATCH_SLACK__BOT_TOKEN_FILE)"
            )
        if self.mode == "webhook":
            if hook is None:
                raise ValueError(
                    "webhook_url: required when mode is 'webhook' (ANCHORWATCH_SLACK__WEBHOOK_URL "
                    "or ANCHORWATCH_SLACK__WEBHOOK_URL_FILE)"
                )
            http_url(hook.get_secret_value(), "webhook_url", secret=True)
        return self

    def token(self) -> SecretStr | None:
        return one_secret(self.bot_token, self.bot_token_file, "bot_token", "")

    def webhook(self) -> SecretStr | None:
        return one_secret(self.webhook_url, self.webhook_url_file, "webhook_url", "")

    def signing(self) -> SecretStr | None:
        """The signing secret of Slack's interactivity requests (None: buttons off)."""
        return one_secret(self.signing_secret, self.signing_secret_file, "signing_secret", "")

    @property
    def buttons(self) -> bool:
        """Whether parent messages carry the Acknowledge and Silence buttons."""
        return self.mode == "bot" and (
            self.signing_secret is not None or self.signing_secret_file is not None
        )


def _default_priorities() -> dict[Severity, str]:
    return {"warning": "High", "critical": "Highest"}


class JiraSection(Section):
    enabled: bool = Field(False, description="Open, comment and resolve Jira tickets.")
    url: str = Field(
        "http://127.0.0.1:8090",
        description="Jira base URL (Cloud: https://YOUR.atlassian.net); the default is "
        "`anchorwatch alerting local-jira`.",
    )
    project: str = Field("OPS", description="Project key the tickets go to.")
    issue_type: str = Field("Task", min_length=1, description="Issue type of new tickets.")
    user: str | None = Field(
        None,
        description="User for basic auth (Cloud: the account e-mail) with api_token; unset: "
        "api_token is sent as a bearer personal access token (Server/Data Center).",
    )
    api_token: SecretStr | None = Field(None, description="API token or personal access token.")
    api_token_file: Path | None = Field(None, description="File holding the API token.")
    summary_template: str = Field(
        DEFAULT_SUMMARY_TEMPLATE,
        description="Ticket summary: a Jinja template (sandboxed; plain-text variables), or "
        "placeholders {doc_type} {avg_drift} {severity} {severity_upper} {threshold} "
        "{incident_label}; on one line, cut to 255 characters.",
    )
    description_template: str | None = Field(
        None,
        min_length=1,
        description="Jinja template (sandboxed) of the ticket description in wiki markup; its "
        "variables are wiki-escaped (unset: the built-in one).",
    )
    priorities: dict[Severity, str] = Field(
        default_factory=_default_priorities,
        description="Jira priority name per severity (JSON object in the environment); a "
        "severity not listed leaves the project's default priority.",
    )
    resolve_transition: str = Field(
        "Done", min_length=1, description="Transition (by name) that resolves a ticket."
    )
    reopen_transition: str = Field(
        "Reopen", min_length=1, description="Transition (by name) that reopens a ticket."
    )
    comment_interval_s: int = Field(
        900,
        ge=0,
        le=86_400,
        description="At most one update comment per ticket this often (a severity change "
        "always comments).",
    )
    extra_labels: list[str] = Field(
        default_factory=list, description="Labels added to every ticket (no spaces)."
    )
    timeout_s: float = Field(10, gt=0, le=120, description="Timeout of one HTTP request.")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value, "url").rstrip("/")

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not PROJECT_KEY.match(value):
            raise ValueError("must be a Jira project key: capital letters, digits, '_'")
        return value

    @field_validator("summary_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_summary_template(value)

    @field_validator("description_template")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        return None if value is None else check_description_template(value)

    @field_validator("extra_labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        for label in value:
            if not label or len(label) > 255 or any(c.isspace() for c in label):
                raise ValueError(f"label {label!r}: 1-255 characters without spaces")
        return value

    @model_validator(mode="after")
    def _secrets(self) -> JiraSection:
        token = one_secret(
            self.api_token, self.api_token_file, "api_token", "ANCHORWATCH_JIRA__API_TOKEN"
        )
        # Only a Jira on this machine (the local server) may be used without credentials.
        local = urlsplit(self.url).hostname in ("127.0.0.1", "localhost", "::1")
        if self.enabled and token is None and not local:
            raise ValueError(
                "api_token: required for a Jira that is not local (ANCHORWATCH_JIRA__API_TOKEN "
                "or ANCHORWATCH_JIRA__API_TOKEN_FILE)"
            )
        return self

    def token(self) -> SecretStr | None:
        return one_secret(self.api_token, self.api_token_file, "api_token", "")


class RoutingSection(Section):
    default_channel: str = Field(
        "#drift-alerts", description="Slack channel for incidents no rule below matches."
    )
    severity_channels: dict[Severity, str] = Field(
        default_factory=dict,
        description='Channel per severity, e.g. {"critical": "#ops-pager"} (JSON object).',
    )
    doc_type_channels: dict[str, str] = Field(
        default_factory=dict,
        description="Channel per doc type; wins over the severity rule (JSON object).",
    )
    dashboard_url_template: str | None = Field(
        None,
        description="Dashboard link shown in messages and tickets; {doc_type} is replaced "
        "by the URL-encoded doc type.",
    )
    routes: list[Route] = Field(
        default_factory=list,
        description="Owner, channel, Jira project/component and runbook per doc-type pattern; "
        "the first route that matches wins.",
    )
    default_route: DefaultRoute = Field(
        default_factory=DefaultRoute,
        description="Owner, Jira target and runbook where no route matches, and of each field "
        "a matching route leaves unset.",
    )
    jira_users: dict[str, str] = Field(
        default_factory=dict,
        description="Jira user per Slack user id (JSON object): the one who acknowledges in "
        "Slack is assigned the ticket (else the route's jira_assignee).",
    )

    @field_validator("default_channel")
    @classmethod
    def _channel(cls, value: str) -> str:
        return _check_channel(value)

    @field_validator("severity_channels", "doc_type_channels")
    @classmethod
    def _channels(cls, value: dict[Any, str]) -> dict[Any, str]:
        for channel in value.values():
            _check_channel(channel)
        return value

    @field_validator("dashboard_url_template")
    @classmethod
    def _dashboard(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = set(re.findall(r"{(\w*)}", value))
        if names - {"doc_type"}:
            raise ValueError(f"only {{doc_type}} may be used, found {sorted(names)}")
        return http_url(value.replace("{doc_type}", "x"), "dashboard_url_template") and value

    @field_validator("jira_users")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        for slack_user, jira_user in value.items():
            if not _SLACK_USER.match(slack_user):
                raise ValueError(f"{slack_user!r} is not a Slack user id (U…, W…)")
            if not jira_user.strip() or any(c < " " for c in jira_user):
                raise ValueError(f"{slack_user}: the Jira user must be one non-blank line")
        return value

    def channel_for(self, doc_type: str, severity: Severity) -> str:
        return route_channel(
            first_route(self.routes, doc_type),
            severity,
            exact=self.doc_type_channels.get(doc_type),
            severity_channels=self.severity_channels,
            default=self.default_channel,
        )

    def route_for(self, doc_type: str) -> RouteInfo:
        """Owner, runbook and Jira target of the doc type (first matching route, its unset
        fields from the default route)."""
        return resolve(first_route(self.routes, doc_type), self.default_route)

    def jira_assignee(self, doc_type: str, acked_by: str | None) -> str | None:
        """Who the ticket goes to when ``acked_by`` acknowledges it: their Jira user if
        mapped, else the route's assignee, else nobody."""
        mapped = self.jira_users.get(acked_by) if acked_by else None
        return mapped or self.route_for(doc_type).jira_assignee

    def dashboard_url(self, doc_type: str) -> str | None:
        if self.dashboard_url_template is None:
            return None
        return self.dashboard_url_template.replace("{doc_type}", quote(doc_type, safe=""))


def _check_channel(value: str) -> str:
    return check_channel(value)


class RetrySection(Section):
    """How failed Slack and Jira calls are retried. The service's outbox retries an entry
    until it is delivered or fails for good, waiting these delays between tries; the
    attempt and time budgets bound one call made outside it (``alerting send-test``)."""

    max_attempts: int = Field(
        6,
        ge=1,
        le=100,
        description="Attempts per Slack/Jira call before giving up (send-test; the service "
        "retries until delivered).",
    )
    max_elapsed_s: float = Field(
        300,
        gt=0,
        le=86_400,
        description="Time budget per call, waits included (send-test; the service retries "
        "until delivered).",
    )
    base_delay_s: float = Field(1.0, ge=0, le=600, description="First backoff delay.")
    max_delay_s: float = Field(60.0, ge=0, le=3600, description="Longest backoff delay.")

    @model_validator(mode="after")
    def _ordered(self) -> RetrySection:
        if self.max_delay_s < self.base_delay_s:
            raise ValueError("max_delay_s: must not be below base_delay_s")
        return self

    def policy(
        self,
        *,
        metrics: NotifyMetrics | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> RetryPolicy:
        extra: dict[str, Any] = {}
        if sleep is not None:
            extra["sleep"] = sleep
        if clock is not None:
            extra["clock"] = clock
        return RetryPolicy(
            max_attempts=self.max_attempts,
            max_elapsed_s=self.max_elapsed_s,
            base_delay_s=self.base_delay_s,
            max_delay_s=self.max_delay_s,
            metrics=metrics,
            **extra,
        )


class AlertingSection(StateFields):
    """The service: where its state lives, how it consumes verdicts, its endpoint, pacing."""

    group_id: str = Field(
        "anchorwatch-alerting",
        min_length=1,
        max_length=249,
        description="Kafka group the verdict offsets are committed under (for lag "
        "monitoring; the service resumes from its own state, not from these).",
    )
    start_offset: Literal["earliest", "latest"] = Field(
        "latest",
        description="Where to start reading a verdicts partition neither the state nor the "
        "group has an offset for: latest (a new service does not announce history) or "
        "earliest.",
    )
    batch_max: int = Field(
        500, ge=1, le=100_000, description="Most verdicts decided and committed in one batch."
    )
    poll_timeout_s: float = Field(
        0.5, gt=0, le=30, description="How long one poll of the verdicts topic waits."
    )
    metrics_host: str = Field(
        "127.0.0.1", min_length=1, description="Address of the /metrics /healthz /readyz endpoint."
    )
    metrics_port: int = Field(
        9465, ge=0, le=65_535, description="Port of that endpoint (0: any free port, logged)."
    )
    dry_run: bool = Field(
        False,
        description="Send nothing: log each notification as a JSON line and mark it done.",
    )
    drift_events: bool = Field(
        True,
        description="Produce ANCHOR_DRIFT_ALERT / ANCHOR_DRIFT_RESOLVED to topics.drift_events.",
    )
    update_interval_s: int = Field(
        900,
        ge=0,
        le=86_400,
        description="While an incident stays in breach, post a progress update (Slack reply, "
        "Jira comment) at most this often, in event time; severity changes always post "
        "(0: only severity changes).",
    )
    silence_lag_s: int = Field(
        120,
        ge=0,
        le=86_400,
        description="A doc type counts as silent for a window once verdicts of other types "
        "on its verdicts partition are this far past it in event time, or, when that "
        "partition has delivered nothing for this many seconds, the whole topic is: silent "
        "incidents resolve after policy resolve_when_silent windows.",
    )
    slack_rate_per_s: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Most Slack notifications started per second per channel (Slack allows "
        "about one message per second per channel); channels do not wait for each other.",
    )
    slack_workspace_rate_per_s: float = Field(
        20.0,
        gt=0,
        le=1000,
        description="Most Slack notifications started per second over all channels together "
        "(Slack also limits an app per workspace).",
    )
    jira_rate_per_s: float = Field(
        5.0, gt=0, le=1000, description="Most Jira operations started per second."
    )
    rate_burst: int = Field(
        3,
        ge=1,
        le=1000,
        description="Notifications allowed in a burst above those rates (per channel, and "
        "over all channels, for Slack).",
    )
    recent_verdict_ids: int = Field(
        50_000,
        ge=0,
        le=10_000_000,
        description="Ids of this many recent verdicts are kept to tell replays from late "
        "verdicts (both are skipped).",
    )
    metrics_doc_types_max: int = Field(
        2_000,
        ge=0,
        le=100_000,
        description="Most doc types with their own drift/threshold gauges; beyond, the least "
        "recently judged type's gauges are dropped.",
    )
    retention_days: float = Field(
        30,
        gt=0,
        le=3650,
        description="Resolved incidents and delivered notifications are kept this long (for "
        "`alerting incidents`).",
    )
    refit: bool = Field(
        True,
        description="Refit each doc type's baseline from the windows it judged (leaving out "
        "windows inside incidents) and publish it to the baselines topic.",
    )
    refit_interval_s: int = Field(
        3600,
        ge=1,
        le=30 * 86_400,
        description="Wall time between two refits of one doc type.",
    )
    refit_history_s: int = Field(
        7 * 86_400,
        ge=60,
        le=90 * 86_400,
        description="Event time of windows a refit rests on (kept in the state directory, "
        "so a restart does not forget; read back from the verdicts topic on a first start).",
    )
    refit_min_windows: int = Field(
        60,
        ge=1,
        le=1_000_000,
        description="A doc type is refitted only once this many usable windows ended after "
        "the history of the baseline it holds.",
    )
    maintenance_windows: list[MaintenanceWindow] = Field(
        default_factory=list,
        description="Recurring windows in which the named doc types are not posted (still "
        "judged, stored and counted), as Alertmanager's time_intervals; docs/alerting.md.",
    )
    api_token: SecretStr | None = Field(
        None,
        description="Bearer token of the silences API on the metrics port (unset: the API is off).",
    )
    api_token_file: Path | None = Field(None, description="File holding the API token.")

    @field_validator("group_id")
    @classmethod
    def _group_id(cls, value: str) -> str:
        if any(c.isspace() for c in value):
            raise ValueError("must not contain whitespace")
        return value

    @model_validator(mode="after")
    def _api_secret(self) -> AlertingSection:
        token = self.token()
        if token is not None and len(token.get_secret_value()) < 16:
            raise ValueError("api_token: at least 16 characters (it guards who may mute pages)")
        return self

    def token(self) -> SecretStr | None:
        """The silences API's token, from the value or the file."""
        return one_secret(
            self.api_token, self.api_token_file, "api_token", "ANCHORWATCH_ALERTING__API_TOKEN"
        )


class AlertingSettings(ServiceSettings):
    alerting: AlertingSection = Field(default_factory=AlertingSection)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    slack: SlackSection = Field(default_factory=SlackSection)
    jira: JiraSection = Field(default_factory=JiraSection)
    routing: RoutingSection = Field(default_factory=RoutingSection)
    retry: RetrySection = Field(default_factory=RetrySection)
    pagerduty: PagerDutySection = Field(default_factory=PagerDutySection)
    webhook: WebhookSection = Field(default_factory=WebhookSection)
    watchdog: WatchdogSection = Field(default_factory=WatchdogSection)
    grouping: GroupingSection = Field(default_factory=GroupingSection)
