"""`anchorwatch gate`: a release gate for a new model version, judged on a finished test
run's snapshot events (an NDJSON file, or a Kafka topic read to its current end). The
statistics and verdicts are ``anchorwatch.gate``; the reports ``anchorwatch.gate_report``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import click
from pydantic import ValidationError

from anchorwatch.cli.common import load_settings, progress
from anchorwatch.contracts import ContractError, SnapshotEvent, decode
from anchorwatch.gate import (
    DEFAULT_MAX_MEAN,
    DEFAULT_MIN_DOCS,
    GateConfig,
    GateDataError,
    RunTally,
    judge,
)

log = logging.getLogger(__name__)

KAFKA_PREFIX: Final = "kafka:"
# GateConfig's fields as the options that set them, for usage errors.
_OPTION: Final = {
    "candidate": "--model",
    "against": "--against",
    "max_mean": "--max-mean",
    "min_docs": "--min-docs",
    "margin": "--margin",
}


def _file_records(path: Path) -> Iterator[tuple[str, bytes]]:
    """(where, line) of each non-blank line; - reads stdin."""
    name = "stdin" if str(path) == "-" else str(path)
    try:
        fh = sys.stdin.buffer if name == "stdin" else path.open("rb")
    except OSError as exc:
        raise GateDataError(f"--snapshots {path}: {exc.strerror or exc}") from None
    with fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                yield f"{name}:{number}", line


def _topic_records(ctx: click.Context, topic: str) -> Iterator[tuple[str, bytes]]:
    """(where, value) of each record now in the topic (the configured snapshots topic when
    none is named), from the beginning to the end offsets seen when the read starts."""
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.kafkaio import read_topic

    settings = load_settings(ctx, JobSettings)
    topic = topic or settings.topics.snapshots
    for m in read_topic(settings.kafka, topic):
        yield f"{topic} partition {m.partition} offset {m.offset}", m.value or b"null"


def read_run(ctx: click.Context, source: str, tally: RunTally) -> int:
    """Feed every record of ``source`` to ``tally``; the number read. A record that is not
    a snapshot event stops the read: a test run with broken records is not judged."""
    if source.startswith(KAFKA_PREFIX):
        records = _topic_records(ctx, source.removeprefix(KAFKA_PREFIX))
    else:
        records = _file_records(Path(source))
    count = 0
    with progress("reading snapshots") as bar:
        for where, raw in records:
            try:
                tally.add(decode(SnapshotEvent, raw))
            except ContractError as exc:
                problems = "; ".join(str(p) for p in exc.problems)
                raise GateDataError(f"{where}: not a snapshot event: {problems}") from None
            except GateDataError as exc:
                raise GateDataError(f"{where}: {exc}") from None
            count += 1
            bar.update()
    return count


def _config(**values: object) -> GateConfig:
    try:
        return GateConfig.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            loc = error["loc"]
            name = _OPTION.get(str(loc[0]), str(loc[0])) if loc else ""
            message = str(error["msg"]).removeprefix("Value error, ")
            # A cross-field check names its field itself ("against: ...").
            if not name and ": " in message:
                field, _, message = message.partition(": ")
                name = _OPTION.get(field, field)
            problems.append(f"{name}: {message}" if name else message)
        raise click.UsageError("; ".join(problems)) from None


@click.command("gate")
@click.option(
    "--snapshots",
    "source",
    required=True,
    metavar="FILE|kafka:TOPIC",
    help="The test run's snapshot events: an NDJSON file (- for stdin), or kafka:TOPIC, read "
    "from the beginning to its current end with the [kafka] settings (kafka: alone: the "
    "snapshots topic of the settings).",
)
@click.option(
    "--model", "candidate", required=True, metavar="NEW", help="The candidate model version."
)
@click.option(
    "--against",
    metavar="OLD",
    default=None,
    help="The production model version to compare with (its records in the same run).",
)
@click.option(
    "--max-mean",
    type=float,
    default=DEFAULT_MAX_MEAN,
    show_default=True,
    help="Highest mean drift the candidate may have on any doc type.",
)
@click.option(
    "--min-docs",
    type=int,
    default=DEFAULT_MIN_DOCS,
    show_default=True,
    help="Fewest documents per doc type and model; fewer is an error, never a pass.",
)
@click.option(
    "--margin",
    type=float,
    default=0.0,
    show_default=True,
    help="With --against: fail when the candidate is worse by more than this with 95% "
    "confidence (the interval's lower bound above it).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse records of other models (or without a model) instead of skipping them.",
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write JUnit XML here: one testcase per doc type.",
)
@click.option("--markdown", is_flag=True, help="Print a Markdown table (a pull-request comment).")
@click.pass_context
def gate_cmd(
    ctx: click.Context,
    source: str,
    candidate: str,
    against: str | None,
    max_mean: float,
    min_docs: int,
    margin: float,
    strict: bool,
    junit: Path | None,
    markdown: bool,
) -> None:
    """Judge a model release on a finished test run's drift, per doc type.

    Per doc type: the candidate's mean drift (each event's mean_drift, one per document),
    its number of documents and, with --against, the difference to the production model
    with a 95% Welch interval. A type fails when the mean is above --max-mean, or when the
    candidate is worse than production with the interval's lower bound above --margin.

    Exit status: 0 every type passed; 1 a type failed; 2 a usage or data error (too few
    documents of a type, no record of --model or --against, a record that is not a snapshot
    event, one event id with two different records, other models' records with --strict).
    """
    from anchorwatch import gate_report

    config = _config(
        candidate=candidate,
        against=against,
        max_mean=max_mean,
        min_docs=min_docs,
        margin=margin,
        strict=strict,
    )
    tally = RunTally(config)
    count = read_run(ctx, source, tally)
    report = judge(tally)
    log.info(
        "test run judged",
        extra={
            "records": count,
            "duplicates": report.duplicates,
            "ignored": report.ignored,
            "passed": report.count("pass"),
            "failed": report.count("fail"),
            "not_judged": report.count("error"),
        },
    )
    if junit is not None:
        try:
            junit.write_bytes(gate_report.junit(report))
        except OSError as exc:
            raise GateDataError(f"--junit {junit}: {exc.strerror or exc}") from None
    click.echo(gate_report.markdown(report) if markdown else gate_report.text(report), nl=False)
    if report.exit_code:
        ctx.exit(report.exit_code)
