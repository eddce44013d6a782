"""`anchorwatch stack up | down | status`: a real local Kafka and Flink on loopback; the work
is in anchorwatch.stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from anchorwatch.cli.common import load_settings, options

_stack_options = options(
    click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Pids, logs and data. [default: .anchorwatch/stack]",
    ),
    click.option("--kafka-port", type=int, help="Kafka client port. [default: 9092]"),
    click.option("--controller-port", type=int, help="KRaft controller port. [default: 9093]"),
    click.option("--flink-rest-port", type=int, help="Flink REST/web port. [default: 8081]"),
    click.option("--flink-rpc-port", type=int, help="Flink JobManager RPC port. [default: 6123]"),
)


def _stack(ctx: click.Context, **opts: Any) -> Any:
    from anchorwatch.stack.stack import Stack, StackSettings

    partitions = opts.pop("partitions", None)
    settings = load_settings(ctx, StackSettings, stack=opts, topics={"partitions": partitions})
    return Stack(settings)


@click.group()
def stack() -> None:
    """A real local Kafka (KRaft) and optionally a Flink session cluster, on loopback."""


@stack.command("up")
@_stack_options
@click.option(
    "--flink/--no-flink",
    default=None,
    help="Also start a Flink standalone session cluster. [default: no]",
)
@click.option("--partitions", type=int, help="Partitions of new data topics. [default: 4]")
@click.pass_context
def stack_up(ctx: click.Context, /, flink: bool | None, **opts: Any) -> None:
    """Start Kafka (formatting its storage on first start), create the project's topics,
    and optionally start Flink. Waits until each answers. Idempotent."""
    s = _stack(ctx, **opts)
    report = s.up(with_flink=flink)
    click.echo(f"JVM artifacts: {report['jvm_artifacts']}")
    click.echo(f"kafka: {report['kafka']} at {s.kafka.bootstrap}")
    for topic, state in report["topics"].items():
        click.echo(f"  topic {topic}: {state}")
    if "flink" in report:
        click.echo(f"flink: {report['flink']}, web UI {s.flink.rest_url}")
    click.echo(f"ready after {report['ready_after_s']}s; state in {s.settings.stack.state_dir}")


@stack.command("down")
@_stack_options
@click.pass_context
def stack_down(ctx: click.Context, /, **opts: Any) -> None:
    """Stop exactly what `stack up` started (graceful first, then forced)."""
    for name, state in _stack(ctx, **opts).down().items():
        click.echo(f"{name}: {state}")


@stack.command("status")
@_stack_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def stack_status(ctx: click.Context, /, as_json: bool, **opts: Any) -> None:
    """Say what is running, with pids, addresses and log locations. Exit 1 if nothing is."""
    rows = _stack(ctx, **opts).status()
    if as_json:
        click.echo(json.dumps([{**r.__dict__, "log": str(r.log)} for r in rows], indent=2))
    else:
        for r in rows:
            state = f"running (pid {', '.join(map(str, r.pids))})" if r.running else "stopped"
            click.echo(f"{r.name:<18} {state:<24} {r.address:<24} logs: {r.log}")
    if not any(r.running for r in rows):
        ctx.exit(1)
