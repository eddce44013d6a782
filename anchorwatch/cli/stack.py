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
    click.option(
        "--kafka-port", type=int, help="Kafka client port (node i: + 2(i-1)). [default: 9092]"
    ),
    click.option(
        "--controller-port",
        type=int,
        help="KRaft controller port (node i: + 2(i-1)). [default: 9093]",
    ),
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
    """A real local Kafka (KRaft, one or more nodes) and optionally a Flink session
    cluster, on loopback."""


@stack.command("up")
@_stack_options
@click.option(
    "--flink/--no-flink",
    default=None,
    help="Also start a Flink standalone session cluster. [default: no]",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    help="Kafka nodes; from 3 on, topics get 3 replicas, 2 in sync. "
    "[default: as the state directory holds, else 1]",
)
@click.option(
    "--taskmanagers",
    "flink_taskmanagers",
    type=click.IntRange(1, 16),
    help="Flink TaskManagers (implies --flink). [default: as last started, else 1]",
)
@click.option("--partitions", type=int, help="Partitions of new data topics. [default: 4]")
@click.pass_context
def stack_up(ctx: click.Context, /, flink: bool | None, **opts: Any) -> None:
    """Start whatever is not running: every Kafka node (formatting storage on first start),
    the project's topics, and optionally Flink (JobManager, TaskManagers up to the count).
    Run again after a broker or TaskManager died to replace it. Waits until each answers."""
    if flink is None and opts.get("flink_taskmanagers"):
        flink = True
    s = _stack(ctx, **opts)
    report = s.up(with_flink=flink)
    click.echo(f"JVM artifacts: {report['jvm_artifacts']}")
    click.echo(f"kafka: {report['kafka']} at {s.kafka.bootstrap}")
    factor = s.topics.replication_factor
    click.echo(f"  {s.kafka.size} node(s); topics: replication factor {factor}")
    for topic, state in report["topics"].items():
        click.echo(f"  topic {topic}: {state}")
    if "flink" in report:
        click.echo(f"flink: {report['flink']}, web UI {s.flink.rest_url}")
    click.echo(f"ready after {report['ready_after_s']}s; state in {s.settings.stack.state_dir}")


@stack.command("down")
@_stack_options
@click.pass_context
def stack_down(ctx: click.Context, /, **opts: Any) -> None:
    """Stop exactly what `stack up` started, every Kafka node, Flink's daemons and the
    Python workers they started (graceful first, then forced)."""
    for name, state in _stack(ctx, **opts).down().items():
        click.echo(f"{name}: {state}")


@stack.command("status")
@_stack_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def stack_status(ctx: click.Context, /, as_json: bool, **opts: Any) -> None:
    """Say what is running (each Kafka node, the JobManager, each TaskManager), with pids,
    addresses and log locations. Exit 1 if nothing is."""
    rows = _stack(ctx, **opts).status()
    if as_json:
        click.echo(json.dumps([{**r.__dict__, "log": str(r.log)} for r in rows], indent=2))
    else:
        for r in rows:
            state = f"running (pid {', '.join(map(str, r.pids))})" if r.running else "stopped"
            detail = f"  ({r.detail})" if r.detail else ""
            click.echo(f"{r.name:<20} {state:<24} {r.address:<24} logs: {r.log}{detail}")
    if not any(r.running for r in rows):
        ctx.exit(1)
