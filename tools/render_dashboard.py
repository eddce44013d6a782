"""Render the Grafana dashboard's queries to a PNG, without Grafana or a running stack.

1. Generate gateway traffic with the project's generator (deterministic: a quiet history
   to fit baselines on, then a live span with drift incidents, data-quality faults and
   malformed records), compute every window the way the drift job does
   (anchorwatch.demo.slice.reference_windows), fit baselines and judge each window with the
   project's policy code.
2. Turn that into the series the services would have exposed (OpenMetrics with
   timestamps, one sample a minute) and backfill a Prometheus TSDB with
   `promtool tsdb create-blocks-from openmetrics` (the series: tools/dashboard_series.py).
3. Start Prometheus on it (loopback, a free port), run every panel's PromQL through its
   HTTP API (`/api/v1/query_range`), and draw the panels in the dashboard's grid with
   matplotlib.

The picture is labelled as what it is: a rendering of the dashboard's queries on generated
data, not a Grafana screenshot. Flink's lag and checkpoint series are synthetic (small
noise); incidents are counted as windows in breach (the alerting service's hysteresis is
not modelled).

    .venv/bin/python tools/render_dashboard.py                # -> docs/dashboard.png
    .venv/bin/python tools/render_dashboard.py --out /tmp/d.png --live-minutes 120

Needs `promtool` and `prometheus` on PATH (Debian: apt-get install prometheus).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tools` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anchorwatch.stack.processes import free_port
from tools import deploy_checks as dc
from tools.dashboard_series import Series, traffic_series

# --------------------------------------------------------------------------- Prometheus


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise SystemExit(f"{tool} is not installed (Debian: apt-get install prometheus)")
    return found


class Prometheus:
    """A Prometheus on loopback over a backfilled TSDB; stopped on exit."""

    def __init__(self, data_dir: Path) -> None:
        config = data_dir.parent / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n", encoding="utf-8")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (data_dir.parent / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                need("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> Prometheus:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"prometheus exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:  # noqa: S310
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise SystemExit("prometheus did not become ready within 60 s")

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def version(self) -> str:
        info = self.get("/api/v1/status/buildinfo", {})
        return str(info["version"])

    def get(self, path: str, params: dict[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        # Loopback, a URL built here.
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as resp:  # noqa: S310
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: int, end: int, step: int) -> list[dict[str, Any]]:
        data = self.get(
            "/api/v1/query_range",
            {"query": expr, "start": str(start), "end": str(end), "step": str(step)},
        )
        result: list[dict[str, Any]] = data["result"]
        return result


def backfill(series: Series, work: Path) -> Path:
    source = work / "series.om"
    with source.open("w", encoding="utf-8") as f:
        f.writelines(series.openmetrics())
    data = work / "data"
    result = subprocess.run(
        [need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"promtool could not backfill:\n{result.stdout}{result.stderr}")
    return data


# Grafana's $__rate_interval is four scrape intervals; the generated series have one
# sample a minute.
RENDER_VARIABLES = {**dc.GRAFANA_VARIABLES, "$__rate_interval": "4m"}


def panel_results(
    prom: Prometheus, board: dict[str, Any], start: int, end: int, step: int
) -> dict[int, list[tuple[str, list[dict[str, Any]]]]]:
    """Per panel id: (legend format, result) of each target."""
    out: dict[int, list[tuple[str, list[dict[str, Any]]]]] = {}
    for panel in dc.dashboard_panels(board):
        rows = []
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in sorted(RENDER_VARIABLES.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(variable, value)
            rows.append((target.get("legendFormat", ""), prom.query_range(expr, start, end, step)))
        out[panel["id"]] = rows
    return out


# --------------------------------------------------------------------------- drawing

BACKGROUND = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
MUTED = "#8e8e99"
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a")


def legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or str(labels)


def draw(
    board: dict[str, Any],
    results: dict[int, list[tuple[str, list[dict[str, Any]]]]],
    out: Path,
    caption: str,
    span: tuple[int, int],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = board["panels"]
    rows_total = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_h = 0.36  # inches per grid row
    header = 0.9
    width, height = 22.0, rows_total * unit_h + header
    fig = plt.figure(figsize=(width, height), dpi=80, facecolor=BACKGROUND)
    fig.text(0.008, 1 - 0.32 / height, board["title"], color=TEXT, fontsize=17, weight="bold")
    fig.text(0.008, 1 - 0.68 / height, caption, color=MUTED, fontsize=10)
    gap = 0.06  # inches between panels

    def cell(g: dict[str, int]) -> tuple[float, float, float, float]:
        """A grid cell in figure coordinates: left, bottom, width, height."""
        left = (g["x"] / 24) * width + gap
        top = header + g["y"] * unit_h + gap
        w = g["w"] / 24 * width - 2 * gap
        h = g["h"] * unit_h - 2 * gap
        return left / width, 1 - (top + h) / height, w / width, h / height

    def inset(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """The plotting area inside a panel: room for the title, y labels and x labels."""
        left, bottom, w, h = box
        l_in, r_in, t_in, b_in = 0.55 / width, 0.12 / width, 0.38 / height, 0.32 / height
        return left + l_in, bottom + b_in, w - l_in - r_in, h - t_in - b_in

    for panel in panels:
        g = panel["gridPos"]
        box = cell(g)
        if panel["type"] == "row":
            fig.text(
                box[0],
                box[1] + box[3] / 2,
                panel["title"],
                color=TEXT,
                fontsize=13,
                weight="bold",
                va="center",
            )
            continue
        fig.patches.append(
            matplotlib.patches.Rectangle(
                box[:2],
                box[2],
                box[3],
                transform=fig.transFigure,
                facecolor=PANEL,
                edgecolor=BORDER,
                linewidth=0.8,
                zorder=-1,
            )
        )
        pending = any(
            m in dc.PENDING_ALERTING_METRICS
            for t in panel["targets"]
            for m in dc.promql_metric_names(t["expr"])
        )
        title = panel["title"] + (" *" if pending else "")
        fig.text(
            box[0] + 0.1 / width,
            box[1] + box[3] - 0.08 / height,
            title,
            color=TEXT,
            fontsize=11,
            va="top",
        )
        ax = fig.add_axes(inset(box))
        ax.set_facecolor(PANEL)
        for spine in ax.spines.values():
            spine.set_visible(False)
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        series = [
            (legend(fmt, r["metric"]), r["values"])
            for fmt, result in results.get(panel["id"], [])
            for r in result
        ]
        if panel["type"] == "stat":
            draw_stat(ax, series, unit)
            continue
        for i, (name, values) in enumerate(series):
            xs = [float(t) for t, _ in values]
            ys = [float(v) for _, v in values]
            dashed = "threshold" in name
            ax.plot(
                xs,
                ys,
                color=PALETTE[i % len(PALETTE)],
                linewidth=1.0 if dashed else 1.4,
                linestyle=(0, (4, 3)) if dashed else "-",
                label=name,
            )
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults.get("thresholds", {}).get("steps", [])
        style = defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "")
        for step in steps:
            if step.get("value") is not None and style:
                ax.axhline(
                    step["value"],
                    color="#f2495c" if step["color"] == "red" else "#ff9830",
                    linewidth=0.8,
                    alpha=0.8,
                )
                if "area" in style:
                    ax.axhspan(step["value"], defaults.get("max", 1), color="#f2495c", alpha=0.08)
        if "min" in defaults:
            ax.set_ylim(bottom=defaults["min"])
        if "max" in defaults:
            ax.set_ylim(top=defaults["max"])
        if unit == "percentunit":
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=0))
        ax.set_xlim(*span)
        # x is Unix time; a tick every half hour, labelled in UTC.
        ax.xaxis.set_major_locator(matplotlib.ticker.MultipleLocator(1800))
        ax.xaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(
                lambda v, _: datetime.fromtimestamp(v, UTC).strftime("%H:%M")
            )
        )
        ax.tick_params(colors=MUTED, labelsize=8)
        ax.grid(color=BORDER, linewidth=0.5)
        if not series:
            ax.text(
                0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes
            )
        elif len(series) <= 24:
            ax.legend(
                loc="upper left",
                fontsize=7,
                ncol=1 + (len(series) - 1) // 6,
                facecolor=PANEL,
                edgecolor=BORDER,
                labelcolor=TEXT,
                framealpha=0.8,
            )
    fig.savefig(out, facecolor=BACKGROUND)
    plt.close(fig)


def draw_stat(ax: Any, series: list[tuple[str, list[list[Any]]]], unit: str) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    if not series:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    n = len(series)
    for i, (name, values) in enumerate(series):
        value = float(values[-1][1])
        shown = f"{value / 3600:.1f} h" if unit == "s" else f"{value:.0f}"
        x = (i + 0.5) / n
        ax.text(
            x,
            0.55,
            shown,
            color="#73bf69" if value == 0 or unit == "s" else "#ff9830",
            fontsize=26,
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.text(x, 0.2, name, color=TEXT, fontsize=10, ha="center", transform=ax.transAxes)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=dc.ROOT / "docs" / "dashboard.png")
    parser.add_argument("--live-minutes", type=int, default=180)
    parser.add_argument("--history-minutes", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    board = dc.dashboard()
    series, first, last = traffic_series(args.live_minutes, args.history_minutes, args.seed)
    with tempfile.TemporaryDirectory(prefix="anchorwatch-dashboard-") as tmp:
        data = backfill(series, Path(tmp))
        with Prometheus(data) as prom:
            span = (first + 5 * 60, last)
            results = panel_results(prom, board, *span, 60)
            version = prom.version()
    empty = [
        p["title"] for p in dc.dashboard_panels(board) if not any(r for _, r in results[p["id"]])
    ]
    caption = (
        f"A rendering of the Grafana dashboard's queries (deploy/grafana/dashboards/"
        f"anchorwatch.json) by tools/render_dashboard.py through Prometheus {version}, on "
        f"{args.live_minutes} minutes of generated traffic; not a Grafana screenshot."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    draw(board, results, args.out, caption, span)
    print(f"wrote {args.out}; panels without data: {empty or 'none'}")
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main())
