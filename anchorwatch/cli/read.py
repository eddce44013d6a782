"""`anchorwatch read TOPIC`: the records now on a topic, one JSON value per line."""

from __future__ import annotations

import click

from anchorwatch.cli.common import load_settings


@click.command("read")
@click.argument("topic")
@click.option("--limit", type=int, default=None, help="Stop after this many records.")
@click.pass_context
def read_cmd(ctx: click.Context, topic: str, limit: int | None) -> None:
    """Print the records now in TOPIC (one JSON value per line), then exit."""
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.kafkaio import read_topic

    settings = load_settings(ctx, JobSettings)
    for i, m in enumerate(read_topic(settings.kafka, topic)):
        if limit is not None and i >= limit:
            break
        click.echo((m.value or b"null").decode("utf-8", errors="replace"))
