"""The run's services, each started as its own process and waited for: the ingest service
(``anchorwatch ingest serve``, with gateway credentials made for the run, one gateway per
Kong worker: ``new_ingest_credentials``),
the alerting service (``alerting serve``), and where the alerting service posts
(``Destinations``): Slack and Jira as configured, or the local ones (``alerting
local-slack`` / ``local-jira``) when they are not.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.connectors import credentials as creds
from anchorwatch.demo.journey_processes import Services, env_of, pick_port
from anchorwatch.jobs.settings import JobSettings

#: The bot token the local Slack is started with.
LOCAL_SLACK_TOKEN = "xoxb-local-demo"  # noqa: S105 (a local test server's token)


def kafka_env(job: JobSettings) -> dict[str, Any]:
    """The Kafka cluster and the run's topics, as the services' settings."""
    return {
        "kafka": {"bootstrap_servers": job.kafka.bootstrap_servers},
        "topics": {k: v for k, v in job.topics.model_dump().items() if isinstance(v, str)},
    }


def new_ingest_credentials(run_dir: Path, gateways: int) -> tuple[list[str], Path]:
    """Fresh credentials for the run's ingest service: one gateway per Kong worker
    (``kong-worker-0``...), each allowed every doc type, and their tokens. The file in the
    run's directory holds their digests only, readable by its owner only (mode 0600)."""
    path = run_dir / "ingest-credentials.json"
    tokens = [creds.new_token() for _ in range(gateways)]
    now = datetime.now(UTC).replace(microsecond=0)
    entries = {
        f"kong-worker-{i}": creds.GatewayEntry(
            doc_types=["*"],
            secrets=[creds.SecretEntry(id="demo", sha256=creds.digest_hex(t), created=now)],
        )
        for i, t in enumerate(tokens)
    }
    creds.write(path, creds.CredentialsFile(gateways=entries))
    return tokens, path


def start_ingest(services: Services, job: JobSettings, port: int, credentials: Path) -> str:
    """Start the ingest service on ``port`` (a free one when taken or 0), writers needing a
    gateway's token from ``credentials``; its URL once ready."""
    port = pick_port(port)
    # The run's credentials only: a token or insecure_no_auth in the caller's environment
    # would let other writers in, or contradict them (refused).
    ingest = {
        "port": port,
        "credentials_file": credentials,
        "auth_token_file": "",
        "auth_token": "",
        "insecure_no_auth": False,
    }
    services.start("ingest", ["ingest", "serve"], env_of({**kafka_env(job), "ingest": ingest}))
    url = f"http://127.0.0.1:{port}"
    services.wait_ready("ingest", f"{url}/readyz", 60, "ingest /readyz")
    services.check("ingest")
    return url


def start_alerting(
    services: Services,
    job: JobSettings,
    destinations: Destinations,
    *,
    port: int,
    state_dir: Path,
    group_id: str,
    update_interval_s: int,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    name: str = "alerting",
    standby: bool = False,
) -> str:
    """Start the alerting service ``name``, posting to ``destinations``; its URL once ready
    (a ``standby``, waiting for the lead of a shared state: once live).
    ``extra``: more settings, by section (the operator features', the shared state's)."""
    port = pick_port(port)
    config: dict[str, dict[str, Any]] = {
        **kafka_env(job),
        "alerting": {
            "state_dir": state_dir,
            "group_id": group_id,
            # The history's verdicts made the baselines; they are not news.
            "start_offset": "latest",
            "metrics_port": port,
            "update_interval_s": update_interval_s,
            "poll_timeout_s": 0.2,
        },
        # Event time runs 30x the wall clock here: a data-quality incident waits 8 s (4
        # minutes of the demo's event time) for the others of its minute, not 10. Not less:
        # on a loaded machine one minute's verdicts of the types reach the service seconds
        # apart, and one that waited alone would be posted on its own.
        "grouping": {"wait_s": 8},
        **destinations.local_settings(),
    }
    for section, fields in (extra or {}).items():
        config[section] = {**config.get(section, {}), **fields}
    services.start(name, ["alerting", "serve"], env_of(config))
    url = f"http://127.0.0.1:{port}"
    probe = "healthz" if standby else "readyz"
    services.wait_ready(name, f"{url}/{probe}", 60, f"{name} /{probe}")
    return url


class Destinations:
    """Where the alerting service posts: Slack and Jira as configured, or local servers
    started for the run in place of the ones that are not (Slack off, Jira disabled)."""

    def __init__(self, settings: AlertingSettings, *, operator: bool = False) -> None:
        self.settings = settings
        self.local_slack = settings.slack.mode == "off"
        self.local_jira = not settings.jira.enabled
        self.slack_url = ""  # the local Slack's
        self.jira_url = settings.jira.url
        self.slack_web = ""  # where permalinks point
        # The operator features (journey_operator) need the local Slack (its buttons) and
        # Jira, and start the local PagerDuty.
        self.operator = operator and self.local_slack and self.local_jira
        self.signing_secret = secrets.token_hex(16) if self.operator else ""
        self.pagerduty_url = ""  # the local PagerDuty's

    @property
    def slack_on(self) -> bool:
        return self.local_slack or self.settings.slack.mode != "off"

    @property
    def jira_on(self) -> bool:
        return self.local_jira or self.settings.jira.enabled

    def start_local(
        self,
        services: Services,
        *,
        slack_port: int,
        jira_port: int,
        pagerduty_port: int = 0,
        interactivity_url: str = "",
    ) -> dict[str, str]:
        """Start the local Slack and Jira the run needs (and, with the operator features,
        the local PagerDuty, and the Slack's buttons posting to ``interactivity_url``);
        where each destination is, for people."""
        addresses: dict[str, str] = {}
        if self.local_slack:
            port = pick_port(slack_port)
            argv = ["alerting", "local-slack", "--port", str(port), "--token", LOCAL_SLACK_TOKEN]
            env = {}
            if self.operator:
                argv += ["--interactivity-url", interactivity_url]
                env["ANCHORWATCH_SLACK__SIGNING_SECRET"] = self.signing_secret
            services.start("local-slack", argv, env)
            self.slack_url = f"http://127.0.0.1:{port}"
            services.wait_ready(
                "local-slack", f"{self.slack_url}/_local/messages", 30, "the local Slack"
            )
            self.slack_web = f"{self.slack_url}/"
            addresses["slack"] = f"{self.slack_url}/ (local Slack)"
        elif self.settings.slack.mode == "bot":
            self.slack_web = _slack_workspace_url(self.settings)
            addresses["slack"] = self.slack_web or "Slack"
        if self.local_jira:
            port = pick_port(jira_port)
            services.start("local-jira", ["alerting", "local-jira", "--port", str(port)], {})
            self.jira_url = f"http://127.0.0.1:{port}"
            services.wait_ready(
                "local-jira", f"{self.jira_url}/_local/issues", 30, "the local Jira"
            )
            addresses["jira"] = f"{self.jira_url}/ (local Jira)"
        elif self.settings.jira.enabled:
            addresses["jira"] = self.jira_url
        if self.operator:
            port = pick_port(pagerduty_port)
            argv = ["alerting", "local-pagerduty", "--port", str(port)]
            services.start("local-pagerduty", argv, {})
            self.pagerduty_url = f"http://127.0.0.1:{port}"
            services.wait_ready(
                "local-pagerduty", f"{self.pagerduty_url}/_local/alerts", 30, "the local PagerDuty"
            )
            addresses["pagerduty"] = f"{self.pagerduty_url}/ (local PagerDuty)"
        return addresses

    def local_settings(self) -> dict[str, dict[str, Any]]:
        """The alerting service's Slack and Jira settings for the local servers."""
        config: dict[str, dict[str, Any]] = {}
        if self.local_slack:
            config["slack"] = {
                "mode": "bot",
                "api_url": f"{self.slack_url}/api/",
                "bot_token": LOCAL_SLACK_TOKEN,
            }
        if self.local_jira:
            config["jira"] = {"enabled": True, "url": self.jira_url}
        if self.operator:
            from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY

            config["slack"]["signing_secret"] = self.signing_secret
            config["pagerduty"] = {
                "enabled": True,
                "url": f"{self.pagerduty_url}/v2/enqueue",
                "routing_key": LOCAL_ROUTING_KEY,
            }
        return config

    def jira_summary(self, key: str) -> str | None:
        """The summary of a Jira issue, or None when Jira does not tell."""
        j = self.settings.jira
        auth: Any = None
        headers = {}
        if not self.local_jira:
            token = j.api_token.get_secret_value() if j.api_token else None
            if j.user and token:
                auth = (j.user, token)
            elif token:
                headers["Authorization"] = f"Bearer {token}"
        try:
            r = requests.get(
                f"{self.jira_url.rstrip('/')}/rest/api/2/issue/{key}",
                params={"fields": "summary"},
                auth=auth,
                headers=headers,
                timeout=5,
            )
            return str(r.json()["fields"]["summary"]) if r.status_code == 200 else None
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return None


def slack_permalink(workspace_url: str, channel: str | None, ts: str) -> str:
    """Slack's permalink form: <workspace>/archives/<channel>/p<ts without the dot>."""
    return f"{workspace_url.rstrip('/')}/archives/{channel or ''}/p{ts.replace('.', '')}"


def _slack_workspace_url(settings: AlertingSettings) -> str:
    """The workspace URL from auth.test (the bot's own token), for permalinks."""
    from slack_sdk import WebClient

    token = settings.slack.bot_token.get_secret_value() if settings.slack.bot_token else None
    if not token:
        return ""
    try:
        answer = WebClient(token=token, base_url=settings.slack.api_url).auth_test()
        return str(answer.get("url") or "")
    except Exception:  # permalinks are a convenience; the run goes on without them
        return ""
