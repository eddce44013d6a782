"""A step up from a level that held (quantised, flat types): the wander of such a level
sets the fitted threshold, so a jump from the bottom of it is judged against the level it
left, not against the threshold alone."""

from __future__ import annotations

from typing import Any

from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.evidence import STEP_UP
from anchorwatch.policy.incident_types import IncidentChange
from anchorwatch.policy.incidents import IncidentTracker

T0 = 1_764_403_200_000
MIN = 60_000


def baseline(**kw: Any) -> Baseline:
    # center 0.18, margin 0.09: the threshold sits above the level's whole wander.
    fields: dict[str, Any] = {
        "doc_type": "flat",
        "version": "b-flat",
        "status": "fitted",
        "fitted_at_ms": T0,
        "history_start_ms": T0 - 86_400_000,
        "history_end_ms": T0,
        "window_count": 1440,
        "center": 0.18,
        "spread": 0.0225,
        "p95": 0.21,
        "p99": 0.22,
        "typical_request_count": 100.0,
        "threshold": 0.27,
        "critical_threshold": 0.38,
        "min_requests": 50,
        "autocorrelation": 0.99,
    }
    return Baseline(**{**fields, **kw})


def replay(means: list[float], sensitivity_margin: float = 0.09) -> list[IncidentChange]:
    b = baseline(threshold=round(0.18 + sensitivity_margin, 4))
    tracker = IncidentTracker(PolicyConfig(), {"flat": b})
    changes: list[IncidentChange] = []
    for i, mean in enumerate(means):
        changes += tracker.observe(
            WindowAggregate(
                doc_type="flat",
                window_start_ms=T0 + i * MIN,
                window_end_ms=T0 + (i + 1) * MIN,
                request_count=100,
                mean_drift=mean,
            )
        )
    return changes


def opened(changes: list[IncidentChange]) -> list[int]:
    return [(c.window_start_ms - T0) // MIN for c in changes if c.kind == "opened"]


def test_a_jump_from_a_held_level_opens_below_the_threshold() -> None:
    held = [0.14] * 30
    changes = replay(held + [0.25] * 20 + [0.14] * 30)
    assert opened(changes) == [31]  # two windows: the run rule as for any breach
    reasons = [r.code for r in changes[0].judgement.reasons] if changes[0].judgement else []
    assert STEP_UP in reasons
    assert [c.kind for c in changes] == ["opened", "resolved"]


def test_the_same_level_without_a_hold_before_it_is_judged_by_the_threshold() -> None:
    # Windows that never repeat a mean exactly (noise) never hold: no step is measured.
    wandering = [0.14 + 0.0001 * (i % 7) for i in range(30)]
    assert opened(replay(wandering + [0.25] * 20 + [0.14] * 30)) == []


def test_small_steps_and_single_windows_do_not_open() -> None:
    held = [0.14] * 30
    # Walk moves of one or two grid steps, a three-step spike, a step below the margin.
    assert opened(replay(held + [0.15] * 30 + [0.17] * 30 + [0.20] + [0.17] * 30)) == []
    assert opened(replay(held + [0.22] * 20)) == []  # 0.08 up: within the margin
    # A step of more than the margin that lands below the recovery level (center + half
    # the margin) is no rise above the type's normal.
    assert opened(replay([0.05] * 30 + [0.20] * 20)) == []
    assert opened(replay(held + [0.30] + [0.14] * 30)) == []  # one window: no run


def test_a_higher_sensitivity_never_steps_where_a_lower_one_does_not() -> None:
    series = [0.14] * 30 + [0.25] * 20 + [0.14] * 30
    assert opened(replay(series, 0.09)) == [31]
    assert opened(replay(series, 0.12)) == []  # a wider margin: 0.11 up is not enough


def test_the_step_state_survives_a_restart() -> None:
    b = baseline()
    policy = PolicyConfig()
    first = IncidentTracker(policy, {"flat": b})

    def w(i: int, mean: float) -> WindowAggregate:
        return WindowAggregate(
            doc_type="flat",
            window_start_ms=T0 + i * MIN,
            window_end_ms=T0 + (i + 1) * MIN,
            request_count=100,
            mean_drift=mean,
        )

    for i in range(30):
        first.observe(w(i, 0.14))
    first.observe(w(30, 0.25))
    second = IncidentTracker(policy, {"flat": b}, state=first.export_state())
    assert [c.kind for c in second.observe(w(31, 0.25))] == ["opened"]
