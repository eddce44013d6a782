"""`anchorwatch generate`: realistic gateway traffic, deterministic by seed; the work is in
anchorwatch.demo.generator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from anchorwatch.cli.common import is_stdout, load_settings, open_out, options, out_option, progress

_traffic_options = options(
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
        default=0.0,
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
        default=0,
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
        "--scoped-incidents",
        type=int,
        default=0,
        show_default=True,
        help="Drift incidents in one model version only, or in one anchor kind only.",
    ),
    click.option(
        "--fault-rate",
        type=float,
        default=0.0,
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
)


def _traffic_config(opts: dict[str, Any]) -> Any:
    from anchorwatch.demo.generator import TrafficConfig

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
        "scoped_incidents": opts.get("scoped_incidents", 0),
        "background_fault_rate": opts["fault_rate"],
    }
    if opts.get("start_ms") is not None:
        fields["start_ms"] = opts["start_ms"]
    try:
        return TrafficConfig(**fields)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("generate")
@_traffic_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["ndjson", "kong"]),
    default="ndjson",
    show_default=True,
    help="ndjson: snapshot events in the project schema; kong: Kong http-log entries.",
)
@out_option("File to write, or - for stdout.")
@click.option(
    "--labels",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the injected incidents here as NDJSON. [default: OUT.labels.ndjson]",
)
@click.option(
    "--produce",
    is_flag=True,
    help="Validate and produce to the snapshots topic (and the summaries topic when it is "
    "set; rejects to the dead-letter topic) instead of writing a file.",
)
@click.pass_context
def generate_cmd(
    ctx: click.Context, /, fmt: str, out: Path, labels: Path | None, produce: bool, **opts: Any
) -> None:
    """Write or produce realistic gateway traffic, deterministic by seed: many doc types,
    out-of-order and late events, malformed records, data-quality faults and labelled
    drift incidents."""
    from anchorwatch.demo.generator import generate
    from anchorwatch.demo.kong_entry import to_kong_entry
    from anchorwatch.jobs.settings import JobSettings

    traffic = generate(_traffic_config(opts))
    if labels is None and not is_stdout(out):
        labels = out.with_name(out.name + ".labels.ndjson")
    if labels is not None:
        labels.write_bytes(b"".join(i.to_json() + b"\n" for i in traffic.incidents))
    if produce:
        from anchorwatch.connectors.publisher import SnapshotPublisher

        settings = load_settings(ctx, JobSettings)
        publisher = SnapshotPublisher(settings.kafka, settings.topics, source="generator")
        with progress("producing") as bar:
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
    n = 0
    with open_out(out) as sink, progress("writing") as bar:
        for record in traffic.records():
            if fmt == "kong" and record.event is not None:
                line = orjson.dumps(to_kong_entry(record.event))
            else:
                line = record.raw  # malformed records stay malformed in either format
            sink.write(line + b"\n")
            n += 1
            bar.update()
    where = "stdout" if is_stdout(out) else str(out)
    click.echo(
        f"wrote {n} records to {where}; {len(traffic.incidents)} incidents"
        + (f" labelled in {labels}" if labels else ""),
        err=True,
    )
