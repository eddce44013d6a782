"""`anchorwatch settings`: every setting of every service, with its environment variable."""

from __future__ import annotations

import click

from anchorwatch.settings import ServiceSettings


def all_settings() -> list[type[ServiceSettings]]:
    """Every service's settings class (docs/settings.md documents each of their fields)."""
    from anchorwatch.alerting.settings import AlertingSettings
    from anchorwatch.connectors.settings import IngestSettings
    from anchorwatch.jobs.baseline_settings import BaselineSettings
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.stack import StackSettings

    return [StackSettings, JobSettings, BaselineSettings, IngestSettings, AlertingSettings]


@click.command("settings")
def settings_cmd() -> None:
    """List every setting: its environment variable, meaning and default."""
    from anchorwatch.settings import describe_fields

    seen: set[str] = set()
    for cls in all_settings():
        for env, text in describe_fields(cls):
            if env not in seen:
                seen.add(env)
                click.echo(f"{env}\n    {text}")
