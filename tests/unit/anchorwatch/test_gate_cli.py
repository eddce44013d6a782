"""`anchorwatch gate` as a CI job runs it: files in, exit status, JUnit XML and Markdown
out, and every kind of bad input refused with a reason (through ``main``, which maps errors
to exit statuses as the installed command does)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from anchorwatch.cli import main
from anchorwatch.demo.release_run import ReleaseRunConfig, TypeTruth, release_run

NEW, OLD = "summarizer-2.1", "summarizer-2.0"
# The true difference is +0.1; the estimate is within a few thousandths of it.
WORSE_BY_ABOUT_0_1 = re.compile(rf"worse than {OLD!r} by \+0\.(09[5-9]|10[0-5])\d")
# invoice passes, nda is much worse than production, lease is short of documents.
MIXED = ReleaseRunConfig(
    types=(
        TypeTruth("invoice", 0.45, -0.02, docs=300),
        TypeTruth("nda", 0.5, 0.1, docs=300),
        TypeTruth("lease|<b>", 0.4, 0.0, docs=100),
    )
)


def write_run(path: Path, run: ReleaseRunConfig, extra: list[bytes] = ()) -> Path:  # type: ignore[assignment]
    path.write_bytes(b"".join(line + b"\n" for line in [*release_run(run), *extra]))
    return path


def gate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["anchorwatch", "--log-level", "WARNING", "gate", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run.ndjson", MIXED)


def test_exit_0_when_every_type_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run.ndjson", ReleaseRunConfig(types=(TypeTruth("invoice", 0.4),)))
    code, out, _ = gate(monkeypatch, capsys, "--snapshots", str(run), "--model", NEW)
    assert code == 0
    assert out.startswith(f"release gate: {NEW!r} (max mean 0.72, margin 0)\nPASS  'invoice'")


def test_exit_1_when_a_type_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = ReleaseRunConfig(types=(TypeTruth("invoice", 0.45), TypeTruth("nda", 0.5, 0.1)))
    path = write_run(tmp_path / "run.ndjson", run)
    code, out, _ = gate(
        monkeypatch, capsys, "--snapshots", str(path), "--model", NEW, "--against", OLD
    )
    assert code == 1
    assert "PASS  'invoice'" in out
    assert "FAIL  'nda'" in out
    assert WORSE_BY_ABOUT_0_1.search(out)


def test_junit_and_markdown_report_every_type(
    mixed: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    junit = tmp_path / "gate.xml"
    args = ["--snapshots", str(mixed), "--model", NEW, "--against", OLD, "--min-docs", "300"]
    code, out, _ = gate(monkeypatch, capsys, *args, "--junit", str(junit), "--markdown")
    assert code == 2  # lease has 100 documents: not judged, never a pass

    root = ET.parse(junit).getroot()  # noqa: S314 (our own output)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    for element in (root, suite):
        assert (element.get("tests"), element.get("failures"), element.get("errors")) == (
            "3",
            "1",
            "1",
        )
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert set(cases) == {"invoice", "nda", "lease|<b>"}
    assert list(cases["invoice"]) == []
    failure = cases["nda"].find("failure")
    assert failure is not None
    assert WORSE_BY_ABOUT_0_1.search(failure.get("message", ""))
    assert "n=300 mean=0.6" in (failure.text or "")
    error = cases["lease|<b>"].find("error")
    assert error is not None
    assert "100 documents of this type" in error.get("message", "")

    lines = out.splitlines()
    assert lines[0] == f"### Release gate: {NEW} against {OLD}"
    rows = [line for line in lines if line.startswith("| ")]
    assert rows[0].startswith("| doc type | n | mean drift | n (production) |")
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| invoice", "| lease\\|\\<b\\>", "| nda"]
    # The escaped | does not add a cell: every row has the header's cells.
    assert {row.replace("\\|", "").count("|") for row in rows} == {rows[0].count("|")}
    assert "**fail**" in out
    assert "**not judged**" in out


def test_stdin_is_read_with_a_dash(
    mixed: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with mixed.open("rb") as fh:
        monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": fh})())
        code, out, _ = gate(
            monkeypatch, capsys, "--snapshots", "-", "--model", NEW, "--min-docs", "2"
        )
    assert code == 0
    assert out.count("PASS") == 3


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "m" * 10_000], "--model: String should have at most 128 characters"),
        (["--model", "new\x07"], "--model: U+0007 (Cc) not allowed"),
        (["--model", NEW, "--against", NEW], "--against: must name another model"),
        (["--model", NEW, "--max-mean", "1.5"], "--max-mean: Input should be less than"),
        (["--model", NEW, "--max-mean", "nan"], "--max-mean: Input should be a finite number"),
        (["--model", NEW, "--min-docs", "1"], "--min-docs: Input should be greater than"),
        (["--model", NEW, "--max-mean", "high"], "'high' is not a valid float"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    mixed: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    fragment: str,
) -> None:
    code, out, err = gate(monkeypatch, capsys, "--snapshots", str(mixed), *args)
    assert code == 2
    assert fragment in err
    assert out == ""


def _record(**changes: object) -> bytes:
    line = next(release_run(ReleaseRunConfig(types=(TypeTruth("invoice", 0.4, docs=1),))))
    record = orjson.loads(line)
    record.update(changes)
    return orjson.dumps(record)


def _bad_drift() -> bytes:
    record = orjson.loads(_record())
    record["anchors"][0]["drift_score"] = "0.5"
    return orjson.dumps(record)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (_record(model="m" * 10_000), "model: String should have at most 128 characters"),
        (_record(model="new\u202e"), "model: U+202E (Cf) not allowed"),
        (_record(model=7), "model: Input should be a valid string"),
        (_bad_drift(), "anchors[0].drift_score: Input should be a valid number"),
        (b'{"event_id": "x", "mean_drift": "high"', "$: not valid JSON"),
        (_record(event_id="run7-t0-m0-d0", doc_type="nda"), "appears twice with different"),
    ],
)
def test_a_bad_record_exits_2_naming_its_line_and_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: bytes,
    fragment: str,
) -> None:
    run = ReleaseRunConfig(types=(TypeTruth("invoice", 0.4, docs=5),))
    path = write_run(tmp_path / "run.ndjson", run, [extra])
    code, out, err = gate(monkeypatch, capsys, "--snapshots", str(path), "--model", NEW)
    assert code == 2
    assert f"{path}:11: " in err  # 5 documents by 2 models, then the bad line
    assert fragment in err
    assert len(err) < 1_000  # a 10,000-character name is not echoed back
    assert out == ""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "nope"], "--model 'nope': no record of this model in the run"),
        (["--model", NEW, "--against", "v0"], "--against 'v0': no record of this model"),
        (["--model", NEW, "--strict"], "neither --model nor --against (--strict"),
    ],
)
def test_an_unknown_model_or_a_mixed_run_exits_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    fragment: str,
) -> None:
    path = write_run(tmp_path / "run.ndjson", MIXED)
    code, _, err = gate(monkeypatch, capsys, "--snapshots", str(path), "--min-docs", "2", *args)
    assert code == 2
    assert fragment in err


def test_a_missing_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.ndjson"
    code, _, err = gate(monkeypatch, capsys, "--snapshots", str(missing), "--model", NEW)
    assert code == 2
    assert f"--snapshots {missing}: No such file or directory" in err
