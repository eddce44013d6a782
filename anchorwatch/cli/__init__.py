"""`anchorwatch`: the one command line. Entry points only wire; the work lives in modules."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import click
import orjson

from anchorwatch import __version__, logs
from anchorwatch.errors import AnchorwatchError
from anchorwatch.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)
F = TypeVar("F", bound=Callable[..., Any])


def _load(ctx: click.Context, cls: type[S], **sections: dict[str, Any]) -> S:
    """Settings for one command: file/env, overridden by the options given on the line."""
    overrides = {k: {f: v for f, v in d.items() if v is not None} for k, d in sections.items()}
    return cls.load(ctx.obj["config"], **{k: v for k, v in overrides.items() if v})


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


# --------------------------------------------------------------------------- settings


def all_settings() -> list[type[ServiceSettings]]:
    """Every service's settings class (the README documents each of their fields)."""
    from anchorwatch.alerting.settings import AlertingSettings
    from anchorwatch.connectors.settings import IngestSettings
    from anchorwatch.jobs.baseline_settings import BaselineSettings
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.stack import StackSettings

    return [StackSettings, JobSettings, BaselineSettings, IngestSettings, AlertingSettings]


@cli.command("settings")
def settings_cmd() -> None:
    """List every setting: its environment variable, meaning and default."""
    from anchorwatch.settings import describe_fields

    seen: set[str] = set()
    for cls in all_settings():
        for env, text in describe_fields(cls):
            if env not in seen:
                seen.add(env)
                click.echo(f"{env}\n    {text}")


# --------------------------------------------------------------------------- jvm


@cli.group()
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

    settings = _load(ctx, StackSettings)
    started = time.monotonic()
    artifacts, fetched = fetch(settings.jvm.cache_dir, force=force)
    state = f"fetched in {time.monotonic() - started:.1f}s" if fetched else "already current"
    click.echo(f"JVM artifacts {state}: {artifacts.root}")
    click.echo(f"  kafka broker:     {artifacts.kafka_dir}")
    click.echo(f"  flink jobs' jar:  {artifacts.flink_jobs_jar()}")


# --------------------------------------------------------------------------- stack


def _stack_options(f: F) -> F:
    options = [
        click.option(
            "--state-dir",
            type=click.Path(file_okay=False, path_type=Path),
            help="Pids, logs and data. [default: .anchorwatch/stack]",
        ),
        click.option("--kafka-port", type=int, help="Kafka client port. [default: 9092]"),
        click.option("--controller-port", type=int, help="KRaft controller port. [default: 9093]"),
        click.option("--flink-rest-port", type=int, help="Flink REST/web port. [default: 8081]"),
        click.option(
            "--flink-rpc-port", type=int, help="Flink JobManager RPC port. [default: 6123]"
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _stack(ctx: click.Context, **opts: Any) -> Any:
    from anchorwatch.stack.stack import Stack, StackSettings

    partitions = opts.pop("partitions", None)
    settings = _load(ctx, StackSettings, stack=opts, topics={"partitions": partitions})
    return Stack(settings)


@cli.group()
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


# --------------------------------------------------------------------------- generate


def _traffic_options(f: F, **defaults: Any) -> F:
    d: dict[str, Any] = {"malformed_rate": 0.0, "incidents": 0, "fault_rate": 0.0} | defaults
    options = [
        click.option(
            "--seed",
            type=int,
            default=7,
            show_default=True,
            help="Same seed, same traffic, byte for byte.",
        ),
        click.option(
            "--minutes",
            type=int,
            default=30,
            show_default=True,
            help="Event-time span to generate.",
        ),
        click.option(
            "--doc-types",
            type=int,
            default=8,
            show_default=True,
            help="Number of document types (each with its own level, spread, rate).",
        ),
        click.option(
            "--rate-scale",
            type=float,
            default=1.0,
            show_default=True,
            help="Multiplies every type's request rate.",
        ),
        click.option(
            "--malformed-rate",
            type=float,
            default=d["malformed_rate"],
            show_default=True,
            help="Share of records that are malformed.",
        ),
        click.option(
            "--late-rate",
            type=float,
            default=0.0,
            show_default=True,
            help="Share of events delivered minutes late.",
        ),
        click.option(
            "--disorder-ms",
            type=int,
            default=5000,
            show_default=True,
            help="Max delivery delay of ordinary (out-of-order, not late) events.",
        ),
        click.option(
            "--incidents",
            type=int,
            default=d["incidents"],
            show_default=True,
            help="Drift incidents to inject (jumps and ramps).",
        ),
        click.option(
            "--fault-incidents",
            type=int,
            default=0,
            show_default=True,
            help="Data-quality incidents (zero anchors, disabled, KL spikes, re-sample bursts).",
        ),
        click.option(
            "--fault-rate",
            type=float,
            default=d["fault_rate"],
            show_default=True,
            help="Sporadic per-request data-quality faults outside incidents.",
        ),
        click.option(
            "--start-ms",
            type=int,
            default=None,
            help="Event time of the first minute, epoch ms (minute aligned). "
            "[default: 2025-11-29T08:00Z]",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _traffic_config(opts: dict[str, Any]) -> Any:
    from anchorwatch.generator import TrafficConfig

    fields: dict[str, Any] = {
        "seed": opts["seed"],
        "minutes": opts["minutes"],
        "doc_types": opts["doc_types"],
        "rate_scale": opts["rate_scale"],
        "malformed_rate": opts["malformed_rate"],
        "late_rate": opts["late_rate"],
        "disorder_ms": opts["disorder_ms"],
        "incidents": opts["incidents"],
        "fault_incidents": opts["fault_incidents"],
        "background_fault_rate": opts["fault_rate"],
    }
    if opts.get("start_ms") is not None:
        fields["start_ms"] = opts["start_ms"]
    try:
        return TrafficConfig(**fields)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _progress(total: int | None, label: str) -> Any:
    from tqdm import tqdm

    # Auto-disables when stderr is not a terminal, so CI logs stay readable.
    return tqdm(total=total, desc=label, unit="rec", file=sys.stderr, disable=None)


@cli.command("generate")
@_traffic_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["ndjson", "kong"]),
    default="ndjson",
    show_default=True,
    help="ndjson: snapshot events in the project schema; kong: Kong http-log entries.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=Path("-"),
    show_default=True,
    help="File to write, or - for stdout.",
)
@click.option(
    "--labels",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the injected incidents here as NDJSON. [default: OUT.labels.ndjson]",
)
@click.option(
    "--produce",
    is_flag=True,
    help="Validate and produce to the snapshots topic (rejects to the dead-letter "
    "topic) instead of writing a file.",
)
@click.pass_context
def generate_cmd(
    ctx: click.Context, /, fmt: str, out: Path, labels: Path | None, produce: bool, **opts: Any
) -> None:
    """Write or produce realistic gateway traffic, deterministic by seed: many doc types,
    out-of-order and late events, malformed records, data-quality faults and labelled
    drift incidents."""
    from anchorwatch.generator import generate, to_kong_entry
    from anchorwatch.jobs.settings import JobSettings

    traffic = generate(_traffic_config(opts))
    if labels is None and str(out) != "-":
        labels = out.with_name(out.name + ".labels.ndjson")
    if labels is not None:
        labels.write_bytes(b"".join(i.to_json() + b"\n" for i in traffic.incidents))
    if produce:
        from anchorwatch.connectors.publisher import SnapshotPublisher

        settings = _load(ctx, JobSettings)
        publisher = SnapshotPublisher(settings.kafka, settings.topics, source="generator")
        with _progress(None, "producing") as bar:
            for record in traffic.records():
                publisher.publish_raw(record.raw)
                bar.update()
        stats = publisher.flush()
        click.echo(
            f"produced {stats.accepted} events to {settings.topics.snapshots}, "
            f"{stats.rejected} rejects to {settings.topics.dead_letter}; "
            f"all {stats.delivered} acknowledged by Kafka",
            err=True,
        )
        return
    sink: IO[bytes]
    sink = sys.stdout.buffer if str(out) == "-" else out.open("wb")
    n = 0
    try:
        with _progress(None, "writing") as bar:
            for record in traffic.records():
                if fmt == "kong" and record.event is not None:
                    line = orjson.dumps(to_kong_entry(record.event))
                else:
                    line = record.raw  # malformed records stay malformed in either format
                sink.write(line + b"\n")
                n += 1
                bar.update()
    finally:
        if sink is not sys.stdout.buffer:
            sink.close()
    where = "stdout" if str(out) == "-" else str(out)
    click.echo(
        f"wrote {n} records to {where}; {len(traffic.incidents)} incidents"
        + (f" labelled in {labels}" if labels else ""),
        err=True,
    )


# --------------------------------------------------------------------------- job


@cli.group()
def job() -> None:
    """The Flink drift job."""


def _job_options(f: F) -> F:
    options = [
        click.option("--window-size-s", type=int, help="Tumbling window size. [default: 60]"),
        click.option("--watermark-delay-ms", type=int,
                     help="Allowed out-of-orderness. [default: 10000]"),
        click.option("--parallelism", type=int, help="Operator parallelism. [default: 1]"),
        click.option("--checkpoint-interval-s", type=int,
                     help="Checkpoint interval. [default: 30]"),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


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
    from anchorwatch.jobs import drift_job
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.stack.jvm import fetch

    settings = _load(ctx, JobSettings, job=opts)
    artifacts, _ = fetch(settings.jvm.cache_dir)
    click.echo(
        f"drift job on the local mini-cluster: {settings.topics.snapshots} -> "
        f"{settings.topics.verdicts}" + (" (bounded)" if bounded else ""),
        err=True,
    )
    drift_job.run(settings, artifacts.flink_jobs_jar(), bounded=bounded, savepoint=savepoint).wait()


@job.command("submit")
@_job_options
@click.option("--jobmanager", required=True, help="The session cluster's REST address, HOST:PORT.")
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

    settings = _load(ctx, JobSettings, job=opts)
    artifacts, _ = fetch(settings.jvm.cache_dir)
    job_id = cluster.submit(
        jobmanager, artifacts.flink_jobs_jar(),
        env={drift_job.SETTINGS_ENV: settings.model_dump_json()},
        savepoint=savepoint, python=python, parallelism=settings.job.parallelism,
    )  # fmt: skip
    click.echo(job_id)


@job.command("list")
@click.option("--jobmanager", required=True, help="The session cluster's REST address, HOST:PORT.")
def job_list(jobmanager: str) -> None:
    """List the cluster's jobs: id, state, start time, name."""
    from anchorwatch.jobs.cluster import FlinkRest

    for j in FlinkRest(jobmanager).jobs():
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(j.start_time_ms / 1000))
        click.echo(f"{j.job_id}  {j.state:<10} {started}  {j.name}")


@job.command("cancel")
@click.argument("job_id")
@click.option("--jobmanager", required=True, help="The session cluster's REST address, HOST:PORT.")
def job_cancel(job_id: str, jobmanager: str) -> None:
    """Cancel JOB_ID without a savepoint."""
    from anchorwatch.jobs.cluster import FlinkRest

    FlinkRest(jobmanager).cancel(job_id)
    click.echo(f"cancelling {job_id}")


@job.command("savepoint")
@click.argument("job_id")
@click.option("--jobmanager", required=True, help="The session cluster's REST address, HOST:PORT.")
@click.option("--dir", "target_dir", help="Savepoint directory URI. [default: the cluster's]")
@click.option("--stop", is_flag=True, help="Stop the job once the savepoint is taken.")
def job_savepoint(job_id: str, jobmanager: str, target_dir: str | None, stop: bool) -> None:
    """Take a savepoint of JOB_ID (optionally stopping it) and print its location, which
    `job submit --from-savepoint` resumes from."""
    from anchorwatch.jobs.cluster import FlinkRest

    click.echo(FlinkRest(jobmanager).savepoint(job_id, target_dir, stop=stop))


# --------------------------------------------------------------------------- contracts


@cli.group()
def contracts() -> None:
    """The versioned wire contracts (JSON Schemas)."""


@contracts.command("schemas")
@click.option("--write", is_flag=True, help="Regenerate the checked-in schema files.")
@click.option("--check", is_flag=True, help="Exit 1 if a checked-in schema is out of date.")
def contracts_schemas(write: bool, check: bool) -> None:
    """List the JSON Schemas; --write regenerates them from the models, --check verifies."""
    from anchorwatch.contracts import schemas

    stale = []
    for name in schemas.CONTRACTS:
        path = schemas.schema_path(name)
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != schemas.render(name):
            stale.append(name)
        click.echo(f"{name:<18} {path}" + ("  (out of date)" if name in stale else ""))
    if write:
        schemas.write_all()
        click.echo("schemas written")
    elif check and stale:
        raise click.ClickException(f"out of date: {', '.join(stale)}; run with --write")


# --------------------------------------------------------------------------- topics


@cli.command("read")
@click.argument("topic")
@click.option("--limit", type=int, default=None, help="Stop after this many records.")
@click.pass_context
def read_cmd(ctx: click.Context, topic: str, limit: int | None) -> None:
    """Print the records now in TOPIC (one JSON value per line), then exit."""
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.kafkaio import read_topic

    settings = _load(ctx, JobSettings)
    for i, m in enumerate(read_topic(settings.kafka, topic)):
        if limit is not None and i >= limit:
            break
        click.echo((m.value or b"null").decode("utf-8", errors="replace"))


def _add_service_commands() -> None:
    # Each deployable owns its command group; the CLI only mounts them.
    from anchorwatch.alerting.cli import alerting
    from anchorwatch.cli.demo import demo
    from anchorwatch.connectors.cli import ingest
    from anchorwatch.policy.cli import backtest, baseline

    cli.add_command(ingest)
    cli.add_command(alerting)
    cli.add_command(baseline)
    cli.add_command(backtest)
    cli.add_command(demo)


_add_service_commands()


def main() -> None:
    try:
        cli(standalone_mode=False)
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
