"""`anchorwatch baseline backtest | fit | show` end to end on files (no Kafka):
generated traffic -> window file -> baselines -> incidents, scored against the labels."""

from __future__ import annotations

import csv
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner, Result

from anchorwatch.backtest import aggregate_windows
from anchorwatch.cli.baseline import baseline
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.history import BacktestInputError

# The generated history takes a few seconds to make.
pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Four hours of six doc types with drift incidents: a window CSV and its labels."""
    traffic = generate(
        TrafficConfig(seed=5, minutes=240, doc_types=6, incidents=12, background_fault_rate=0.01)
    )
    windows = aggregate_windows(r.event for r in traffic.records() if r.event is not None)
    root = tmp_path_factory.mktemp("history")
    path = root / "windows.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["doc_type", "window_start", "count", "mean"])
        for w in windows:
            out.writerow([w.doc_type, w.window_start_ms, w.request_count, repr(w.mean_drift)])
    labels = root / "windows.labels.ndjson"
    labels.write_bytes(b"".join(i.to_json() + b"\n" for i in traffic.incidents))
    return path, labels


def run(*args: str) -> Result:
    @click.group()
    def root() -> None:
        pass

    root.add_command(baseline)
    env = {"ANCHORWATCH_CONFIG": "", "ANCHORWATCH_POLICY__VERSION": "p1"}
    return CliRunner().invoke(root, list(args), obj={"config": None}, env=env)


def test_backtest_writes_the_incidents_it_would_have_opened(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    windows, labels = history
    out, fitted = tmp_path / "incidents.ndjson", tmp_path / "baselines.ndjson"
    result = run(
        "baseline", "backtest", str(windows), "--fit-minutes", "120", "--out", str(out),
        "--baselines-out", str(fitted), "--labels", str(labels),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    incidents = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert incidents
    for inc in incidents:
        assert {"doc_type", "opened_at", "resolved_at", "peak_mean_drift", "incident_id"} <= set(
            inc
        )
        assert inc["opened_at_ms"] >= 1_764_403_200_000 + 120 * 60_000
    # Every incident is on a type with a labelled drift incident at that time.
    truth = [orjson.loads(line) for line in labels.read_bytes().splitlines()]
    for inc in incidents:
        assert any(
            t["doc_type"] == inc["doc_type"]
            and t["kind"] in ("jump", "ramp")
            and t["start_ms"] <= inc["first_breach_ms"] < t["end_ms"] + 60_000
            for t in truth
        ), inc
    assert "score:" in result.output
    assert "precision 1.000" in result.output
    assert len(fitted.read_bytes().splitlines()) == 6

    # The same history with the baselines just written, cut the same way (each type after
    # its own first 120 minutes), replays to the same incidents.
    again = run(
        "baseline", "backtest", str(windows), "--baselines", str(fitted), "--fit-minutes", "120",
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    replayed = [orjson.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    assert replayed == incidents


def test_backtest_reads_ndjson_topic_dumps(history: tuple[Path, Path], tmp_path: Path) -> None:
    windows, _ = history
    dump = tmp_path / "verdicts.ndjson"
    with windows.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    dump.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "verdict_id": "v",
                    "window": {
                        "doc_type": r["doc_type"],
                        "window_start_ms": int(r["window_start"]),
                        "window_end_ms": int(r["window_start"]) + 60_000,
                        "request_count": int(r["count"]),
                        "mean_drift": float(r["mean"]),
                    },
                }
            )
            + b"\n"
            for r in rows
        )
    )
    from_csv = run("baseline", "backtest", str(windows), "--fit-fraction", "0.5")
    from_dump = run("baseline", "backtest", str(dump), "--fit-fraction", "0.5")
    assert from_csv.exit_code == from_dump.exit_code == 0, from_dump.output
    assert from_csv.stdout == from_dump.stdout


def test_backtest_errors_are_clear(history: tuple[Path, Path], tmp_path: Path) -> None:
    windows, _ = history
    assert "give input files or --from-topic" in run("baseline", "backtest").output
    both = run("baseline", "backtest", str(windows), "--fit-minutes", "5", "--fit-fraction", "0.5")
    assert both.exit_code == 2
    assert "at most one of" in both.output
    late = run("baseline", "backtest", str(windows), "--fit-minutes", "100000")
    assert "nothing to replay" in str(late.exception)
    bad = tmp_path / "bad.csv"
    bad.write_text("doc_type,window_start,count,mean\nnda,1764403200000,3,lots\n")
    result = run("baseline", "backtest", str(bad))
    assert isinstance(result.exception, BacktestInputError)
    assert "bad.csv:2: mean" in str(result.exception)


def test_baseline_fit_from_a_window_file_and_show(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    windows, _ = history
    out = tmp_path / "baselines.ndjson"
    fit = run(
        "baseline", "fit", "--windows-file", str(windows), "--until", "2025-11-29T10:00Z",
        "--no-publish", "--out", str(out),
    )  # fmt: skip
    assert fit.exit_code == 0, fit.output
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == 6
    assert all(r["status"] == "fitted" and r["window_count"] <= 120 for r in records)
    assert {r["history_end_ms"] for r in records} == {1_764_410_400_000}
    assert "seasonality off" in fit.output  # two hours cannot show a daily pattern

    shown = run("baseline", "show", "--from-file", str(out))
    assert shown.exit_code == 0
    assert all(r["doc_type"] in shown.output for r in records)
    name = records[0]["doc_type"]
    one = run("baseline", "show", name, "--from-file", str(out), "--json")
    assert [orjson.loads(line)["doc_type"] for line in one.output.splitlines()] == [name]
    # One type in words: the page budget, what the history's replay paged, and how its
    # threshold was chosen (the record's figures, written by the fit itself).
    record = next(r for r in records if r["doc_type"] == name)
    told = run("baseline", "show", name, "--from-file", str(out)).output
    assert f"threshold {record['threshold']:.3f}: from {record['threshold_basis']}" in told
    assert (
        f"page budget 1 a week; the replay of its 0.1 days of history pages "
        f"{record['replayed_pages_per_week']:.2f} a week"
    ) in told
    missing = run("baseline", "show", "no_such_type", "--from-file", str(out))
    assert missing.exit_code == 1
    assert "no baseline for doc type 'no_such_type'" in missing.output


def test_baseline_fit_refuses_to_fit_into_nowhere(history: tuple[Path, Path]) -> None:
    windows, _ = history
    result = run("baseline", "fit", "--windows-file", str(windows), "--no-publish")
    assert result.exit_code == 2
    assert "--no-publish needs --out" in result.output


# --------------------------------------------------------------------------- own history


def _rows(
    doc_type: str, first_minute: int, n: int, *, step_min: int = 1, jump: range = range(0)
) -> list[list[object]]:
    """CSV rows: a steady level with a little noise, raised by 0.3 on the ``jump`` rows."""
    t0 = 1_764_403_200_000
    return [
        [
            doc_type,
            t0 + (first_minute + i * step_min) * 60_000,
            40,
            f"{0.3 + (i % 5 - 2) * 0.002 + (0.3 if i in jump else 0.0):.4f}",
        ]
        for i in range(n)
    ]


def _csv(path: Path, rows: list[list[object]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["doc_type", "window_start", "count", "mean"])
        out.writerows(rows)
    return path


def test_many_series_each_fitted_on_its_own_prefix(tmp_path: Path) -> None:
    path = _csv(
        tmp_path / "mine.csv",
        _rows("early", 0, 240) + _rows("late", 1000, 240, jump=range(200, 206)),
    )
    fitted = tmp_path / "baselines.ndjson"
    out = tmp_path / "incidents.ndjson"
    result = run(
        "baseline", "backtest", str(path), "--fit-fraction", "0.5", "--baselines-out", str(fitted),
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    baselines = {b["doc_type"]: b for b in map(orjson.loads, fitted.read_bytes().splitlines())}
    assert {t: b["status"] for t, b in baselines.items()} == {"early": "fitted", "late": "fitted"}
    assert baselines["late"]["history_end_ms"] == 1_764_403_200_000 + 1120 * 60_000
    assert "each type from its own cut" in result.output
    [incident] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert incident["doc_type"] == "late"


def test_rows_wider_apart_than_the_window_are_warned_about_once_per_type(
    tmp_path: Path,
) -> None:
    path = _csv(
        tmp_path / "five.csv",
        _rows("five_min", 0, 160, step_min=5) + _rows('"odd" type', 0, 160, step_min=5),
    )
    result = run("baseline", "backtest", str(path))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2
    assert warnings[1].startswith('warning: "five_min": 159 of 160 rows come after a gap')
    assert "typical spacing 300 s" in warnings[1]
    assert warnings[0].startswith('warning: "\\"odd\\" type": 159 of 160')  # quoted
    quiet = run("baseline", "backtest", str(path), "--rows-are-windows")
    assert quiet.exit_code == 0, quiet.output
    assert "warning:" not in quiet.output


def test_rows_are_windows_judges_five_minute_samples_as_consecutive_windows(
    tmp_path: Path,
) -> None:
    path = _csv(tmp_path / "five.csv", _rows("five_min", 0, 160, step_min=5, jump=range(120, 126)))
    changes = tmp_path / "changes.ndjson"
    result = run("baseline", "backtest", str(path), "--rows-are-windows", "--changes", str(changes))
    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in changes.read_bytes().splitlines()]
    opened = next(r for r in records if r["change"] == "opened")
    assert opened["window"]["window_end_ms"] - opened["window"]["window_start_ms"] == 300_000


def test_repeated_window_starts_are_warned_about_and_the_last_row_counts(
    tmp_path: Path,
) -> None:
    rows = _rows("nda", 0, 240)
    # The replayed half once more, first with a breaching figure: the later row wins.
    doubled = [[*r[:3], "0.9500"] for r in rows[120:]] + rows
    path = _csv(tmp_path / "dup.csv", doubled)
    out = tmp_path / "incidents.ndjson"
    result = run("baseline", "backtest", str(path), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert 'warning: "nda": 120 rows repeat a window start already given' in result.output
    assert out.read_bytes() == b""


def test_changes_lists_every_state_change_with_its_window(tmp_path: Path) -> None:
    path = _csv(tmp_path / "jump.csv", _rows("nda", 0, 240, jump=range(200, 206)))
    changes, out = tmp_path / "changes.ndjson", tmp_path / "incidents.ndjson"
    result = run("baseline", "backtest", str(path), "--changes", str(changes), "--out", str(out))
    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in changes.read_bytes().splitlines()]
    assert records[0]["change"] == "opened"
    assert records[-1]["change"] == "resolved"
    assert records[-1]["incident"]["resolution"] in ("clean", "silent")
    for r in records:
        assert r["window_start"].endswith("Z")
        assert r["incident"]["doc_type"] == "nda"
    # The incidents file still holds each incident once, in its final state.
    [incident] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert incident == records[-1]["incident"]
