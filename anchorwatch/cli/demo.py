"""`anchorwatch demo`: the whole pipeline as deployed, end to end; the work is in
anchorwatch.demo.journey."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from anchorwatch.cli.common import load_settings


@click.command("demo")
@click.option("--seed", type=int, default=7, show_default=True, help="Same seed, same traffic.")
@click.option(
    "--doc-types",
    type=click.IntRange(6, 18),
    default=6,
    show_default=True,
    help="Document types in the traffic (labelled incidents go to the 5 busiest, one each).",
)
@click.option(
    "--history-minutes",
    type=click.IntRange(60, 24 * 60),
    default=180,
    show_default=True,
    help="History replayed first; baselines are fitted on it.",
)
@click.option(
    "--live-minutes",
    type=click.IntRange(25, 240),
    default=34,
    show_default=True,
    help="Live traffic with the labelled incidents.",
)
@click.option(
    "--speed",
    type=click.FloatRange(1, 120),
    default=30.0,
    show_default=True,
    help="Live event time runs this many times faster than the wall clock.",
)
@click.option(
    "--alerting-instances",
    type=click.IntRange(1, 2),
    default=2,
    show_default=True,
    help="2: a leader and a standby on one PostgreSQL state, the leader killed -9 late in "
    "the live traffic (needs PostgreSQL's server binaries); 1: one on its SQLite file.",
)
@click.option(
    "--alerting-work-split",
    is_flag=True,
    help="With two alerting instances: they share the verdict partitions "
    "(alerting.work_split) instead of a leader and a standby, and the owner of partition 0 "
    "(which decides the groups) is killed -9 instead of the leader.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".anchorwatch/demo"),
    show_default=True,
    help="Logs, pids and the alerting state of each run.",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Leave everything running (stack, job, services, topics) and print where.",
)
@click.pass_context
def demo(ctx: click.Context, /, keep: bool, state_dir: Path, **opts: Any) -> None:
    """The whole pipeline as deployed, end to end: Kafka and a Flink session cluster, the
    drift job submitted to it, Kong http-log batches into the ingest service, baselines
    fitted on hours of history, live traffic with labelled incidents, the alerting service
    posting to Slack and Jira (local ones unless configured). Prints each incident as it
    is posted, then the figures. Exit 1 when an incident is missed, a false one raised, a
    window figure differs from an independent computation or a broken entry is not
    dead-lettered."""
    from concurrent.futures import ThreadPoolExecutor

    from anchorwatch.alerting.settings import AlertingSettings
    from anchorwatch.demo import journey
    from anchorwatch.demo.journey_plan import make_plan
    from anchorwatch.demo.journey_results import summary_lines
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.stack import Stack, StackSettings

    if opts["alerting_work_split"] and opts["alerting_instances"] < 2:
        raise click.UsageError("--alerting-work-split needs two alerting instances")
    options = journey.JourneyOptions(
        state_dir=state_dir,
        seed=opts["seed"],
        doc_types=opts["doc_types"],
        history_minutes=opts["history_minutes"],
        live_minutes=opts["live_minutes"],
        speed=opts["speed"],
        alerting_instances=opts["alerting_instances"],
        alerting_work_split=opts["alerting_work_split"],
    )
    s = Stack(load_settings(ctx, StackSettings))
    started_stack = s.kafka.pid() is None
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:  # generating the traffic overlaps the stack's start
        planned = pool.submit(
            make_plan,
            int(time.time() * 1000),
            seed=options.seed,
            doc_types=options.doc_types,
            history_minutes=options.history_minutes,
            live_minutes=options.live_minutes,
        )
        s.up(with_flink=True)
        plan = planned.result()
    click.echo(
        f"[0/6] kafka at {s.kafka.bootstrap}, flink at {s.flink.rest_url} "
        f"({time.monotonic() - t0:.0f}s)"
    )
    run = journey.Journey(
        s,
        load_settings(ctx, JobSettings),
        load_settings(ctx, AlertingSettings),
        options,
        click.echo,
    )
    report = None
    try:
        report = run.run(plan)
    finally:
        if not keep:
            run.stop()
            if started_stack:
                s.down()
        elif run.pair is not None and run.pair.server is not None:
            run.pair.server.detach()  # the alerting state outlives this command
    click.echo(f"[6/6] done in {time.monotonic() - t0:.0f}s")
    for line in summary_lines(report):
        click.echo(line)
    if keep:
        click.echo(
            # The services first: they hang on to Kafka while it goes away.
            f"left running (stop: kill the pids in {run.run_dir}/*.pid, "
            "then anchorwatch stack down):"
        )
        for name, address in report.addresses.items():
            click.echo(f"  {name:<9} {address}")
    if not report.ok:
        ctx.exit(1)
