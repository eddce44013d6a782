"""tools/render_dashboard.py end to end on a short run: generated series backfilled into a
real Prometheus (started on loopback), every panel's query returns data, the PNG is drawn.
It starts a Prometheus process of its own (no Kafka, no Flink)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tools import dashboard_series as ds
from tools import deploy_checks as dc
from tools import render_dashboard as rd

pytestmark = [pytest.mark.slow]


def test_every_panel_query_returns_data_and_the_picture_is_drawn(tmp_path: Path) -> None:
    for tool in ("promtool", "prometheus"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: {dc.PROMTOOL_MISSING}")
    board = dc.dashboard()
    series, first, last = ds.traffic_series(live_minutes=45, history_minutes=70, seed=3)
    assert last - first == 44 * 60
    with tempfile.TemporaryDirectory(dir=tmp_path) as work:
        data = rd.backfill(series, Path(work))
        with rd.Prometheus(data) as prom:
            results = rd.panel_results(prom, board, first + 300, last, 60)
    empty = [
        p["title"] for p in dc.dashboard_panels(board) if not any(r for _, r in results[p["id"]])
    ]
    assert not empty, f"panels without data: {empty}"
    # Per doc type: one mean-drift series for each of the six generated types.
    drift = next(p for p in dc.dashboard_panels(board) if p["title"].startswith("Mean drift"))
    means = results[drift["id"]][0][1]
    assert len(means) == 6
    assert all(0 <= float(v) <= 1 for s in means for _, v in s["values"])
    out = tmp_path / "dashboard.png"
    rd.draw(board, results, out, "test", (first + 300, last))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
