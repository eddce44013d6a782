"""A small PNG chart of one doc type's mean drift per window against its threshold, with
its title and alt text; when the windows carry request latency (a job with the breakdown),
a second panel under it, on the same time axis, shows latency p50 and p95: what the drift
cost.

Rendered with matplotlib's Agg backend on a private ``Figure`` (no pyplot global state, so
it is safe from any thread). matplotlib is imported on first use: a service without charts
never pays for it.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from anchorwatch.alerting.render import IncidentView, WindowPoint, clean_text, truncate

#: How much taller the chart is with its latency panel.
LATENCY_PANEL_PX: Final = 160


def render_chart(
    points: Sequence[WindowPoint],
    *,
    title: str,
    width_px: int = 800,
    height_px: int = 300,
) -> bytes:
    """PNG bytes: mean drift per window (line), the threshold (dashed step line), windows
    above it marked; request latency p50/p95 under it when any window has them (the chart
    ``LATENCY_PANEL_PX`` taller). Needs at least one point."""
    if not points:
        raise ValueError("points: need at least one window to draw")
    from matplotlib.dates import AutoDateLocator, DateFormatter, date2num
    from matplotlib.figure import Figure

    dpi = 100
    moments = [datetime.fromtimestamp(p.window_start_ms / 1000, UTC) for p in points]
    times = [float(date2num(m)) for m in moments]  # type: ignore[no-untyped-call]
    drift = [p.mean_drift for p in points]
    threshold = [p.threshold for p in points]
    above = [(t, d) for t, d, th in zip(times, drift, threshold, strict=True) if d > th]

    latency = any(p.latency_p95_ms is not None or p.latency_p50_ms is not None for p in points)
    if latency:
        height_px += LATENCY_PANEL_PX
    fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi, layout="constrained")
    if latency:
        ax, lat = fig.subplots(
            2,
            1,
            sharex=True,
            gridspec_kw={"height_ratios": (height_px - LATENCY_PANEL_PX, LATENCY_PANEL_PX)},
        )
        _latency_panel(lat, times, points)
    else:
        ax = fig.add_subplot()
    ax.plot(
        times, drift, color="#1f5fa8", linewidth=2, marker="o", markersize=3, label="mean drift"
    )
    ax.step(
        times,
        threshold,
        where="mid",
        color="#c0392b",
        linestyle="--",
        linewidth=1.5,
        label="threshold",
    )
    if above:
        ax.scatter(
            [t for t, _ in above],
            [d for _, d in above],
            color="#c0392b",
            s=28,
            zorder=3,
            label="above threshold",
        )
    top = max(max(drift), max(threshold))
    ax.set_ylim(0.0, min(1.0, top + 0.1) if top < 0.95 else 1.02)
    ax.set_ylabel("mean drift")
    ax.xaxis.set_major_locator(AutoDateLocator(tz=UTC, minticks=4, maxticks=8))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    if not latency:  # else the latency panel under it carries the time axis' label
        ax.set_xlabel("window start (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.8)
    # Text is untrusted: '$' would start mathtext; control characters are replaced.
    ax.set_title(truncate(clean_text(title), 80).replace("$", r"\$"), fontsize=11)

    buf = io.BytesIO()
    with warnings.catch_warnings():
        # Glyphs the bundled font lacks (CJK, emoji) draw as boxes; that is fine.
        warnings.simplefilter("ignore", UserWarning)
        level = logging.getLogger("matplotlib").level
        logging.getLogger("matplotlib").setLevel(logging.ERROR)
        try:
            fig.savefig(buf, format="png", metadata={"Software": None})
        finally:
            logging.getLogger("matplotlib").setLevel(level)
    return buf.getvalue()


def _latency_panel(ax: Any, times: Sequence[float], points: Sequence[WindowPoint]) -> None:
    """Request latency p50 and p95 per window, in ms (gaps where a window had none)."""
    nan = float("nan")
    for name, values, color, style in (
        ("p95 latency", [p.latency_p95_ms for p in points], "#8e44ad", "-"),
        ("p50 latency", [p.latency_p50_ms for p in points], "#7f8c8d", "--"),
    ):
        if any(v is not None for v in values):
            ax.plot(
                times,
                [float(v) if v is not None else nan for v in values],
                color=color,
                linestyle=style,
                linewidth=1.5,
                marker="o",
                markersize=2,
                label=name,
            )
    ax.set_ylim(bottom=0)
    ax.set_ylabel("latency (ms)")
    ax.set_xlabel("window start (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.8)


def chart_title(view: IncidentView) -> str:
    return f"Drift of {truncate(clean_text(view.doc_type), 60)} vs threshold"


def chart_alt_text(view: IncidentView, points: Sequence[WindowPoint]) -> str:
    above = sum(1 for p in points if p.mean_drift > p.threshold)
    p95 = [p.latency_p95_ms for p in points if p.latency_p95_ms is not None]
    latency = f" Under it, request latency p50 and p95; p95 up to {max(p95):,} ms." if p95 else ""
    return truncate(
        f"Mean drift per window of {clean_text(view.doc_type)} over the last {len(points)} "
        f"windows against its threshold; {above} above the threshold.{latency}",
        1000,
    )
