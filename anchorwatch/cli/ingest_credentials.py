"""`anchorwatch ingest credentials add | list | revoke`: the gateway credentials file
(``ingest.credentials_file``; the format: anchorwatch.connectors.credentials)."""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from anchorwatch.alerting.silences import SilenceError, parse_duration
from anchorwatch.cli.common import load_settings
from anchorwatch.connectors import credentials as creds
from anchorwatch.connectors.settings import IngestSettings

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def _file(ctx: click.Context, given: Path | None) -> Path:
    if given is not None:
        return given
    path = load_settings(ctx, IngestSettings).ingest.credentials_file
    if path is None:
        raise click.UsageError(
            "--file: no credentials file given, and ingest.credentials_file "
            "(ANCHORWATCH_INGEST__CREDENTIALS_FILE) is not set"
        )
    return path


def _when(option: str, value: str | None) -> datetime | None:
    """An ISO 8601 date or time (UTC unless it says), or a span from now: 90d, 12h, 30m."""
    if value is None:
        return None
    try:  # a span, as silences take them
        span = timedelta(seconds=parse_duration(value))
    except SilenceError:
        pass
    else:
        return datetime.now(UTC).replace(microsecond=0) + span
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither an ISO 8601 time (2027-01-31, 2027-01-31T12:00Z) nor a "
            "span from now (90d, 12h, 30m)",
            param_hint=option,
        ) from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if when <= datetime.now(UTC):
        raise click.BadParameter(f"{value!r} is in the past", param_hint=option)
    return when


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer of the file at a time (two `add`s at once would lose one's secret)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read(path: Path) -> creds.CredentialsFile:
    try:
        return creds.read(path)
    except creds.CredentialsError as exc:
        raise click.ClickException(str(exc)) from None


def _checked(model: type[Any], option: str, **fields: Any) -> Any:
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise click.BadParameter(f"{where}: {problem['msg']}", param_hint=option) from None


file_option = click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The credentials file. [default: ingest.credentials_file]",
)


@click.group("credentials")
def credentials() -> None:
    """Gateway credentials for `ingest serve` (ingest.credentials_file): per gateway, the
    doc types it may write, its rate limit, expiry and secrets (stored as SHA-256 digests).
    The running service rereads the file within ingest.credentials_poll_s of a change."""


@credentials.command("add")
@click.option("--gateway", required=True, help="Gateway name: a-z, 0-9, . _ - (up to 63).")
@click.option(
    "--doc-types",
    help="Comma-separated doc types or fnmatch patterns it may write ('invoice,medical_*', "
    "'*' for all). Required for a new gateway; replaces the scope of an existing one.",
)
@click.option("--rate", type=float, help="Rate limit per second (see --rate-unit).")
@click.option("--burst", type=int, help="What may come at once. [default: twice --rate, >= 1]")
@click.option(
    "--rate-unit",
    type=click.Choice(["requests", "events"]),
    default="requests",
    show_default=True,
    help="What --rate counts.",
)
@click.option("--no-rate", is_flag=True, help="Remove an existing gateway's rate limit.")
@click.option("--expires", help="Gateway expiry: ISO 8601 time or span (90d, 12h).")
@click.option("--secret-expires", help="The new secret's expiry: ISO 8601 time or span.")
@file_option
@click.pass_context
def add_cmd(
    ctx: click.Context,
    /,
    gateway: str,
    doc_types: str | None,
    rate: float | None,
    burst: int | None,
    rate_unit: str,
    no_rate: bool,
    expires: str | None,
    secret_expires: str | None,
    file: Path | None,
) -> None:
    """Add a gateway, or a new secret to an existing one (rotation: its other secrets stay
    valid until revoked). Prints the new secret once: it is stored only as a digest."""
    path = _file(ctx, file)
    if not _NAME.match(gateway):
        raise click.BadParameter(
            f"{gateway!r}: a gateway name is 1 to 63 of a-z, 0-9, '.', '_', '-', starting "
            "with a letter or digit",
            param_hint="--gateway",
        )
    if rate is not None and no_rate:
        raise click.UsageError("--no-rate: not together with --rate")
    if burst is not None and rate is None:
        raise click.UsageError("--burst: needs --rate")
    gateway_expires = _when("--expires", expires)
    secret_expiry = _when("--secret-expires", secret_expires)
    with _locked(path):
        current = _read(path)
        old = current.gateways.get(gateway)
        if doc_types is not None:
            scope = _scope(doc_types)
        elif old is not None:
            scope = old.doc_types
        else:
            raise click.UsageError(f"--doc-types: required for the new gateway {gateway!r}")
        limit = None if no_rate else (old.rate if old is not None else None)
        if rate is not None:
            limit = _checked(
                creds.RateLimit,
                "--rate",
                per_s=rate,
                burst=burst if burst is not None else max(1, round(rate * 2)),
                unit=rate_unit,
            )
        taken = {s.id for s in old.secrets} if old is not None else set()
        secret_id = next(i for i in iter(lambda: secrets.token_hex(4), None) if i not in taken)
        token = creds.new_token()
        secret = creds.SecretEntry(
            id=secret_id,
            sha256=creds.digest_hex(token),
            created=datetime.now(UTC).replace(microsecond=0),
            expires=secret_expiry,
        )
        entry = _checked(
            creds.GatewayEntry,
            "--doc-types",
            doc_types=scope,
            rate=limit,
            expires=gateway_expires if expires is not None else (old.expires if old else None),
            secrets=[*(old.secrets if old else []), secret],
            # Set by editing the file (mutual TLS); a new secret keeps it.
            client_cert_cn=old.client_cert_cn if old else None,
        )
        gateways = {**current.gateways, gateway: entry}
        updated = _checked(creds.CredentialsFile, "--gateway", gateways=gateways)
        try:
            creds.build(updated, path)
        except creds.CredentialsError as exc:
            raise click.ClickException(str(exc)) from None
        creds.write(path, updated)
    click.echo(
        f"{'added secret to' if old else 'added'} gateway {gateway} (secret id {secret_id}) "
        f"in {path}; its token, shown only now:",
        err=True,
    )
    click.echo(token)


def _scope(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise click.BadParameter(
            f"{text!r}: expected comma-separated doc types or patterns, none empty",
            param_hint="--doc-types",
        )
    return parts


@credentials.command("list")
@file_option
@click.pass_context
def list_cmd(ctx: click.Context, /, file: Path | None) -> None:
    """The gateways: name, doc types, rate limit, expiry, and each secret's id, creation and
    expiry (never the secrets or their digests)."""
    path = _file(ctx, file)
    current = _read(path)
    if not current.gateways:
        click.echo(f"no gateways in {path}")
        return
    for name, entry in sorted(current.gateways.items()):
        rate = (
            f"{entry.rate.per_s:g} {entry.rate.unit}/s, burst {entry.rate.burst}"
            if entry.rate
            else "no limit"
        )
        click.echo(
            f"{name}: doc types {','.join(entry.doc_types)}; rate {rate}; "
            f"expires {_show(entry.expires)}"
        )
        for s in entry.secrets:
            click.echo(f"  secret {s.id}: created {_show(s.created)}, expires {_show(s.expires)}")
        if not entry.secrets:
            click.echo("  no secrets: it cannot write")


def _show(when: datetime | None) -> str:
    return "never" if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@credentials.command("revoke")
@click.option("--gateway", required=True, help="The gateway.")
@click.option("--secret-id", help="Revoke this secret only. [default: the whole gateway]")
@file_option
@click.pass_context
def revoke_cmd(
    ctx: click.Context, /, gateway: str, secret_id: str | None, file: Path | None
) -> None:
    """Revoke one secret of a gateway, or the gateway with all its secrets. The running
    service refuses them within ingest.credentials_poll_s."""
    path = _file(ctx, file)
    with _locked(path):
        current = _read(path)
        entry = current.gateways.get(gateway)
        if entry is None:
            known = ", ".join(sorted(current.gateways)) or "none"
            raise click.BadParameter(
                f"no gateway {gateway!r} in {path} (gateways: {known})", param_hint="--gateway"
            )
        gateways = dict(current.gateways)
        if secret_id is None:
            del gateways[gateway]
            what = f"gateway {gateway} and its {len(entry.secrets)} secrets"
        else:
            kept = [s for s in entry.secrets if s.id != secret_id]
            if len(kept) == len(entry.secrets):
                ids = ", ".join(s.id for s in entry.secrets) or "none"
                raise click.BadParameter(
                    f"gateway {gateway!r} has no secret {secret_id!r} (its secrets: {ids})",
                    param_hint="--secret-id",
                )
            gateways[gateway] = entry.model_copy(update={"secrets": kept})
            what = f"secret {secret_id} of gateway {gateway}"
        creds.write(path, current.model_copy(update={"gateways": gateways}))
    click.echo(f"revoked {what} in {path}")
