"""`anchorwatch baseline pin`, and what `baseline show` and `baseline fit` say of pins: entry
points only; the pin itself is anchorwatch.policy.config (validation, settings pins) and
anchorwatch.policy.fitting (the pinned record), judged by anchorwatch.policy.window."""

from __future__ import annotations

import getpass
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import click

from anchorwatch.cli.common import load_settings, utc_minute
from anchorwatch.contracts import Baseline, BaselinePin
from anchorwatch.policy.config import PinError
from anchorwatch.policy.window import StaticRule, pinned_rule

if TYPE_CHECKING:
    from anchorwatch.jobs.baseline_settings import BaselineSettings
    from anchorwatch.settings import KafkaSettings

log = logging.getLogger(__name__)


def current_baselines(kafka: KafkaSettings, topic: str) -> dict[str, Baseline]:
    """The current baseline per doc type on the compacted topic (the latest record of each
    key; a tombstone removes the type), read without pyflink: the services image pins too."""
    from anchorwatch.contracts import ContractError, decode_baseline
    from anchorwatch.kafkaio import read_topic

    out: dict[str, Baseline] = {}
    for m in read_topic(kafka, topic):
        if m.value is None:
            if m.key is not None:
                out.pop(m.key.decode("utf-8", errors="replace"), None)
            continue
        try:
            baseline = decode_baseline(m.value)
        except ContractError as exc:
            log.error("ignoring an invalid baseline record", extra={"error": str(exc)[:1000]})
            continue
        out[baseline.doc_type] = baseline
    return out


def effective_figures(b: Baseline, pin: BaselinePin | None) -> tuple[float, float, int]:
    """Threshold, critical threshold and minimum volume a window of ``b``'s type is judged
    by (flat: before any hourly profile), its pin applied."""
    fixed = pinned_rule(pin, b, StaticRule())
    if fixed is not None:
        return fixed.threshold, fixed.critical_threshold, fixed.min_requests
    pinned_min = pin.min_requests if pin is not None else None
    return b.threshold, b.critical_threshold, pinned_min or b.min_requests


def pin_mark(b: Baseline, settings_pins: Mapping[str, BaselinePin]) -> str:
    """The table's `pinned` column: settings, yes (on the record) or -."""
    if b.doc_type in settings_pins:
        return "settings"
    return "yes" if b.pin is not None else "-"


def describe_pin(pin: BaselinePin, b: Baseline | None) -> str:
    """What is pinned, against the fitted figures, and who pinned it when and why."""
    parts = []
    if pin.threshold is not None:
        fixed = pinned_rule(pin, b, StaticRule())
        assert fixed is not None
        fitted = f" (fitted {b.threshold:.3f})" if b is not None and b.status == "fitted" else ""
        parts.append(
            f"threshold {fixed.threshold:.3f}{fitted}, critical {fixed.critical_threshold:.3f}"
        )
    if pin.min_requests is not None:
        parts.append(f"at least {pin.min_requests} requests a window")
    if pin.mute:
        parts.append("muted (judged, never opens an incident)")
    if pin.source == "settings":
        who = "in settings ([policy.pins])"
    else:
        who = f"by {pin.author or 'someone'}"
        if pin.pinned_at_ms is not None:
            who += f" at {utc_minute(pin.pinned_at_ms)}"
    return "; ".join(parts) + f"; {who}" + (f": {pin.reason}" if pin.reason else "")


def pin_lines(
    baselines: Iterable[Baseline], settings_pins: Mapping[str, BaselinePin], doc_type: str | None
) -> list[str]:
    """One line per pinned type: the baselines' (a settings pin wins over a record's), then
    the types pinned in settings that have no baseline (all, or ``doc_type``'s)."""
    lines = []
    shown = set()
    for b in sorted(baselines, key=lambda b: b.doc_type):
        shown.add(b.doc_type)
        pin = settings_pins.get(b.doc_type) or b.pin
        if pin is None:
            continue
        line = f"pinned {b.doc_type}: {describe_pin(pin, b)}"
        if b.doc_type in settings_pins and b.pin is not None:
            line += f" (over the record's pin {describe_pin(b.pin, b)})"
        lines.append(line)
    for name, pin in sorted(settings_pins.items()):
        if name not in shown and (doc_type is None or name == doc_type):
            lines.append(f"pinned {name} (no baseline yet): {describe_pin(pin, None)}")
    return lines


def split_pinned(
    fitted: list[Baseline], current: Mapping[str, Baseline]
) -> tuple[list[Baseline], list[str]]:
    """The fits that replace no pinned baseline, and the doc types whose baseline is pinned."""
    pinned = sorted(b.doc_type for b in fitted if (c := current.get(b.doc_type)) and c.pin)
    return [b for b in fitted if b.doc_type not in pinned], pinned


@click.command("pin")
@click.option("--doc-type", required=True, help="The doc type to pin (or unpin).")
@click.option("--threshold", type=float, help="A fixed warning threshold, above 0 and at most 1.")
@click.option(
    "--critical-threshold",
    type=float,
    help="A fixed critical threshold (with --threshold). [default: as far above the threshold "
    "as the type's critical threshold was above its warning threshold]",
)
@click.option(
    "--min-requests", type=int, help="Windows with fewer requests do not count (at least 1)."
)
@click.option(
    "--mute", is_flag=True, help="Judged, but never opens an incident: no page, ticket or event."
)
@click.option("--unpin", is_flag=True, help="Remove the type's pin: its fitted figures apply.")
@click.option("--reason", help="Why: shown by `baseline show` and in the verdicts' reasons.")
@click.option("--author", help="Who. [default: the login name]")
@click.option("--dry-run", is_flag=True, help="Print the record; publish nothing.")
@click.pass_context
def pin_cmd(
    ctx: click.Context,
    /,
    doc_type: str,
    threshold: float | None,
    critical_threshold: float | None,
    min_requests: int | None,
    mute: bool,
    unpin: bool,
    reason: str | None,
    author: str | None,
    dry_run: bool,
) -> None:
    """Pin a doc type's figures: a fixed threshold, a minimum volume, or mute.

    Publishes the type's baseline marked pinned (its fitted figures kept, the pin on top) to
    the compacted baselines topic, from which the drift job and the alerting service take it
    without a restart. The alerting service's refits never replace a pinned baseline, nor
    does `baseline fit --publish` without --force. A replaced pin is gone; --unpin publishes
    the baseline without its pin. Refused, with nothing published: a threshold outside
    (0, 1], a minimum volume below 1, nothing to pin, an invalid doc type, a type pinned in
    settings ([policy.pins]: change it there)."""
    from anchorwatch.baseline_publish import publish_baselines
    from anchorwatch.jobs.baseline_settings import BaselineSettings
    from anchorwatch.policy.config import new_pin, pin_doc_type
    from anchorwatch.policy.fitting import pinned_baseline, unpinned_baseline

    now_ms = int(time.time() * 1000)
    figures = threshold, critical_threshold, min_requests
    if unpin and (mute or any(x is not None for x in figures)):
        raise PinError("unpin: --unpin takes no --threshold, --min-requests or --mute")
    if not unpin and not mute and all(x is None for x in figures):
        raise PinError(
            "pin: nothing to pin (give --threshold, --min-requests or --mute; --unpin removes "
            "a pin)"
        )
    pin: BaselinePin | None = None
    if unpin:
        doc_type = pin_doc_type(doc_type)
    else:
        doc_type, pin = new_pin(
            doc_type=doc_type,
            threshold=threshold,
            critical_threshold=critical_threshold,
            min_requests=min_requests,
            mute=mute,
            reason=reason,
            author=author or getpass.getuser(),
            now_ms=now_ms,
        )
    settings: BaselineSettings = load_settings(ctx, BaselineSettings)
    if doc_type in settings.policy.pins:
        raise PinError(
            f"doc_type: {doc_type!r} is pinned in settings ([policy.pins]), which win over "
            "any pin published here; change it there"
        )
    topic = settings.topics.baselines
    held = current_baselines(settings.kafka, topic).get(doc_type)
    if pin is None:
        if held is None or held.pin is None:
            raise PinError(f"doc_type: {doc_type!r} is not pinned on {topic}")
        record = unpinned_baseline(held, now_ms=now_ms)
    else:
        record = pinned_baseline(held, doc_type, pin, settings.policy, now_ms=now_ms)
    from anchorwatch.cli.baseline import baseline_table

    click.echo(baseline_table([record]))
    for line in pin_lines([record], {}, None):
        click.echo(line)
    if held is not None and held.pin is not None:
        click.echo(f"replaces the pin {describe_pin(held.pin, held)}", err=True)
    what = "unpinned" if pin is None else "pinned"
    if dry_run:
        click.echo(f"dry run: {doc_type} not {what}; nothing published", err=True)
        return
    publish_baselines(
        settings.kafka, topic, [record], timeout_s=settings.baseline.publish_timeout_s
    )
    click.echo(
        f"{what} {doc_type}: published {record.version} to {topic}; the drift job and the "
        "alerting service take it from there",
        err=True,
    )
    log.info(
        f"baseline {what}",
        extra={
            "doc_type": doc_type,
            "version": record.version,
            "threshold": pin.threshold if pin else None,
            "min_requests": pin.min_requests if pin else None,
            "mute": pin.mute if pin else None,
            "author": pin.author if pin else author or getpass.getuser(),
            "reason": pin.reason if pin else reason,
        },
    )
