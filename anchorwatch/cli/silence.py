"""`anchorwatch alerting silence ...`: add, list and expire silences in the alerting
service's state file (the running service picks them up at its next batch). The rules live
in anchorwatch.alerting.silences; this only wires."""

from __future__ import annotations

import getpass
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from anchorwatch.cli.common import load_settings

if TYPE_CHECKING:
    from anchorwatch.alerting.database import StateLocation

_STATE_DIR = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The service's state directory (SQLite). [default: alerting.state_url if set, else "
    "alerting.state_dir]",
)


def _state_dir(ctx: click.Context, given: Path | None) -> Path | StateLocation:
    """The state the command reads: the directory given, else the settings' state."""
    from anchorwatch.alerting.settings import AlertingSettings

    return given or load_settings(ctx, AlertingSettings).alerting.state_location()


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ms / 1000))


@click.group("silence")
def silence() -> None:
    """Silences: incidents of a doc type (and severity) are judged, stored and counted but
    not posted to Slack or Jira until the silence ends; one still open then is posted once."""


@silence.command("add")
@click.option("--doc-type", default=None, help="The doc type to mute.")
@click.option("--all", "all_types", is_flag=True, help="Mute every doc type (instead of one).")
@click.option(
    "--severity",
    type=click.Choice(["warning", "critical"]),
    default=None,
    help="Mute only this severity. [default: both]",
)
@click.option("--for", "duration", required=True, help="How long: 2h, 90m, 1d12h (at most 30d).")
@click.option("--reason", required=True, help="Why: shown wherever the silence is listed.")
@click.option("--author", default=None, help="Who. [default: the login name]")
@_STATE_DIR
@click.pass_context
def add(
    ctx: click.Context,
    doc_type: str | None,
    all_types: bool,
    severity: str | None,
    duration: str,
    reason: str,
    author: str | None,
    state_dir: Path | None,
) -> None:
    """Add a silence; prints its id."""
    from anchorwatch.alerting.silence_book import SilenceBook
    from anchorwatch.alerting.silences import new_silence, parse_duration

    made = new_silence(
        doc_type=doc_type,
        all_types=all_types,
        severity=severity,
        duration_s=parse_duration(duration),
        reason=reason,
        author=author or getpass.getuser(),
        now_ms=int(time.time() * 1000),
    )
    book = SilenceBook(_state_dir(ctx, state_dir))
    try:
        book.add(made)
    finally:
        book.close()
    click.echo(made.silence_id)


@silence.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also list silences that have ended.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_STATE_DIR
@click.pass_context
def list_(ctx: click.Context, show_all: bool, as_json: bool, state_dir: Path | None) -> None:
    """List the silences in force (with --all, ended ones too), newest first."""
    from dataclasses import asdict

    import orjson

    from anchorwatch.alerting.render import clean_text, truncate
    from anchorwatch.alerting.silence_book import SilenceBook

    now_ms = int(time.time() * 1000)
    book = SilenceBook(_state_dir(ctx, state_dir))
    try:
        found = book.all() if show_all else book.active(now_ms)
    finally:
        book.close()
    if as_json:
        for s in found:
            click.echo(orjson.dumps({**asdict(s), "active": s.active(now_ms)}).decode())
        return
    if not found:
        click.echo("no silences" if show_all else "no silences in force")
        return
    click.echo(f"{'ID':<18}{'UNTIL (UTC)':<18}{'SEVERITY':<10}{'AUTHOR':<16}DOC TYPE: REASON")
    for s in found:
        scope = "(every type)" if s.doc_type is None else truncate(clean_text(s.doc_type), 40)
        ended = "" if s.active(now_ms) else " [ended]"
        click.echo(
            f"{s.silence_id:<18}{_iso(s.until_ms):<18}{s.severity or 'any':<10}"
            f"{truncate(clean_text(s.author), 15):<16}{scope}: "
            f"{truncate(clean_text(s.reason), 80)}{ended}"
        )


@silence.command("expire")
@click.argument("silence_id")
@click.option("--author", default=None, help="Who. [default: the login name]")
@_STATE_DIR
@click.pass_context
def expire(ctx: click.Context, silence_id: str, author: str | None, state_dir: Path | None) -> None:
    """End a silence now; an incident it held that is still open is posted once."""
    from anchorwatch.alerting.silence_book import SilenceBook

    book = SilenceBook(_state_dir(ctx, state_dir))
    try:
        ended = book.expire(
            silence_id, by=author or getpass.getuser(), now_ms=int(time.time() * 1000)
        )
    finally:
        book.close()
    click.echo(f"expired {ended.silence_id}")
