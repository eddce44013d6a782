"""`anchorwatch alerting ...`: the service (`serve`), its incidents (`incidents`), the local
Slack, Jira and PagerDuty servers, and a test notification. Entry points only wire; the work
lives in the modules they call."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from anchorwatch.alerting.render import IncidentView, Severity, WindowPoint
from anchorwatch.cli.common import load_settings
from anchorwatch.cli.silence import silence
from anchorwatch.contracts import Reason, WindowAggregate
from anchorwatch.errors import AnchorwatchError

if TYPE_CHECKING:
    from anchorwatch.alerting.store import IncidentRow


@click.group()
def alerting() -> None:
    """The alerting service: verdicts to incidents, Slack threads, Jira tickets and drift
    events; silences; its local Slack/Jira servers and a test notification."""


alerting.add_command(silence)


@alerting.command("serve")
@click.option(
    "--dry-run",
    is_flag=True,
    default=False,
    help="Send nothing: log each notification it would send as a JSON line. "
    "[default: alerting.dry_run]",
)
@click.pass_context
def serve(ctx: click.Context, dry_run: bool) -> None:
    """Consume verdicts, keep incidents (state under alerting.state_dir) and deliver their
    notifications to Slack, Jira and the drift-events topic, exactly once, until SIGTERM or
    Ctrl-C. /metrics, /healthz and /readyz on alerting.metrics_host:metrics_port."""
    from anchorwatch.alerting.service import run
    from anchorwatch.alerting.settings import AlertingSettings

    run(load_settings(ctx, AlertingSettings, alerting={"dry_run": dry_run or None}))


@alerting.command("incidents")
@click.option("--all", "show_all", is_flag=True, help="Also list resolved incidents still kept.")
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1),
    help="At most this many incidents.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The service's state directory (SQLite). [default: alerting.state_url if set, else "
    "alerting.state_dir]",
)
@click.pass_context
def incidents(
    ctx: click.Context,
    show_all: bool,
    limit: int,
    as_json: bool,
    state_dir: Path | None,
) -> None:
    """List open incidents (with --all, recent resolved ones too): state (open, silenced:
    muted by a silence or maintenance window, waiting: for other doc types with the same
    data-quality diagnosis, grouped: posted through a group incident, inhibited: held while
    a data-quality incident of its type is open, resolved), severity, times, the Jira ticket,
    notifications not yet delivered ('!': some failed for good) and, with --json, the Slack
    thread, what silenced it and every delivery's state. Reads the state; the service may be
    running."""
    import orjson

    from anchorwatch.alerting.grouping import GROUP_WAIT, inhibitor
    from anchorwatch.alerting.render import clean_text, incident_label, truncate
    from anchorwatch.alerting.service import list_incidents
    from anchorwatch.alerting.settings import AlertingSettings
    from anchorwatch.alerting.silence_book import SilenceBook
    from anchorwatch.alerting.silences import Muting

    settings = load_settings(ctx, AlertingSettings).alerting
    where = state_dir or settings.state_location()
    listing = list_incidents(where, open_only=not show_all, limit=limit)
    now_ms = int(time.time() * 1000)
    book = SilenceBook(where)
    try:
        muting = Muting.at(book.active(now_ms), settings.maintenance_windows, now_ms)
    finally:
        book.close()

    def silenced_by(row: IncidentRow) -> str | None:
        """What keeps it from people: what held its first post, or what mutes it now."""
        if row.held_by is not None:
            return row.held_by
        if row.group_id is not None:
            return None  # posted through its group
        return muting.reason(row.doc_type, row.severity) if row.state == "open" else None

    def shown_state(row: IncidentRow) -> str:
        """open, resolved, or what holds an open one back: silenced, waiting (for its
        group), inhibited (by a data-quality incident of its type), grouped."""
        held = silenced_by(row)
        if row.state != "open" or (held is None and row.group_id is None):
            return row.state
        if row.held_by == GROUP_WAIT:
            return "waiting"
        if inhibitor(row.held_by) is not None:
            return "inhibited"
        return "grouped" if held is None else "silenced"

    if as_json:
        for item in listing:
            row = item.row
            record = {
                "incident_id": row.incident_id,
                "incident_label": incident_label(row.incident_id),
                "doc_type": row.doc_type,
                "rule": row.rule,
                "state": row.state,
                "silenced_by": silenced_by(row),
                "shown_state": shown_state(row),
                "group_id": row.group_id,
                "inhibited_by": inhibitor(row.held_by),
                "quality_code": row.quality_code,
                "severity": row.severity,
                "opened_at": _iso(row.opened_at_ms),
                "resolved_at": _iso(row.resolved_at_ms) or None,
                "peak_mean_drift": row.record.get("peak_mean_drift"),
                "slack": (
                    f"{item.refs.slack_channel}/{item.refs.slack_ts}"
                    if item.refs.slack_ts
                    else None
                ),
                "jira": item.refs.jira_key,
                "deliveries": item.deliveries,
            }
            click.echo(orjson.dumps(record).decode())
        return
    if not listing:
        click.echo("no open incidents" if not show_all else "no incidents")
        return
    header = (
        f"{'STATE':<9}{'SEVERITY':<10}{'OPENED (UTC)':<18}{'RESOLVED (UTC)':<18}"
        f"{'JIRA':<11}{'UNSENT':<8}{'INCIDENT':<17}DOC TYPE"
    )
    click.echo(header)
    for item in listing:
        row = item.row
        unsent = sum(
            n
            for statuses in item.deliveries.values()
            for status, n in statuses.items()
            if status in ("pending", "attempting")
        )
        failed = sum(s.get("failed", 0) for s in item.deliveries.values())
        state = shown_state(row)
        within = f" (in group {incident_label(row.group_id)})" if row.group_id else ""
        click.echo(
            f"{state:<8} {row.severity:<10}{_iso(row.opened_at_ms, short=True):<18}"
            f"{_iso(row.resolved_at_ms, short=True):<18}{item.refs.jira_key or '-':<11}"
            f"{str(unsent) + ('!' if failed else ''):<8}{incident_label(row.incident_id):<17}"
            f"{truncate(clean_text(row.doc_type), 60)}{within}"
        )


@alerting.command("leases")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def leases(ctx: click.Context, as_json: bool) -> None:
    """Who leads a shared alerting state (alerting.state_url): each lease with its holder
    (host:pid:tag), epoch and the seconds until it expires ('expired': a standby takes it at
    its next try). Reads the state; the instances may be running."""
    import orjson

    from anchorwatch.alerting.leadership import read_leases
    from anchorwatch.alerting.settings import AlertingSettings

    location = load_settings(ctx, AlertingSettings).alerting.state_location()
    if not location.shared:
        raise click.ClickException(
            "the alerting state is SQLite (alerting.state_dir): one instance, no leases; "
            "leases exist with alerting.state_url (PostgreSQL)"
        )
    found = read_leases(location)
    if as_json:
        for lease in found:
            click.echo(orjson.dumps(
                {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch,
                 "expires_in_s": lease.expires_in_ms / 1000, "expired": lease.expires_in_ms < 0}
            ).decode())  # fmt: skip
        return
    if not found:
        click.echo("no lease taken yet: no instance has started on this state")
        return
    click.echo(f"{'LEASE':<16} {'EPOCH':>6} {'EXPIRES IN':>10}  HOLDER")
    for lease in found:
        left = "expired" if lease.expires_in_ms < 0 else f"{lease.expires_in_ms / 1000:.1f}s"
        click.echo(f"{lease.name:<16} {lease.epoch:>6} {left:>10}  {lease.holder}")


def _iso(ms: int | None, *, short: bool = False) -> str:
    from datetime import UTC, datetime

    if ms is None:
        return "-" if short else ""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M") if short else moment.isoformat().replace("+00:00", "Z")


def _serve(server: Any, lines: list[str]) -> None:
    for line in lines:
        click.echo(line)
    click.echo("Ctrl-C stops it.")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _bind(cls: Any, host: str, port: int, **kwargs: Any) -> Any:
    try:
        return cls(host, port, **kwargs)
    except OSError as exc:
        raise AnchorwatchError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@alerting.command("local-slack")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind to.")
@click.option("--port", default=8089, show_default=True, type=int, help="Port (0: any free).")
@click.option(
    "--token", default=None, help="Accept only this bot token. [default: any non-empty token]"
)
@click.option(
    "--interactivity-url",
    default=None,
    help="Where the page's buttons send their clicks, as Slack does (the service's "
    "http://HOST:9465/slack/interactions).",
)
@click.option(
    "--signing-secret",
    default=None,
    envvar="ANCHORWATCH_SLACK__SIGNING_SECRET",
    help="Signs the clicks (the service's slack.signing_secret).",
)
def local_slack(
    host: str,
    port: int,
    token: str | None,
    interactivity_url: str | None,
    signing_secret: str | None,
) -> None:
    """Run a local Slack (Web API + incoming webhook) that records what it receives; see
    the messages at http://HOST:PORT/ ."""
    from anchorwatch.alerting.fakes.slack import LocalSlack

    server = _bind(
        LocalSlack,
        host,
        port,
        token=token,
        interactivity_url=interactivity_url,
        signing_secret=signing_secret,
    )
    _serve(
        server,
        [
            f"local Slack on {server.url}/ (messages: {server.url}/_local/messages)",
            "  bot mode:     ANCHORWATCH_SLACK__MODE=bot "
            f"ANCHORWATCH_SLACK__API_URL={server.api_url} "
            f"ANCHORWATCH_SLACK__BOT_TOKEN={token or 'xoxb-local'}",
            "  webhook mode: ANCHORWATCH_SLACK__MODE=webhook "
            f"ANCHORWATCH_SLACK__WEBHOOK_URL={server.webhook_url}",
            f"  faults:       curl -X POST {server.url}/_local/faults -d "
            """'{"method": "chat.postMessage", "status": 429, "retry_after": 1, "times": 2}'""",
        ],
    )


@alerting.command("local-jira")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind to.")
@click.option("--port", default=8090, show_default=True, type=int, help="Port (0: any free).")
@click.option(
    "--project",
    "projects",
    multiple=True,
    default=["OPS"],
    show_default=True,
    help="Project key that exists (repeatable).",
)
@click.option(
    "--deployment",
    type=click.Choice(["Server", "Cloud"]),
    default="Server",
    show_default=True,
    help="What serverInfo reports; Cloud clients search with search/jql.",
)
@click.option("--user", default=None, help="Require basic auth with this user (and --token).")
@click.option("--token", default=None, help="Require this API token (bearer without --user).")
def local_jira(
    host: str,
    port: int,
    projects: tuple[str, ...],
    deployment: str,
    user: str | None,
    token: str | None,
) -> None:
    """Run a local Jira (the REST endpoints the notifier uses) that records what it receives;
    see the tickets at http://HOST:PORT/ ."""
    from anchorwatch.alerting.fakes.jira import LocalJira

    credentials = (user or "", token) if token else None
    server = _bind(
        LocalJira, host, port, projects=projects, deployment=deployment, credentials=credentials
    )
    _serve(
        server,
        [
            f"local Jira on {server.url}/ (issues: {server.url}/_local/issues)",
            f"  ANCHORWATCH_JIRA__ENABLED=true ANCHORWATCH_JIRA__URL={server.url} "
            f"ANCHORWATCH_JIRA__PROJECT={projects[0]}",
            f"  faults: curl -X POST {server.url}/_local/faults -d "
            """'{"method": "create", "status": 503, "times": 2}'""",
        ],
    )


@alerting.command("local-pagerduty")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind to.")
@click.option("--port", default=8091, show_default=True, type=int, help="Port (0: any free).")
@click.option(
    "--routing-key",
    default=None,
    help="Accept only this routing key (32 characters). [default: any 32-character key]",
)
def local_pagerduty(host: str, port: int, routing_key: str | None) -> None:
    """Run a local PagerDuty (Events API v2) that keeps the alerts it is sent by dedup_key;
    see them at http://HOST:PORT/ ."""
    from anchorwatch.alerting.fakes.pagerduty import LOCAL_ROUTING_KEY, LocalPagerDuty

    server = _bind(LocalPagerDuty, host, port, routing_key=routing_key)
    _serve(
        server,
        [
            f"local PagerDuty on {server.url}/ (alerts: {server.url}/_local/alerts)",
            "  ANCHORWATCH_PAGERDUTY__ENABLED=true "
            f"ANCHORWATCH_PAGERDUTY__URL={server.enqueue_url} "
            f"ANCHORWATCH_PAGERDUTY__ROUTING_KEY={routing_key or LOCAL_ROUTING_KEY}",
            f"  faults: curl -X POST {server.url}/_local/faults -d "
            """'{"method": "enqueue", "status": 429, "times": 2}'""",
        ],
    )


@alerting.command("send-test")
@click.option(
    "--doc-type",
    default="purchase_contract",
    show_default=True,
    help="Document type of the sample incident.",
)
@click.option(
    "--severity",
    type=click.Choice(["warning", "critical"]),
    default="critical",
    show_default=True,
    help="Severity of the sample incident.",
)
@click.pass_context
def send_test(ctx: click.Context, doc_type: str, severity: str) -> None:
    """Send a sample incident through the configured integrations: open, one update (with
    the chart), resolve. Prints the Slack thread and the Jira key."""
    from anchorwatch.alerting.integrations.jira.notifier import JiraNotifier
    from anchorwatch.alerting.integrations.slack.notifier import (
        SlackNotifier,
        SlackWebhookNotifier,
    )
    from anchorwatch.alerting.settings import AlertingSettings

    settings = load_settings(ctx, AlertingSettings)
    retry = settings.retry.policy()
    views, history = sample_incident(doc_type, cast(Severity, severity))
    dashboard = settings.routing.dashboard_url(doc_type)
    opened, updated, resolved = (replace(v, dashboard_url=dashboard) for v in views)
    sent = False
    if settings.slack.mode == "bot":
        slack = SlackNotifier.from_settings(settings.slack, settings.routing, retry)
        ref = slack.open(opened)
        result = slack.update(ref, updated, history[:26])  # up to the updated window
        slack.resolve(ref, resolved)
        click.echo(f"slack: thread {ref.channel}/{ref.ts}, chart uploaded: {result.chart_uploaded}")
        sent = True
    elif settings.slack.mode == "webhook":
        hook = SlackWebhookNotifier.from_settings(settings.slack, retry, settings.routing)
        hook.open(opened)
        hook.resolve(resolved)
        click.echo("slack: two webhook messages sent")
        sent = True
    if settings.jira.enabled:
        jira = JiraNotifier.from_settings(settings.jira, retry, settings.routing)
        ticket = jira.open_or_reopen(opened, history[:24])  # up to the opening window
        jira.comment(ticket.key, updated, last_comment_ms=0)
        outcome = jira.resolve(ticket.key, resolved)
        click.echo(
            f"jira: {ticket.key} ({ticket.action}), resolved: {outcome.transitioned}"
            + (f" ({outcome.error})" if outcome.error else "")
        )
        sent = True
    if not sent:
        raise click.ClickException(
            "nothing configured: set ANCHORWATCH_SLACK__MODE and/or ANCHORWATCH_JIRA__ENABLED"
        )


def sample_incident(
    doc_type: str, severity: Severity
) -> tuple[tuple[IncidentView, IncidentView, IncidentView], list[WindowPoint]]:
    """A plausible incident (open, updated, resolved views) and 30 windows of history."""
    start = 1_767_621_600_000  # 2026-01-05 14:00 UTC
    drift = [0.52 + 0.01 * (i % 4) for i in range(22)] + [0.88, 0.91, 0.93, 0.95, 0.92, 0.9]
    drift += [0.61, 0.55]
    history = [
        WindowPoint(start + i * 60_000, start + (i + 1) * 60_000, d, 0.85, 120 + i)
        for i, d in enumerate(drift)
    ]

    def window(i: int) -> WindowAggregate:
        p = history[i]
        return WindowAggregate(
            doc_type=doc_type,
            window_start_ms=p.window_start_ms,
            window_end_ms=p.window_end_ms,
            request_count=p.request_count,
            mean_drift=p.mean_drift,
            p95_drift=min(1.0, p.mean_drift + 0.05),
            zero_anchor_share=0.31,
        )

    reasons = [
        Reason(code="above_critical", message="mean drift 0.910 above critical threshold 0.900"),
        Reason(
            code="zero_anchors",
            message="31% of requests had no anchors (drift stuck at "
            "0.0): documents without anchor markers",
        ),
    ]
    incident_id = "inc-" + hashlib.sha256(f"{doc_type}:{start}".encode()).hexdigest()[:16]
    opened = IncidentView(
        incident_id=incident_id,
        doc_type=doc_type,
        severity=severity,
        state="open",
        opened_at_ms=history[23].window_end_ms,
        resolved_at_ms=None,
        window=window(23),
        threshold=0.85,
        baseline_version="b-2026-01-04",
        reasons=reasons,
        peak_mean_drift=0.91,
    )
    updated = replace(
        opened,
        state="updated",
        window=window(25),
        peak_mean_drift=0.95,
        reasons=[
            Reason(
                code="above_critical", message="mean drift 0.950 above critical threshold 0.900"
            ),
            reasons[1],
        ],
    )
    resolved = replace(
        opened,
        state="resolved",
        window=window(29),
        resolved_at_ms=history[29].window_end_ms,
        peak_mean_drift=0.95,
        reasons=[],
    )
    return (opened, updated, resolved), history
