"""The backtest on people's own history: many series with their own fit cuts, rows spaced
wider than the window, repeated window starts, and every state change written out."""

from __future__ import annotations

import math
import random

import orjson

from anchorwatch.backtest import (
    backtest,
    change_record,
    deduplicate,
    fit_cuts,
    rows_as_windows,
    score,
    spacing,
)
from anchorwatch.contracts import WindowAggregate
from anchorwatch.history import Label
from anchorwatch.policy.config import PolicyConfig, RuleConfig
from anchorwatch.policy.incident_types import Incident, IncidentChange

T0 = 1_764_403_200_000  # 2025-11-29T08:00Z
MIN = 60_000


def series(
    doc_type: str,
    first_minute: int,
    rows: int,
    *,
    step_min: int = 1,
    center: float = 0.3,
    jump_rows: range = range(0),
    jump: float = 0.3,
    seed: int = 7,
) -> list[WindowAggregate]:
    """One row every ``step_min`` minutes, each a one-minute window; ``jump_rows`` raised."""
    rng = random.Random(seed)
    out = []
    for i in range(rows):
        start = T0 + (first_minute + i * step_min) * MIN
        mean = rng.gauss(center, 0.05 / math.sqrt(40)) + (jump if i in jump_rows else 0.0)
        out.append(
            WindowAggregate(
                doc_type=doc_type,
                window_start_ms=start,
                window_end_ms=start + MIN,
                request_count=40,
                mean_drift=mean,
            )
        )
    return out


def test_each_series_gets_its_own_fit_cut() -> None:
    # Two series that do not overlap: one global cut would fit all of "early" and replay
    # none of it, and replay all of "late" without a baseline.
    early = series("early", 0, 240)
    late = series("late", 1000, 240, jump_rows=range(200, 206))
    cuts = fit_cuts(early + late, fraction=0.5)
    assert cuts == {"early": T0 + 120 * MIN, "late": T0 + 1120 * MIN}
    assert fit_cuts(early + late, minutes=60) == {"early": T0 + 60 * MIN, "late": T0 + 1060 * MIN}

    result = backtest(early + late, PolicyConfig(), fit_until_ms=cuts)
    assert {t: b.status for t, b in result.baselines.items()} == {
        "early": "fitted",
        "late": "fitted",
    }
    assert result.baselines["late"].history_end_ms == T0 + 1120 * MIN
    assert result.fit_windows == 240
    assert result.replayed_windows == 240
    [incident] = result.incidents
    assert (incident.doc_type, incident.baseline_version) == (
        "late",
        result.baselines["late"].version,
    )
    assert incident.first_breach_ms == T0 + 1200 * MIN


def test_score_counts_each_series_from_its_own_cut() -> None:
    early = series("early", 0, 240)
    late = series("late", 1000, 240, jump_rows=range(200, 206))
    cuts = fit_cuts(early + late, fraction=0.5)
    result = backtest(early + late, PolicyConfig(), fit_until_ms=cuts)
    labels = [
        Label("late", T0 + 1200 * MIN, T0 + 1206 * MIN, "jump"),
        # In "late"'s fit prefix: not scored, though after "early"'s cut.
        Label("late", T0 + 1050 * MIN, T0 + 1056 * MIN, "jump"),
        # After "early"'s last window: not in what was replayed of it.
        Label("early", T0 + 300 * MIN, T0 + 306 * MIN, "jump"),
    ]
    s = score(
        result.changes,
        labels,
        replay_start_ms=cuts,
        replay_end_ms=result.ends,
        doc_types=2,
    )
    assert [(lab.doc_type, lab.start_ms) for lab in s.labels] == [("late", T0 + 1200 * MIN)]
    assert s.recall == 1.0
    # 120 replayed minutes of each type.
    assert math.isclose(s.type_days, 240 / 1440)


def test_repeated_window_starts_keep_the_last_row_in_fit_and_replay() -> None:
    history = series("nda", 0, 240)
    # Every replayed window is given twice: first a breaching row, then the real one.
    doubled = []
    for w in history:
        if w.window_start_ms >= T0 + 120 * MIN:
            doubled.append(w.model_copy(update={"mean_drift": 0.95}))
        doubled.append(w)
    kept, dropped = deduplicate(doubled)
    assert kept == history
    assert dropped == {"nda": 120}
    result = backtest(doubled, PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    assert result.incidents == []
    assert result.replayed_windows == 120
    # In the fit prefix too: one row per start is fitted.
    fit_doubled = [w for w in history for _ in range(2)]
    again = backtest(fit_doubled, PolicyConfig(), fit_until_ms=T0 + 120 * MIN)
    assert again.baselines["nda"].window_count == 120
    assert again.fit_windows == 120


def test_spacing_counts_rows_further_apart_than_their_window() -> None:
    sparse = series("five_min", 0, 50, step_min=5)
    dense = series("dense", 0, 50)
    report = spacing(sparse + dense)
    assert (report["five_min"].rows, report["five_min"].gaps) == (50, 49)
    assert report["five_min"].typical_ms == 5 * MIN
    assert report["dense"].gaps == 0


def test_rows_as_windows_makes_five_minute_samples_consecutive_windows() -> None:
    # Without pooling, only a run of breaching windows opens an incident.
    policy = PolicyConfig(rules=(RuleConfig(name="drift", pooling=False),))
    rows = series("five_min", 0, 160, step_min=5, jump_rows=range(120, 124), jump=0.1)
    cut = T0 + 80 * 5 * MIN
    windows = rows_as_windows(rows)
    assert {w.window_end_ms - w.window_start_ms for w in windows} == {5 * MIN}
    [incident] = backtest(windows, policy, fit_until_ms=cut).incidents
    assert incident.first_breach_ms == T0 + 120 * 5 * MIN
    assert incident.opened_at_ms == T0 + 122 * 5 * MIN  # end of the second breaching sample


def test_every_state_change_is_a_record_with_its_window() -> None:
    result = backtest(
        series("nda", 0, 240, jump_rows=range(200, 206)),
        PolicyConfig(),
        fit_until_ms=T0 + 120 * MIN,
    )
    records = [orjson.loads(orjson.dumps(change_record(c))) for c in result.changes]
    kinds = [r["change"] for r in records]
    assert kinds[0] == "opened"
    assert kinds[-1] == "resolved"
    assert records[0]["window_start_ms"] == records[0]["window"]["window_start_ms"]
    assert records[0]["window_start"].endswith("Z")
    assert records[-1]["incident"]["resolution"] in ("clean", "silent")
    assert records[0]["incident"]["resolved_at_ms"] is None


def test_an_adapted_resolution_is_recorded_with_its_levels() -> None:
    incident = Incident(
        incident_id="i1-x",
        doc_type="medical_report",
        rule="drift",
        severity="warning",
        evidence="window",
        first_breach_ms=T0,
        opened_at_ms=T0 + 2 * MIN,
        resolved_at_ms=T0 + 10 * MIN,
        resolution="adapted",
        peak_mean_drift=0.63,
        peak_window_start_ms=T0,
        last_breach_ms=T0 + 9 * MIN,
        breach_windows=9,
        reopened=0,
        baseline_version="b1-x",
        threshold=0.58,
        adapted_from=0.52,
        adapted_to=0.61,
    )
    record = change_record(IncidentChange("resolved", incident, T0 + 9 * MIN, None, None))
    assert record["change"] == "resolved"
    assert record["window"] is None
    assert record["incident"]["resolution"] == "adapted"
    assert (record["incident"]["adapted_from"], record["incident"]["adapted_to"]) == (0.52, 0.61)
