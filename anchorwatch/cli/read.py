"""`anchorwatch read TOPIC`: the records now on a topic, one JSON value per line; with
``--by model`` or ``--by kind``, the windows (or verdicts) split into one row per window and
model, or per window and anchor kind."""

from __future__ import annotations

from typing import Any

import click
import orjson

from anchorwatch.cli.common import load_settings
from anchorwatch.contracts import ContractError, WindowAggregate, validate

SPLITS = ("model", "kind")


def window_of(value: Any) -> WindowAggregate | None:
    """The window of a verdict or window record (None: the record is neither)."""
    if isinstance(value, dict) and isinstance(value.get("window"), dict):
        value = value["window"]  # a verdict: the window is inside
    if not isinstance(value, dict) or "window_start_ms" not in value:
        return None
    try:
        return validate(WindowAggregate, value)
    except ContractError:
        return None


def split_rows(window: WindowAggregate, by: str) -> list[dict[str, Any]] | None:
    """One row per model (``by="model"``) or anchor kind (``by="kind"``) of the window;
    None when it has no such breakdown (a drift job before it wrote it)."""
    head = {
        "doc_type": window.doc_type,
        "window_start_ms": window.window_start_ms,
        "window_end_ms": window.window_end_ms,
    }
    if by == "kind":
        if window.kinds is None:
            return None
        return [{**head, "kind": kind, **f.model_dump()} for kind, f in window.kinds.items()]
    if window.models is None:
        return None
    groups: list[tuple[dict[str, Any], int, float]] = [
        ({"model": m.model}, m.request_count, m.mean_drift) for m in window.models
    ]
    if (o := window.other_models) is not None:
        groups.append(
            ({"model": None, "other_models": o.model_count}, o.request_count, o.mean_drift)
        )
    total = sum(n for _, n, _ in groups)
    return [
        {**head, **name, "request_count": n, "share": n / total, "mean_drift": mean}
        for name, n, mean in groups
    ]


@click.command("read")
@click.argument("topic")
@click.option("--limit", type=int, default=None, help="Stop after this many records.")
@click.option(
    "--by",
    type=click.Choice(SPLITS),
    default=None,
    help="Split each window (on the windows or verdicts topic) into one JSON row per model "
    "version (doc_type, window_start_ms, window_end_ms, model, request_count, share, "
    "mean_drift; model null: requests naming none; a row with other_models: the models the "
    "window does not list, summed) or per anchor kind (kind, anchor_count, mean_drift, "
    "max_drift). Records that are not windows, and windows from a drift job before the "
    "breakdown, are counted on stderr.",
)
@click.pass_context
def read_cmd(ctx: click.Context, topic: str, limit: int | None, by: str | None) -> None:
    """Print the records now in TOPIC (one JSON value per line), then exit."""
    from anchorwatch.jobs.settings import JobSettings
    from anchorwatch.kafkaio import read_topic

    settings = load_settings(ctx, JobSettings)
    not_windows = without = 0
    for i, m in enumerate(read_topic(settings.kafka, topic)):
        if limit is not None and i >= limit:
            break
        raw = m.value or b"null"
        if by is None:
            click.echo(raw.decode("utf-8", errors="replace"))
            continue
        try:
            window = window_of(orjson.loads(raw))
        except orjson.JSONDecodeError:
            window = None
        if window is None:
            not_windows += 1
            continue
        rows = split_rows(window, by)
        if rows is None:
            without += 1
            continue
        for row in rows:
            click.echo(orjson.dumps(row).decode())
    if not_windows:
        click.echo(f"{not_windows} records are not windows or verdicts: skipped", err=True)
    if without:
        click.echo(
            f"{without} windows have no {by} breakdown (written by a drift job before it)",
            err=True,
        )
