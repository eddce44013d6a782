"""`anchorwatch`: the one command line. The root group holds the options every command
shares (--config, --log-level); each command group is a module of this package, and the
work lives in the modules those call. Groups as a person looks for them:

    ingest      gateway logs into Kafka (serve, replay)
    job         the Flink drift job (run, submit, list, cancel, savepoint)
    baseline    per doc type baselines (fit, show) and the backtest replaying a history
    alerting    incidents to Slack and Jira (serve, incidents, send-test, local servers)
    demo        all of it, end to end, on this machine
    stack, jvm  a local Kafka and Flink, and the pinned jars they run
    gate        a release gate for a new model version on a test run's drift
    generate, read, contracts, settings
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from anchorwatch import __version__, logs
from anchorwatch.cli.alerting import alerting
from anchorwatch.cli.baseline import baseline
from anchorwatch.cli.contracts import contracts
from anchorwatch.cli.demo import demo
from anchorwatch.cli.gate import gate_cmd
from anchorwatch.cli.generate import generate_cmd
from anchorwatch.cli.ingest import ingest
from anchorwatch.cli.job import job
from anchorwatch.cli.jvm import jvm
from anchorwatch.cli.read import read_cmd
from anchorwatch.cli.settings_cmd import settings_cmd
from anchorwatch.cli.stack import stack
from anchorwatch.errors import AnchorwatchError


class _PipelineOrder(click.Group):
    """Lists commands in the order they are added (the pipeline's), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(
    cls=_PipelineOrder,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="ANCHORWATCH_CONFIG",
    help="TOML settings file ([kafka], [topics], [stack], [job] ...). Env: ANCHORWATCH_CONFIG.",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    envvar="ANCHORWATCH_LOG_LEVEL",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Level of the JSON log lines written to stderr.",
)
@click.version_option(__version__, prog_name="anchorwatch")
@click.pass_context
def cli(ctx: click.Context, config: Path | None, log_level: str) -> None:
    """anchorwatch: per-document-type semantic drift monitoring for LLM gateways.

    Every setting can come from ANCHORWATCH_<SECTION>__<FIELD> environment variables or a
    TOML file; `anchorwatch settings` lists them all.
    """
    logs.configure(log_level)
    ctx.obj = {"config": config}


# The pipeline first (in, judged, baselines, out), then what runs it and what helps.
for _command in (
    ingest,
    job,
    baseline,
    alerting,
    demo,
    stack,
    jvm,
    generate_cmd,
    read_cmd,
    gate_cmd,
    contracts,
    settings_cmd,
):
    cli.add_command(_command)


def main() -> None:
    try:
        # Without standalone mode, click returns a command's ctx.exit(code) instead of exiting.
        code = cli(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except AnchorwatchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
