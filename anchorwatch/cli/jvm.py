"""`anchorwatch jvm fetch`: the pinned JVM artifacts; the work is in anchorwatch.stack.jvm."""

from __future__ import annotations

import time

import click

from anchorwatch.cli.common import load_settings


@click.group()
def jvm() -> None:
    """The pinned JVM artifacts (Kafka broker, Flink Kafka connector)."""


@jvm.command("fetch")
@click.option("--force", is_flag=True, help="Fetch again even if the cache is current.")
@click.pass_context
def jvm_fetch(ctx: click.Context, force: bool) -> None:
    """Fetch the pinned jars from Maven Central into the cache (idempotent; a warm cache
    uses no network)."""
    from anchorwatch.stack.jvm import fetch
    from anchorwatch.stack.stack import StackSettings

    settings = load_settings(ctx, StackSettings)
    started = time.monotonic()
    artifacts, fetched = fetch(settings.jvm.cache_dir, force=force)
    state = f"fetched in {time.monotonic() - started:.1f}s" if fetched else "already current"
    click.echo(f"JVM artifacts {state}: {artifacts.root}")
    click.echo(f"  kafka broker:     {artifacts.kafka_dir}")
    click.echo(f"  flink jobs' jar:  {artifacts.flink_jobs_jar()}")
