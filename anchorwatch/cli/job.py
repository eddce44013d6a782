"""`anchorwatch job run | submit | list | cancel | savepoint`: the Flink drift job; the work
is in anchorwatch.jobs."""

from __future__ import annotations

import time
from typing import Any

import click

from anchorwatch.cli.common import load_settings, options

_jobmanager_option = click.option(
    "--jobmanager", required=True, help="The session cluster's REST address, HOST:PORT."
)


@click.group()
def job() -> None:
    """The Flink drift job."""


_job_options = options(
    click.option("--window-size-s", type=int, help="Tumbling window size. [default: 60]"),
    click.option(
        "--watermark-delay-ms", type=int, help="Allowed out-of-orderness. [default: 10000]"
    ),
    click.option("--parallelism", type=int, help="Operator parallelism. [default: 1]"),
    click.option("--checkpoint-interval-s", type=int, help="Checkpoint interval. [default: 30]"),
)


@job.command("run")
@_job_options
@click.option(
    "--bounded", is_flag=True, help="Stop at the current end of the topics instead of running on."
)
@click.option("--from-savepoint", "savepoint", help="Restore state from this savepoint/checkpoint.")
@click.pass_context
def job_run(ctx: click.Context, /, bounded: bool, savepoint: str | None, **opts: Any) -> None:
    """Run the drift job on the local embedded Flink mini-cluster (until cancelled, or to
    the current end of the topics with --bounded)."""
    from anchorwatch.jobs import cluster, drift_job
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.jvm import fetch

    settings = load_settings(ctx, JobSettings, job=opts)
    artifacts, _ = fetch(settings.jvm.cache_dir)
    jvm = cluster.bound_local_memory(settings.job)
    click.echo(
        f"drift job on the local mini-cluster ({' '.join(jvm)}): {settings.topics.drift_input} "
        f"-> {settings.topics.verdicts}" + (" (bounded)" if bounded else ""),
        err=True,
    )
    drift_job.run(settings, artifacts.flink_jobs_jar(), bounded=bounded, savepoint=savepoint).wait()


@job.command("submit")
@_job_options
@_jobmanager_option
@click.option("--from-savepoint", "savepoint", help="Start from this savepoint (an upgrade).")
@click.option("--python", "python", help="Python on the cluster's workers. [default: this one]")
@click.pass_context
def job_submit(
    ctx: click.Context, /, jobmanager: str, savepoint: str | None, python: str | None, **opts: Any
) -> None:
    """Submit the drift job, its Python files and the Kafka connector jar to a running Flink
    session cluster (detached) with the Flink CLI of the pyflink package; prints the job id."""
    from anchorwatch.jobs import cluster, drift_job
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.jvm import fetch

    settings = load_settings(ctx, JobSettings, job=opts)
    artifacts, _ = fetch(settings.jvm.cache_dir)
    job_id = cluster.submit(
        jobmanager, artifacts.flink_jobs_jar(),
        env={drift_job.SETTINGS_ENV: settings.model_dump_json()},
        savepoint=savepoint, python=python, parallelism=settings.job.parallelism,
    )  # fmt: skip
    click.echo(job_id)


@job.command("list")
@_jobmanager_option
def job_list(jobmanager: str) -> None:
    """List the cluster's jobs: id, state, start time, name."""
    from anchorwatch.jobs.cluster import FlinkRest

    for j in FlinkRest(jobmanager).jobs():
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(j.start_time_ms / 1000))
        click.echo(f"{j.job_id}  {j.state:<10} {started}  {j.name}")


@job.command("cancel")
@click.argument("job_id")
@_jobmanager_option
def job_cancel(job_id: str, jobmanager: str) -> None:
    """Cancel JOB_ID without a savepoint."""
    from anchorwatch.jobs.cluster import FlinkRest

    FlinkRest(jobmanager).cancel(job_id)
    click.echo(f"cancelling {job_id}")


@job.command("savepoint")
@click.argument("job_id")
@_jobmanager_option
@click.option("--dir", "target_dir", help="Savepoint directory URI. [default: the cluster's]")
@click.option("--stop", is_flag=True, help="Stop the job once the savepoint is taken.")
def job_savepoint(job_id: str, jobmanager: str, target_dir: str | None, stop: bool) -> None:
    """Take a savepoint of JOB_ID (optionally stopping it) and print its location, which
    `job submit --from-savepoint` resumes from."""
    from anchorwatch.jobs.cluster import FlinkRest

    click.echo(FlinkRest(jobmanager).savepoint(job_id, target_dir, stop=stop))
