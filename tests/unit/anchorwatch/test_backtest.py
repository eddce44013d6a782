"""The backtest core: window arithmetic, input files, the prefix fit and replay, scoring."""

from __future__ import annotations

import io
import math
import random
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from anchorwatch.backtest import aggregate_windows, alerts, backtest, fit_until, score
from anchorwatch.contracts import AnchorSnapshot, SnapshotEvent, WindowAggregate, encode
from anchorwatch.history import (
    BacktestInputError,
    Label,
    parse_time_ms,
    read_baselines,
    read_labels,
    read_windows,
)
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.incident_types import Incident, IncidentChange

T0 = 1_764_403_200_000  # 2025-11-29T08:00Z
MIN = 60_000


def event(t: int, drift: list[float], doc_type: str = "nda") -> SnapshotEvent:
    anchors = [
        AnchorSnapshot(
            anchor_id=f"S_{i}",
            position=i,
            l2_norm=4.0,
            cosine_angle=0.9,
            kl_divergence=0.03,
            drift_score=d,
            recommendation="none",
        )
        for i, d in enumerate(drift)
    ]
    return SnapshotEvent(
        event_id=f"e{t}-{doc_type}",
        event_time_ms=t,
        doc_type=doc_type,
        snapshot_status="active",
        anchor_count=len(anchors),
        anchors=anchors,
    )


def test_aggregate_windows_is_count_and_mean_of_request_means() -> None:
    windows = aggregate_windows(
        [
            event(T0 + 1_000, [0.2, 0.4]),  # request mean 0.3
            event(T0 + 59_999, [0.5]),
            event(T0 + 60_000, [0.9]),
            event(T0 + 5_000, [], doc_type="invoice"),  # no anchors: drift 0.0
        ]
    )
    assert [(w.doc_type, w.window_start_ms, w.request_count) for w in windows] == [
        ("invoice", T0, 1),
        ("nda", T0, 2),
        ("nda", T0 + MIN, 1),
    ]
    assert windows[1].mean_drift == pytest.approx(0.4)
    assert windows[1].window_end_ms == T0 + MIN
    assert windows[0].mean_drift == 0.0


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1764403200000", T0),
        ("2025-11-29T08:00:00Z", T0),
        ("2025-11-29T09:00:00+01:00", T0),
        ("2025-11-29 08:01", T0 + MIN),
    ],
)
def test_times_are_epoch_ms_or_iso(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


def test_parse_time_rejects_garbage() -> None:
    for bad in ("yesterday", True, None, 1.5):
        with pytest.raises(ValueError, match="epoch milliseconds"):
            parse_time_ms(bad)


def test_csv_with_short_names_iso_times_and_optional_columns(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(
        "\ufeffdoc_type,window_start,count,mean,max,zero_anchor_share\n"
        "nda,2025-11-29T08:00:00Z,12,0.31,0.6,\n"
        "nda,1764403260000,9,0.29,,0.5\n",
        encoding="utf-8",
    )
    windows = read_windows(path, window_ms=30_000)
    assert windows[0] == WindowAggregate(
        doc_type="nda",
        window_start_ms=T0,
        window_end_ms=T0 + 30_000,
        request_count=12,
        mean_drift=0.31,
        max_drift=0.6,
    )
    assert windows[1].zero_anchor_share == 0.5
    assert windows[1].max_drift is None


def test_ndjson_takes_contract_names_and_verdict_records() -> None:
    window = WindowAggregate(
        doc_type="nda", window_start_ms=T0, window_end_ms=T0 + MIN, request_count=4, mean_drift=0.2
    )
    lines = [
        encode(window),
        orjson.dumps({"verdict_id": "v", "window": window.model_dump(exclude_none=True)}),
        b"",
        orjson.dumps({"doc_type": "nda", "window_start": T0 + MIN, "count": 3, "mean": 0.4}),
    ]
    windows = read_windows(io.BytesIO(b"\n".join(lines)), fmt="ndjson")
    assert windows[:2] == [window, window]
    assert windows[2].window_end_ms == T0 + 2 * MIN


@pytest.mark.parametrize(
    ("content", "fmt", "message"),
    [
        (b"doc_type,window_start,count,mean\nnda,1764403200000,x,0.3\n", "csv", ":2: count"),
        (b"doc_type,window_start,count,mean\nnda,1764403200000,3,1.5\n", "csv", ":2: mean_drift"),
        (b"window_start,count\n1,2\n", "csv", ":1: the CSV header needs a doc_type"),
        (b'{"doc_type": "nda", "count": 3, "mean": 0.3}\n', "ndjson", ":1: window_start_ms"),
        (b'{"doc_type": "nda"}\n{oops\n', "ndjson", ":1: window_start_ms"),
        (b"[1, 2]\n", "ndjson", ":1: expected a JSON object"),
        (b"\n{oops\n", "ndjson", ":2: not valid JSON"),
        (
            b'{"doc_type": "nda", "window_start": "soon", "count": 1, "mean": 0.1}\n',
            "ndjson",
            ":1: window_start",
        ),
    ],
)
def test_bad_input_names_file_line_and_field(content: bytes, fmt: str, message: str) -> None:
    stream = io.BytesIO(content)
    stream.name = "history"
    with pytest.raises(BacktestInputError) as info:
        read_windows(stream, fmt=fmt)
    assert f"history{message}" in str(info.value)


def test_missing_files_are_clear_errors(tmp_path: Path) -> None:
    for reader in (read_windows, read_baselines, read_labels):
        with pytest.raises(BacktestInputError, match="nope"):
            reader(tmp_path / "nope")


def history(
    minutes: int, *, jump_at: int | None = None, jump: float = 0.3, seed: int = 3
) -> list[WindowAggregate]:
    """Two types; 'nda' jumps by `jump` for 6 minutes from `jump_at`."""
    rng = random.Random(seed)
    out = []
    for m in range(minutes):
        for doc_type, center, n in (("nda", 0.3, 30), ("invoice", 0.55, 20)):
            mean = rng.gauss(center, 0.05 / math.sqrt(n))
            if doc_type == "nda" and jump_at is not None and jump_at <= m < jump_at + 6:
                mean += jump
            out.append(
                WindowAggregate(
                    doc_type=doc_type,
                    window_start_ms=T0 + m * MIN,
                    window_end_ms=T0 + (m + 1) * MIN,
                    request_count=n,
                    mean_drift=mean,
                )
            )
    return out


def test_fit_until_by_minutes_or_share() -> None:
    windows = history(100)
    assert fit_until(windows, minutes=30) == T0 + 30 * MIN
    assert fit_until(windows) == T0 + 50 * MIN
    assert fit_until(windows, fraction=0.333) == T0 + 33 * MIN
    with pytest.raises(BacktestInputError):
        fit_until([])


def test_backtest_fits_on_the_prefix_and_replays_the_rest() -> None:
    windows = history(240, jump_at=200)
    result = backtest(windows, PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    assert result.fit_windows == 240
    assert result.replayed_windows == 240
    assert {t: b.status for t, b in result.baselines.items()} == {
        "nda": "fitted",
        "invoice": "fitted",
    }
    assert result.baselines["nda"].history_end_ms == T0 + 120 * MIN
    assert result.baselines["nda"].fitted_at_ms == T0 + 120 * MIN  # deterministic
    [incident] = result.incidents
    assert (incident.doc_type, incident.first_breach_ms) == ("nda", T0 + 200 * MIN)
    # +0.25 on a type whose history never strayed 0.1: one window beyond anything it showed
    assert incident.opened_at_ms == T0 + 201 * MIN
    assert incident.resolved_at_ms is not None
    assert incident.peak_mean_drift > 0.55
    again = backtest(windows, PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    assert again.incidents == result.incidents


def test_a_hot_type_fires_under_the_static_rule_but_not_under_its_baseline() -> None:
    windows = history(240)
    hot = [
        w.model_copy(update={"mean_drift": w.mean_drift + 0.35})
        for w in windows
        if w.doc_type == "invoice"
    ]  # invoices at 0.9 all day: normal for them
    static = backtest(hot, PolicyConfig(min_windows=10**6), fit_until_ms=T0 + 120 * MIN)
    per_type = backtest(hot, PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    assert len(static.incidents) == 1
    assert static.incidents[0].resolved_at_ms is None
    assert per_type.incidents == []


def test_given_baselines_replay_everything_from_the_cut(tmp_path: Path) -> None:
    windows = history(240, jump_at=30)
    fitted = backtest(history(240, seed=9), PolicyConfig(), fit_until_ms=T0 + 240 * MIN)
    path = tmp_path / "b.ndjson"
    path.write_bytes(b"".join(encode(b) + b"\n" for b in fitted.baselines.values()))
    baselines = read_baselines(path)
    assert baselines == fitted.baselines
    result = backtest(windows, PolicyConfig(), fit_until_ms=T0, baselines=baselines)
    assert result.fits == {}
    assert [i.first_breach_ms for i in result.incidents] == [T0 + 30 * MIN]


def incident(doc_type: str, opened_minute: int, resolved_minute: int | None) -> Incident:
    return Incident(
        incident_id=f"i-{doc_type}-{opened_minute}",
        doc_type=doc_type,
        rule="drift",
        severity="warning",
        evidence="window",
        first_breach_ms=T0 + (opened_minute - 1) * MIN,
        opened_at_ms=T0 + (opened_minute + 1) * MIN,
        resolved_at_ms=None if resolved_minute is None else T0 + resolved_minute * MIN,
        resolution=None if resolved_minute is None else "clean",
        peak_mean_drift=0.6,
        peak_window_start_ms=T0,
        last_breach_ms=T0,
        breach_windows=2,
        reopened=0,
        baseline_version=None,
        threshold=0.4,
    )


def episode(
    doc_type: str, opened: int, resolved: int | None, *, reopened: tuple[int, int] | None = None
) -> list[IncidentChange]:
    """The changes of one incident: opened by the window of minute `opened`, resolved at
    minute `resolved`, optionally re-opened and resolved again."""
    inc = incident(doc_type, opened, None)
    changes = [IncidentChange("opened", inc, T0 + opened * MIN, None, None)]
    if resolved is not None:
        done = replace(inc, resolved_at_ms=T0 + resolved * MIN, resolution="clean")
        changes.append(IncidentChange("resolved", done, T0 + (resolved - 1) * MIN, None, None))
    if reopened is not None:
        again, end = reopened
        changes.append(
            IncidentChange("reopened", replace(inc, reopened=1), T0 + again * MIN, None, None)
        )
        done = replace(inc, reopened=1, resolved_at_ms=T0 + end * MIN, resolution="clean")
        changes.append(IncidentChange("resolved", done, T0 + (end - 1) * MIN, None, None))
    return changes


def label(doc_type: str, start: int, end: int, kind: str = "jump") -> Label:
    return Label(doc_type, T0 + start * MIN, T0 + end * MIN, kind, 0.3)


def test_score_matches_alerts_with_labels() -> None:
    labels = [
        label("nda", 10, 16),  # raised on its 2nd window
        label("nda", 18, 22, "ramp"),  # the alert raised for the jump is still open
        label("nda", 40, 45),  # missed
        label("invoice", 10, 13, "zero_anchors"),  # a data-quality fault: not a positive
        label("medical", 30, 35),  # an alert raised long before stays open: no credit
        label("radiology", 50, 55),  # re-opened by its 2nd window
        label("invoice", 98, 103),  # cut by the end of the replay: not scored
        label("lease", 3, 8),  # cut by the start of the replay: not scored
    ]
    changes = (
        episode("nda", 11, 25)
        + episode("invoice", 11, 14)  # during the fault: a false alarm
        + episode("invoice", 60, 62)  # quiet traffic: a false alarm
        + episode("medical", 20, None)  # raised in quiet traffic, open all along: false
        + episode("radiology", 20, 22, reopened=(51, 58))  # one false alert, one true
        + episode("invoice", 99, None)  # raised in the cut label: counted neither way
        + episode("lease", 6, 9)  # likewise
    )
    s = score(
        changes, labels, replay_start_ms=T0 + 5 * MIN, replay_end_ms=T0 + 100 * MIN, doc_types=5
    )
    assert [(lab.doc_type, lab.start_ms) for lab in s.labels] == [
        ("nda", T0 + 10 * MIN),
        ("nda", T0 + 18 * MIN),
        ("nda", T0 + 40 * MIN),
        ("medical", T0 + 30 * MIN),
        ("radiology", T0 + 50 * MIN),
    ]
    assert [(d.label.doc_type, d.delay_windows) for d in s.detections] == [
        ("nda", 2),
        ("nda", None),
        ("radiology", 2),
    ]
    assert [lab.doc_type for lab in s.missed] == ["medical", "nda"]
    assert [(a.doc_type, a.start_ms) for a in s.true_alerts] == [
        ("nda", T0 + 11 * MIN),
        ("radiology", T0 + 51 * MIN),
    ]
    assert [(a.doc_type, a.start_ms) for a in s.false_alerts] == [
        ("invoice", T0 + 11 * MIN),
        ("medical", T0 + 20 * MIN),
        ("radiology", T0 + 20 * MIN),
        ("invoice", T0 + 60 * MIN),
    ]
    assert s.false_alerts[1].end_ms == math.inf
    assert s.precision == pytest.approx(2 / 6)
    assert s.recall == pytest.approx(3 / 5)
    assert s.delays() == [2, 2]
    assert s.delay_quantile(0.5) == 2.0
    assert s.delays("ramp") == []
    assert s.delay_quantile(0.5, "ramp") is None
    assert s.false_alarms_per_type_day == pytest.approx(4 / (5 * 95 / 1440))


def test_alerts_follow_real_replays() -> None:
    result = backtest(history(240, jump_at=200), PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    [alert] = alerts(result.changes)
    assert alert.start_ms == T0 + 200 * MIN  # raised by the first: beyond its history
    assert alert.end_ms == result.incidents[0].resolved_at_ms


def test_labels_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "labels.ndjson"
    path.write_text(
        '{"doc_type": "nda", "start_ms": 1, "end_ms": 2, "kind": "jump", "magnitude": 0.3}\n'
    )
    assert read_labels(path) == [Label("nda", 1, 2, "jump", 0.3)]
    path.write_text('{"doc_type": "nda"}\n')
    with pytest.raises(BacktestInputError, match=":1: not a label"):
        read_labels(path)
