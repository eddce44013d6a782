"""`anchorwatch baseline fit | show | pin | backtest`: entry points only; the work is in
anchorwatch.policy.fitting, anchorwatch.backtest, anchorwatch.history (the files) and
anchorwatch.jobs.baseline_fit (the Flink batch job and the topics); `pin` and what the others
say of pins are in anchorwatch.cli.baseline_pin."""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from anchorwatch.cli.baseline_pin import (
    current_baselines,
    effective_figures,
    pin_cmd,
    pin_lines,
    pin_mark,
    split_pinned,
)
from anchorwatch.cli.common import load_settings, open_out, out_option, progress, utc_minute
from anchorwatch.contracts import Baseline, BaselinePin, WindowAggregate
from anchorwatch.errors import AnchorwatchError
from anchorwatch.history import parse_time_ms

if TYPE_CHECKING:
    from anchorwatch.backtest import BacktestResult
    from anchorwatch.history import Label
    from anchorwatch.jobs.baseline_settings import BaselineSettings

log = logging.getLogger(__name__)


def _settings(ctx: click.Context, **job: Any) -> BaselineSettings:
    from anchorwatch.jobs.baseline_settings import BaselineSettings

    return load_settings(ctx, BaselineSettings, job=job)


def _time(value: str | None, option: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_time_ms(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def baseline_table(
    baselines: Iterable[Baseline], settings_pins: Mapping[str, BaselinePin] | None = None
) -> str:
    """One line per doc type: what it is compared with (its pin applied: ``settings_pins``
    win over the records' own) and what that rests on."""
    pins = settings_pins or {}
    head = (
        f"{'doc type':<28} {'status':<12} {'windows':>7} {'center':>7} {'spread':>7} "
        f"{'threshold':>9} {'critical':>8} {'min n':>5} {'typical n':>9} {'hourly':>6} "
        f"{'pages/week':>10} {'pinned':<8}  {'fitted at':<17} version"
    )
    lines = [head]
    for b in sorted(baselines, key=lambda b: b.doc_type):
        status = "fitted" if b.status == "fitted" else "too little"
        name = b.doc_type if len(b.doc_type) <= 28 else b.doc_type[:27] + "~"
        threshold, critical, min_n = effective_figures(b, pins.get(b.doc_type) or b.pin)
        lines.append(
            f"{name:<28} {status:<12} {b.window_count:>7} {b.center:>7.3f} {b.spread:>7.4f} "
            f"{threshold:>9.3f} {critical:>8.3f} {min_n:>5} "
            f"{b.typical_request_count:>9.1f} {'yes' if b.hourly_center else 'no':>6} "
            f"{_pages(b):>10} {pin_mark(b, pins):<8}  {utc_minute(b.fitted_at_ms):<17} "
            f"{b.version}"
        )
    return "\n".join(lines)


def _pages(b: Baseline) -> str:
    """'0.0 of 1': what the history's replay paged a week against the budget."""
    if b.replayed_pages_per_week is None or b.page_budget is None:
        return "-"
    return f"{b.replayed_pages_per_week:.1f} of {b.page_budget:g}"


def baseline_details(b: Baseline) -> list[str]:
    """How one type's threshold was chosen and what its history paged, in words."""
    lines = []
    if b.threshold_basis is not None:
        lines.append(f"threshold {b.threshold:.3f}: from {b.threshold_basis}")
    if b.page_budget is not None and b.replayed_pages_per_week is not None:
        days = (b.history_end_ms - b.history_start_ms) / 86_400_000
        lines.append(
            f"page budget {b.page_budget:g} a week; the replay of its {days:.1f} days of history "
            f"pages {b.replayed_pages_per_week:.2f} a week"
        )
    if b.spike_record:
        spikes = ", ".join(
            f"{k} window{'s' if k > 1 else ''} {b.center + h:.3f}"
            for k, h in enumerate(b.spike_record, 1)
        )
        lines.append(f"ordinary spikes reach (at the flat center): {spikes}")
    return lines


# --------------------------------------------------------------------------- baseline


@click.group("baseline")
def baseline() -> None:
    """Per doc type baselines: fit them on history, show the current ones, and backtest the
    policy with them on a history of windows."""


@baseline.command("fit")
@click.option("--since", help="Start of the history (epoch ms or ISO 8601). [default: all of it]")
@click.option("--until", help="End of the history, exclusive. [default: all of it]")
@click.option(
    "--snapshots-file",
    "files",
    multiple=True,
    type=click.Path(path_type=Path),
    help="NDJSON snapshot events (as on the snapshots topic) instead of the topic; "
    "repeatable, files or directories.",
)
@click.option(
    "--windows-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Window aggregates (CSV or NDJSON, see `baseline backtest`) instead of snapshots: "
    "no Flink.",
)
@click.option(
    "--from-topic",
    type=click.Choice(["snapshots", "verdicts", "windows"]),
    default="snapshots",
    show_default=True,
    help="Where the history is read from when no file is given: snapshots go through the "
    "Flink batch job; verdicts and windows hold windows already.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the baselines here (NDJSON), for review.",
)
@click.option(
    "--publish/--no-publish",
    default=True,
    show_default=True,
    help="Write the baselines to the compacted baselines topic.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Also replace pinned baselines (their pins are gone); without it they are kept.",
)
@click.option("--window-size-s", type=int, help="Window size. [default: the job's, 60]")
@click.option("--parallelism", type=int, help="Flink parallelism. [default: the job's, 1]")
@click.pass_context
def fit_cmd(
    ctx: click.Context,
    /,
    since: str | None,
    until: str | None,
    files: tuple[Path, ...],
    windows_file: Path | None,
    from_topic: str,
    out: Path | None,
    publish: bool,
    force: bool,
    **job: Any,
) -> None:
    """Fit one baseline per doc type on a chosen history and publish it.

    Per type: median and robust spread of the one-minute window means, high quantiles,
    typical request count, an hourly profile when the history allows, and the thresholds
    and minimum sample size every consumer compares windows with. Types with too little
    history are marked so and keep the static rule. A type whose baseline on the topic is
    pinned (`baseline pin`) keeps it unless --force."""
    from anchorwatch.baseline_publish import publish_baselines
    from anchorwatch.history import read_windows, write_baselines
    from anchorwatch.jobs import baseline_fit
    from anchorwatch.policy.fitting import fit_baselines
    from anchorwatch.stack.jvm import fetch

    settings = _settings(ctx, **job)
    since_ms, until_ms = _time(since, "--since"), _time(until, "--until")
    if files and windows_file:
        raise click.UsageError("give --snapshots-file or --windows-file, not both")
    if not publish and out is None:
        raise click.UsageError("--no-publish needs --out: the fit would go nowhere")
    size_ms = settings.job.window_size_s * 1000
    started = time.monotonic()

    windows: list[WindowAggregate]
    if windows_file is not None:
        windows = read_windows(windows_file, window_ms=size_ms)
        source = str(windows_file)
    elif files or from_topic == "snapshots":
        source = ", ".join(map(str, files)) if files else settings.topics.snapshots
        click.echo(f"aggregating {source} into windows (Flink, batch)...", err=True)
        jar = None if files else fetch(settings.jvm.cache_dir)[0].flink_jobs_jar()
        with progress("windows", unit="window") as bar:
            windows = baseline_fit.aggregate_history(
                settings,
                connector_jar=jar,
                files=files,
                since_ms=since_ms,
                until_ms=until_ms,
                on_window=bar.update,
            )
    else:
        topic = getattr(settings.topics, from_topic)
        source = topic
        windows = baseline_fit.windows_from_topic(
            settings.kafka, topic, window_size_s=settings.job.window_size_s
        )
    windows = [
        w
        for w in windows
        if (since_ms is None or w.window_start_ms >= since_ms)
        and (until_ms is None or w.window_start_ms < until_ms)
    ]
    if not windows:
        raise AnchorwatchError(f"no windows in {source} for the chosen time range")
    types = len({w.doc_type for w in windows})
    click.echo(f"{len(windows)} windows of {types} doc types from {source}", err=True)

    with progress("fitting", total=types, unit="type") as bar:
        fits = fit_baselines(
            windows,
            settings.policy,
            fitted_at_ms=int(time.time() * 1000),
            history_start_ms=since_ms,
            history_end_ms=until_ms,
            on_type=lambda _t: bar.update(),
        )
    baselines = [f.baseline for f in fits.values()]
    click.echo(baseline_table(baselines))
    for doc_type, result in fits.items():
        for note in result.notes:
            click.echo(f"  {doc_type}: {note}")
    if out is not None:
        write_baselines(out, baselines)
        click.echo(f"wrote {len(baselines)} baselines to {out}", err=True)
    if publish:
        topic = settings.topics.baselines
        kept, pinned = split_pinned(baselines, current_baselines(settings.kafka, topic))
        n = publish_baselines(
            settings.kafka,
            topic,
            baselines if force else kept,
            timeout_s=settings.baseline.publish_timeout_s,
        )
        click.echo(f"published {n} baselines to {topic}", err=True)
        if pinned:
            what = (
                f"replaced {len(pinned)} pinned baselines, their pins are gone (--force)"
                if force
                else f"kept {len(pinned)} pinned baselines, not published (--force replaces "
                "them and their pins)"
            )
            click.echo(f"{what}: {', '.join(pinned)}", err=True)
    fitted = sum(1 for b in baselines if b.status == "fitted")
    log.info(
        "baselines fitted",
        extra={
            "doc_types": len(baselines),
            "fitted": fitted,
            "windows": len(windows),
            "seconds": round(time.monotonic() - started, 1),
        },
    )


@baseline.command("show")
@click.argument("doc_type", required=False)
@click.option(
    "--from-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Read baselines from this NDJSON file (as `fit --out` writes) instead of the topic.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line, not a table.")
@click.pass_context
def show_cmd(
    ctx: click.Context, doc_type: str | None, from_file: Path | None, as_json: bool
) -> None:
    """Print the current baselines (all, or DOC_TYPE's) from the compacted baselines topic,
    pinned ones marked, with what is pinned, by whom, when and why. Exit 1 when there is
    none to show."""
    from anchorwatch.contracts import encode
    from anchorwatch.history import read_baselines as read_file

    settings = _settings(ctx)
    if from_file is not None:
        current = read_file(from_file)
        where = str(from_file)
    else:
        current = current_baselines(settings.kafka, settings.topics.baselines)
        where = settings.topics.baselines
    chosen = [b for t, b in current.items() if doc_type is None or t == doc_type]
    pins = settings.policy.settings_pins()
    pinned = pin_lines(chosen, pins, doc_type)
    if not chosen and not (pinned and not as_json):
        what = f"for doc type {doc_type!r}" if doc_type else ""
        click.echo(f"no baseline {what} in {where}".replace("  ", " "), err=True)
        ctx.exit(1)
    if as_json:
        for b in sorted(chosen, key=lambda b: b.doc_type):
            click.echo(encode(b).decode())
        return
    if chosen:
        click.echo(baseline_table(chosen, pins))
    for line in pinned:
        click.echo(line)
    if doc_type is not None and chosen:
        for line in baseline_details(chosen[0]):
            click.echo(line)
    if doc_type is not None and chosen and chosen[0].hourly_center:
        hourly = chosen[0].hourly_center
        click.echo(
            "hourly center (UTC): " + " ".join(f"{h:02d}h={c:.3f}" for h, c in enumerate(hourly))
        )


baseline.add_command(pin_cmd)


# --------------------------------------------------------------------------- backtest


@baseline.command("backtest")
@click.argument(
    "inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True, path_type=Path)
)
@click.option(
    "--from-topic",
    type=click.Choice(["verdicts", "windows"]),
    help="Replay the windows on this topic instead of files.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "ndjson"]),
    help="Input format. [default: csv for *.csv, else ndjson]",
)
@click.option("--fit-until", help="Fit on windows before this time (epoch ms or ISO 8601).")
@click.option(
    "--fit-minutes",
    type=click.IntRange(min=1),
    help="Fit each doc type on the first N minutes of its own history.",
)
@click.option(
    "--fit-fraction",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Fit each doc type on this share of its own history's span. [default: 0.5]",
)
@click.option(
    "--baselines",
    "baselines_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Use these baselines (NDJSON, as `baseline fit --out` writes) instead of fitting; "
    "the whole history is replayed unless --fit-until says otherwise.",
)
@out_option("Where the incidents go (NDJSON), - for stdout.")
@click.option(
    "--baselines-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the fitted baselines here.",
)
@click.option(
    "--labels",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Labelled incidents (the generator's *.labels.ndjson): print precision, recall "
    "and detection delay.",
)
@click.option(
    "--changes",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Also write every state change (opened, updated, reopened, resolved, with the "
    "resolution) with its window here, as NDJSON.",
)
@click.option(
    "--rows-are-windows",
    is_flag=True,
    help="Each row is one window lasting its doc type's typical spacing (5-minute samples: "
    "5-minute windows), so consecutive rows are consecutive windows; without it, rows "
    "further apart than the window size leave silent windows between them.",
)
@click.option(
    "--window-size-s", type=int, help="Window size of rows without window_end. [default: 60]"
)
@click.pass_context
def backtest(
    ctx: click.Context,
    /,
    inputs: tuple[Path, ...],
    from_topic: str | None,
    fmt: str | None,
    fit_until: str | None,
    fit_minutes: int | None,
    fit_fraction: float | None,
    baselines_file: Path | None,
    out: Path,
    baselines_out: Path | None,
    labels: Path | None,
    changes: Path | None,
    rows_are_windows: bool,
    window_size_s: int | None,
) -> None:
    """Replay a history of window aggregates through the detection policy and write the
    incidents it would have opened, one JSON object per line (doc type, rule, severity,
    opened at, resolved at, peak mean drift, ...).

    INPUTS are CSV or NDJSON files with the columns doc_type, window_start (epoch ms or
    ISO 8601), count, mean, and optionally window_end and the other window figures; a dump
    of the verdicts or windows topic (`anchorwatch read`) works as is. Many doc types may
    share a file: each is fitted on a prefix of its own history (--fit-minutes or
    --fit-fraction of its own span; --fit-until: one time for all) and the rest of it is
    replayed, or baselines are given with --baselines. Rows repeating a doc type's window
    start: the last one counts (a warning says how many were dropped)."""
    from anchorwatch import backtest as bt
    from anchorwatch.history import read_baselines, read_labels, write_baselines

    if bool(inputs) == bool(from_topic):
        raise click.UsageError("give input files or --from-topic (one of them)")
    if sum(x is not None for x in (fit_until, fit_minutes, fit_fraction)) > 1:
        raise click.UsageError("give at most one of --fit-until, --fit-minutes, --fit-fraction")
    settings = _settings(ctx, window_size_s=window_size_s)
    size_ms = settings.job.window_size_s * 1000

    windows = _read_inputs(inputs, fmt, size_ms) if inputs else _read_topic(settings, from_topic)
    if not windows:
        raise AnchorwatchError("the history holds no windows")
    windows = _shape(windows, size_ms, rows_are_windows=rows_are_windows)
    baselines = read_baselines(baselines_file) if baselines_file is not None else None
    cut: int | dict[str, int] | None = _time(fit_until, "--fit-until")
    if cut is None:
        if baselines is not None and fit_minutes is None and fit_fraction is None:
            cut = min(w.window_start_ms for w in windows)
        else:
            cut = bt.fit_cuts(windows, minutes=fit_minutes, fraction=fit_fraction)

    result = bt.backtest(windows, settings.policy, fit_until_ms=cut, baselines=baselines)
    if result.replayed_windows == 0:
        raise AnchorwatchError(
            "nothing to replay: every window starts before its type's fit cut "
            f"(the earliest {utc_minute(result.replay_start_ms)})"
        )
    if baselines_out is not None:
        write_baselines(baselines_out, result.baselines.values())
    _write_lines(out, [bt.incident_record(i) for i in result.incidents])
    if changes is not None:
        _write_lines(changes, [bt.change_record(c) for c in result.changes])

    fitted = sum(1 for b in result.baselines.values() if b.status == "fitted")
    how = "given" if baselines is not None else f"fitted on {result.fit_windows} windows"
    static = len({w.doc_type for w in windows}) - fitted
    own = len(set(result.cuts.values())) > 1
    click.echo(
        f"replayed {result.replayed_windows} windows from {utc_minute(result.replay_start_ms)}"
        + (" (each type from its own cut)" if own else "")
        + f" to {utc_minute(result.replay_end_ms)}; baselines {how}, "
        + f"{fitted} types on their baseline"
        + (f", {static} on the static rule" if static else "")
        + f"; {len(result.incidents)} incidents",
        err=True,
    )
    for (doc_type, rule), n in sorted(
        Counter((i.doc_type, i.rule) for i in result.incidents).items()
    ):
        click.echo(f"  {doc_type} [{rule}]: {n}", err=True)
    if labels is not None:
        _print_score(result, read_labels(labels), windows, size_ms)


def _write_lines(path: Path, records: Sequence[dict[str, Any]]) -> None:
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    with open_out(path) as sink:
        sink.write(data)


def _shown(doc_type: str) -> str:
    """A doc type from a file, quoted with its control characters escaped."""
    return orjson.dumps(doc_type).decode()


def _shape(
    windows: list[WindowAggregate], size_ms: int, *, rows_are_windows: bool
) -> list[WindowAggregate]:
    """One rule for repeated window starts (the last row counts) for the fit and the
    replay alike, rows as windows when asked, and a warning per doc type about either."""
    from anchorwatch.backtest import deduplicate, rows_as_windows, spacing

    windows, dropped = deduplicate(windows)
    for doc_type, n in sorted(dropped.items()):
        click.echo(
            f"warning: {_shown(doc_type)}: {n} rows repeat a window start already given; "
            "the last row for each start counts",
            err=True,
        )
    if rows_are_windows:
        return list(rows_as_windows(windows))
    for doc_type, sp in sorted(spacing(windows).items()):
        if sp.gaps:
            typical = f"{sp.typical_ms / 1000:g} s" if sp.typical_ms is not None else "-"
            click.echo(
                f"warning: {_shown(doc_type)}: {sp.gaps} of {sp.rows} rows come after a gap "
                f"wider than the {size_ms / 1000:g} s window (typical spacing {typical}); the "
                "windows in between count as silence (--rows-are-windows: each row is a window "
                "of the typical spacing)",
                err=True,
            )
    return windows


def _read_inputs(inputs: Sequence[Path], fmt: str | None, size_ms: int) -> list[WindowAggregate]:
    from anchorwatch.history import read_windows

    windows: list[WindowAggregate] = []
    for path in inputs:
        if str(path) == "-":
            windows += read_windows(sys.stdin.buffer, fmt=fmt or "ndjson", window_ms=size_ms)
        else:
            windows += read_windows(path, fmt=fmt, window_ms=size_ms)
    return windows


def _read_topic(settings: BaselineSettings, topic: str | None) -> list[WindowAggregate]:
    from anchorwatch.jobs.baseline_fit import windows_from_topic

    assert topic is not None
    return windows_from_topic(
        settings.kafka, getattr(settings.topics, topic), window_size_s=settings.job.window_size_s
    )


def _print_score(
    result: BacktestResult,
    labels: Sequence[Label],
    windows: Sequence[WindowAggregate],
    size_ms: int,
) -> None:
    from anchorwatch.backtest import score

    s = score(
        result.changes,
        labels,
        replay_start_ms=result.cuts or result.replay_start_ms,
        replay_end_ms=result.ends or result.replay_end_ms,
        doc_types=len({w.doc_type for w in windows}),
        window_ms=size_ms,
    )
    med, p95 = s.delay_quantile(0.5), s.delay_quantile(0.95)
    click.echo(
        f"score: {len(s.labels)} drift incidents labelled in the replayed span; "
        f"precision {s.precision:.3f}, recall {s.recall:.3f}, detection delay median "
        f"{'-' if med is None else f'{med:.1f}'} / p95 {'-' if p95 is None else f'{p95:.1f}'} "
        f"windows; {len(s.false_alerts)} false alarms "
        f"({s.false_alarms_per_type_day:.2f} per type per day)",
        err=True,
    )
    for lab in s.missed:
        click.echo(
            f"  missed: {lab.kind} on {lab.doc_type} at {utc_minute(lab.start_ms)}", err=True
        )
