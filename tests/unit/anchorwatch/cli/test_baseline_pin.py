"""`anchorwatch baseline pin` and what `baseline show` and `baseline fit --publish` do with
pins, without Kafka: the topic is a dict the commands read, publishing a list they append to."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from anchorwatch.cli import cli
from anchorwatch.contracts import Baseline, BaselinePin, encode
from anchorwatch.policy.config import PinError
from tests.support.policy import T0, baseline


class Topic:
    """The compacted baselines topic: current records by doc type, and what was published."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *records: Baseline) -> None:
        self.current = {b.doc_type: b for b in records}
        self.published: list[Baseline] = []
        self.reads = 0
        # (anchorwatch.cli.baseline names the command group too: the modules themselves.)
        for module in ("anchorwatch.cli.baseline_pin", "anchorwatch.cli.baseline"):
            monkeypatch.setattr(sys.modules[module], "current_baselines", self._read)
        monkeypatch.setattr("anchorwatch.baseline_publish.publish_baselines", self._publish)

    def _read(self, _kafka: Any, _topic: str) -> dict[str, Baseline]:
        self.reads += 1
        return dict(self.current)

    def _publish(self, _kafka: Any, _topic: str, records: Iterable[Baseline], **_: Any) -> int:
        records = list(records)
        self.published += records
        return len(records)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["baseline", *args])


PINNED = BaselinePin(
    threshold=0.7, author="ana", reason="vendor runs high", pinned_at_ms=T0 + 60_000
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "1.5"], "threshold: must be above 0 and at most 1, got 1.5"),
        (["--threshold", "0"], "threshold: must be above 0 and at most 1, got 0.0"),
        (["--threshold", "-0.2"], "threshold: must be above 0 and at most 1, got -0.2"),
        (["--threshold", "0.5", "--critical-threshold", "0.4"], "critical_threshold: must not"),
        (["--critical-threshold", "0.9"], "critical_threshold: pinned only together with"),
        (["--min-requests", "-5"], "min_requests: must be at least 1, got -5"),
        ([], "pin: nothing to pin (give --threshold, --min-requests or --mute; --unpin"),
        (["--unpin", "--mute"], "unpin: --unpin takes no --threshold, --min-requests or --mute"),
        (["--mute", "--doc-type", "in\x07voice"], "doc_type: U+0007 (Cc) not allowed"),
        (["--mute", "--doc-type", "\u200b"], "doc_type: U+200B (Cf) not allowed"),
        (["--mute", "--reason", "one\ntwo"], "reason: String should match pattern"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_published(
    monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    topic = Topic(monkeypatch, baseline("invoice"))
    doc_type = [] if "--doc-type" in args else ["--doc-type", "invoice"]
    result = run("pin", *doc_type, *args)
    assert isinstance(result.exception, PinError), result.output
    assert str(result.exception).startswith(message)
    assert (topic.published, topic.reads) == ([], 0)  # refused before Kafka


def test_a_type_pinned_in_settings_is_refused_there(monkeypatch: pytest.MonkeyPatch) -> None:
    topic = Topic(monkeypatch, baseline("invoice"))
    monkeypatch.setenv("ANCHORWATCH_POLICY__PINS", '{"invoice": {"mute": true}}')
    result = run("pin", "--doc-type", "invoice", "--threshold", "0.7")
    assert isinstance(result.exception, PinError)
    assert "doc_type: 'invoice' is pinned in settings ([policy.pins])" in str(result.exception)
    assert topic.published == []


def test_a_pin_publishes_the_held_baseline_marked_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    held = baseline("invoice")
    topic = Topic(monkeypatch, held)
    result = run(
        "pin", "--doc-type", "invoice", "--threshold", "0.7", "--min-requests", "20",
        "--reason", "vendor runs high", "--author", "ana",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (record,) = topic.published
    assert record.pin is not None
    assert (record.pin.threshold, record.pin.min_requests, record.pin.mute) == (0.7, 20, False)
    assert (record.pin.author, record.pin.reason, record.pin.source) == (
        "ana",
        "vendor runs high",
        "command",
    )
    assert record.fitted_at_ms > held.fitted_at_ms  # every reader takes it over the held one
    assert (record.threshold, record.center) == (held.threshold, held.center)  # fitted, kept
    assert "pinned invoice: threshold 0.700 (fitted 0.350), critical 0.800" in result.output
    assert "at least 20 requests a window; by ana at " in result.output
    assert "pinned invoice: published" in result.output


def test_a_type_without_a_baseline_is_pinned_too(monkeypatch: pytest.MonkeyPatch) -> None:
    topic = Topic(monkeypatch)
    result = run("pin", "--doc-type", "new type", "--mute", "--author", "ana")
    assert result.exit_code == 0, result.output
    (record,) = topic.published
    assert (record.doc_type, record.status, record.pin) == (
        "new type",
        "insufficient_history",
        BaselinePin(
            mute=True, author="ana", pinned_at_ms=record.pin.pinned_at_ms if record.pin else 0
        ),
    )


def test_a_new_pin_replaces_the_old_and_unpin_lets_the_type_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = baseline("invoice", pin=PINNED)
    topic = Topic(monkeypatch, held)
    replaced = run("pin", "--doc-type", "invoice", "--mute", "--author", "bo")
    assert replaced.exit_code == 0, replaced.output
    assert "replaces the pin threshold 0.700" in replaced.output
    assert topic.published[0].pin == BaselinePin(
        mute=True, author="bo", pinned_at_ms=topic.published[0].fitted_at_ms
    )
    unpinned = run("pin", "--doc-type", "invoice", "--unpin")
    assert unpinned.exit_code == 0, unpinned.output
    assert topic.published[1].pin is None
    assert topic.published[1].threshold == held.threshold
    assert "unpinned invoice: published" in unpinned.output
    # Nothing to unpin: refused.
    topic.current = {"invoice": topic.published[1]}
    again = run("pin", "--doc-type", "invoice", "--unpin")
    assert isinstance(again.exception, PinError)
    assert "doc_type: 'invoice' is not pinned on anchorwatch.baselines" in str(again.exception)
    assert len(topic.published) == 2


def test_a_dry_run_publishes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    topic = Topic(monkeypatch, baseline("invoice"))
    result = run("pin", "--doc-type", "invoice", "--threshold", "0.7", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "dry run: invoice not pinned; nothing published" in result.output
    assert topic.published == []


def test_show_marks_pinned_types_with_who_when_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "baselines.ndjson"
    records = [baseline("invoice", pin=PINNED), baseline("nda"), baseline("pdf")]
    path.write_bytes(b"".join(encode(b) + b"\n" for b in records))
    monkeypatch.setenv(
        "ANCHORWATCH_POLICY__PINS",
        '{"pdf": {"min_requests": 50, "reason": "tiny batches"}, "memo": {"mute": true}}',
    )
    result = run("show", "--from-file", str(path))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:4]}
    assert rows["invoice"].split()[5:7] == ["0.700", "0.800"]  # the pinned figures
    assert rows["pdf"].split()[7] == "50"
    assert [rows[t].split()[11] for t in ("invoice", "nda", "pdf")] == ["yes", "-", "settings"]
    assert rows["nda"].split()[5] == "0.350"
    assert (
        "pinned invoice: threshold 0.700 (fitted 0.350), critical 0.800; by ana at "
        "2025-11-29T08:01Z: vendor runs high"
    ) in result.output
    assert (
        "pinned pdf: at least 50 requests a window; in settings ([policy.pins]): tiny batches"
        in (result.output)
    )
    assert "pinned memo (no baseline yet): muted" in result.output
    assert "pinned nda" not in result.output
    one = run("show", "memo", "--from-file", str(path))
    assert one.exit_code == 0, one.output
    assert "pinned memo (no baseline yet)" in one.output
    assert run("show", "other", "--from-file", str(path)).exit_code == 1


def windows_csv(path: Path, *doc_types: str) -> Path:
    lines = ["doc_type,window_start,count,mean"]
    for doc_type in doc_types:
        lines += [f"{doc_type},{T0 + i * 60_000},40,{0.30 + 0.01 * (i % 5)}" for i in range(30)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_fit_keeps_a_pinned_baseline_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANCHORWATCH_POLICY__MIN_WINDOWS", "10")
    topic = Topic(monkeypatch, baseline("invoice", pin=PINNED), baseline("nda"))
    history = windows_csv(tmp_path / "w.csv", "invoice", "nda")
    kept = run("fit", "--windows-file", str(history))
    assert kept.exit_code == 0, kept.output
    assert [b.doc_type for b in topic.published] == ["nda"]
    assert (
        "kept 1 pinned baselines, not published (--force replaces them and their pins): invoice"
        in (kept.output)
    )
    topic.published = []
    forced = run("fit", "--windows-file", str(history), "--force")
    assert forced.exit_code == 0, forced.output
    assert sorted(b.doc_type for b in topic.published) == ["invoice", "nda"]
    assert all(b.pin is None for b in topic.published)
    assert "replaced 1 pinned baselines, their pins are gone (--force): invoice" in forced.output
