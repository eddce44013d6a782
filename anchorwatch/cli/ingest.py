"""`anchorwatch ingest serve | replay | credentials`: entry points only; the work is in
anchorwatch.connectors (server.py, replay.py, credentials.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

import click

from anchorwatch.cli.common import load_settings, progress
from anchorwatch.cli.ingest_credentials import credentials
from anchorwatch.connectors.settings import IngestSettings


@click.group("ingest")
def ingest() -> None:
    """Gateway logs into Kafka: validated events to the snapshots topic (and each one's
    summary to the summaries topic, when it is set), rejects (with the reason) to the
    dead-letter topic."""


ingest.add_command(credentials)


@ingest.command("serve")
@click.option("--host", help="Address to bind. [default: 127.0.0.1]")
@click.option("--port", type=int, help="Port to listen on. [default: 8686]")
@click.option("--workers", type=int, help="Processes sharing the port (SO_REUSEPORT). [default: 1]")
@click.option("--max-body-bytes", type=int, help="Larger bodies get 413. [default: 16 MiB]")
@click.option(
    "--auth-token-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="File holding the bearer token clients must send (or ANCHORWATCH_INGEST__AUTH_TOKEN "
    "/ _AUTH_TOKEN_FILE). One of them is required, unless --insecure-no-auth.",
)
@click.option(
    "--credentials-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Gateway credentials (`anchorwatch ingest credentials add`), reread when it "
    "changes; with a token too, the token writes as gateway `default`.",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    default=None,
    help="Accept writers without a bearer token: for a local demo or a test only. Logged as "
    "a warning at every start; the gauge anchorwatch_ingest_insecure_no_auth is 1.",
)
@click.pass_context
def serve_cmd(ctx: click.Context, /, **opts: Any) -> None:
    """Run the HTTP ingest service: POST /v1/kong (Kong http-log, single or batched),
    POST /v1/events (NDJSON snapshot events), GET /healthz, /readyz, /metrics.
    Writers must send `Authorization: Bearer <token>`: a gateway's secret from
    --credentials-file or the shared token; with neither the service refuses to start,
    unless --insecure-no-auth. Answers 2xx only once Kafka has
    acknowledged every record; stops gracefully on SIGTERM (in-flight requests finish, the
    producer flushes)."""
    from anchorwatch.connectors.server import serve

    settings = load_settings(ctx, IngestSettings, ingest=opts)
    root = ctx.find_root()
    level = root.params.get("log_level") or "INFO"
    serve(settings, log_level=str(level))


@ingest.command("replay")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "kong", "ndjson"]),
    default="auto",
    show_default=True,
    help="kong: one Kong log entry (or http-log batch array) per line; ndjson: snapshot "
    "events; auto: decided by the first JSON line.",
)
@click.option(
    "--source",
    help="Label for the events' `source` and the dead letters. [default: replay:<file name>]",
)
@click.option(
    "--ack-timeout-s",
    type=float,
    default=60.0,
    show_default=True,
    help="How long a record may wait for Kafka's acknowledgement before the replay fails.",
)
@click.pass_context
def replay_cmd(
    ctx: click.Context, file: Path, fmt: str, source: str | None, ack_timeout_s: float
) -> None:
    """Replay a file (or - for stdin) of NDJSON snapshot events or Kong log entries through
    the same validation and dead-lettering as the service; prints a summary."""
    from anchorwatch.connectors.publisher import SnapshotPublisher
    from anchorwatch.connectors.replay import replay
    from anchorwatch.connectors.server import kong_format

    settings = load_settings(ctx, IngestSettings)
    stdin = str(file) == "-"
    label = source or f"replay:{'stdin' if stdin else file.name}"
    publisher = SnapshotPublisher(
        settings.kafka,
        settings.topics,
        source=label,
        producer_overrides={"message.timeout.ms": int(ack_timeout_s * 1000)},
    )
    stream: IO[bytes] = sys.stdin.buffer if stdin else file.open("rb")
    total = None if stdin else file.stat().st_size
    try:
        with progress("replay", total=total, unit="B", unit_scale=True) as bar:
            summary = replay(
                stream,
                publisher,
                fmt=fmt,  # type: ignore[arg-type]  # click.Choice guarantees the literal
                kong_format=kong_format(settings),
                source=label,
                progress=bar.update,
            )
    finally:
        if not stdin:
            stream.close()
    rate = summary.accepted / summary.elapsed_s if summary.elapsed_s else 0.0
    click.echo(
        f"replayed {'stdin' if stdin else file} ({summary.format or 'empty'}): "
        f"{summary.lines} lines, {summary.accepted} events -> {settings.topics.snapshots}, "
        f"{summary.rejected} rejects -> {settings.topics.dead_letter}; all "
        f"{summary.delivered} records acknowledged by Kafka in {summary.elapsed_s:.1f}s "
        f"({rate:,.0f} events/s)"
    )
    for reason, count in summary.reasons.most_common(10):
        click.echo(f"  rejected {count:>7}  {reason}")
