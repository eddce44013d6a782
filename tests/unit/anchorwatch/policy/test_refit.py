"""The refit history: bounded by event time, incidents left out unless they ended adapted,
due by wall time and by new windows."""

from __future__ import annotations

import pytest

from anchorwatch.contracts import Baseline, BaselinePin, WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.refit import RefitHistory, RefitSchedule

T0 = 1_767_600_000_000
MIN = 60_000
HOUR = 60 * MIN


def window(i: int, mean: float = 0.3, doc_type: str = "a", count: int = 50) -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=T0 + i * MIN,
        window_end_ms=T0 + (i + 1) * MIN,
        request_count=count,
        mean_drift=mean,
    )


def history(
    *, interval_ms: int = HOUR, history_ms: int = 24 * HOUR, min_new: int = 5
) -> RefitHistory:
    return RefitHistory(RefitSchedule(interval_ms, history_ms, min_new))


def baseline(doc_type: str, fitted_at_ms: int, history_end_ms: int) -> Baseline:
    return Baseline(
        doc_type=doc_type,
        version="b1-x",
        status="fitted",
        fitted_at_ms=fitted_at_ms,
        history_start_ms=T0,
        history_end_ms=history_end_ms,
        window_count=10,
        center=0.3,
        spread=0.01,
        p95=0.32,
        p99=0.33,
        typical_request_count=50,
        threshold=0.35,
        critical_threshold=0.5,
        min_requests=5,
    )


def starts(ws: list[WindowAggregate]) -> list[int]:
    return [(w.window_start_ms - T0) // MIN for w in ws]


def test_history_is_bounded_by_event_time() -> None:
    h = history(history_ms=10 * MIN)
    for i in range(30):
        h.add(window(i))
    assert starts(h.usable("a")) == list(range(20, 30))
    assert h.window_count() == 10


def test_windows_inside_an_open_incident_are_left_out() -> None:
    h = history()
    for i in range(20):
        h.add(window(i, 0.9 if i >= 12 else 0.3))
    h.incident("a", "i1", first_breach_ms=T0 + 12 * MIN, resolved_at_ms=None, resolution=None)
    for i in range(20, 25):
        h.add(window(i, 0.9))
    assert starts(h.usable("a")) == list(range(12))


def test_a_resolved_incident_stays_out_and_later_windows_count_again() -> None:
    h = history()
    for i in range(20):
        h.add(window(i))
    h.incident("a", "i1", first_breach_ms=T0 + 5 * MIN, resolved_at_ms=None, resolution=None)
    h.incident(
        "a", "i1", first_breach_ms=T0 + 5 * MIN, resolved_at_ms=T0 + 9 * MIN, resolution="clean"
    )
    assert starts(h.usable("a")) == [0, 1, 2, 3, 4, *range(9, 20)]


def test_an_adapted_incident_makes_the_shift_the_new_history() -> None:
    h = history()
    for i in range(30):
        h.add(window(i, 0.6 if i >= 10 else 0.3))
    h.incident("a", "i1", first_breach_ms=T0 + 10 * MIN, resolved_at_ms=None, resolution=None)
    h.incident(
        "a", "i1", first_breach_ms=T0 + 10 * MIN, resolved_at_ms=T0 + 30 * MIN, resolution="adapted"
    )
    h.add(window(30, 0.6))
    assert starts(h.usable("a")) == list(range(10, 31))
    assert {w.mean_drift for w in h.usable("a")} == {0.6}
    # A late window from before the shift does not come back.
    h.add(window(3, 0.3))
    assert starts(h.usable("a"))[0] == 10


def test_incidents_of_one_type_do_not_touch_another() -> None:
    h = history()
    for i in range(10):
        h.add(window(i, doc_type="a"))
        h.add(window(i, doc_type="b"))
    h.incident("a", "i1", first_breach_ms=T0, resolved_at_ms=None, resolution=None)
    assert h.usable("a") == []
    assert len(h.usable("b")) == 10


def test_due_waits_for_new_windows_and_the_interval() -> None:
    h = history(interval_ms=HOUR, min_new=5)
    for i in range(4):
        h.add(window(i))
    assert h.due(T0, lambda _t: None) == []  # 4 < 5 windows
    h.add(window(4))
    (due,) = h.due(T0, lambda _t: None)
    assert (due.doc_type, len(due.windows), due.history_start_ms, due.history_end_ms) == (
        "a",
        5,
        T0,
        T0 + 5 * MIN,
    )
    h.fitted("a", fitted_at_ms=T0, history_end_ms=T0 + 5 * MIN)
    for i in range(5, 12):
        h.add(window(i))
    assert h.due(T0 + HOUR - 1, lambda _t: None) == []  # too soon
    assert [d.doc_type for d in h.due(T0 + HOUR, lambda _t: None)] == ["a"]


def test_due_counts_only_windows_after_the_held_baselines_history() -> None:
    h = history(interval_ms=HOUR, min_new=5)
    for i in range(12):
        h.add(window(i))
    held = baseline("a", fitted_at_ms=T0 - 2 * HOUR, history_end_ms=T0 + 8 * MIN)
    assert h.due(T0, lambda _t: held) == []  # only 4 windows end after minute 8
    h.add(window(12))
    assert [d.doc_type for d in h.due(T0, lambda _t: held)] == ["a"]
    recent = baseline("a", fitted_at_ms=T0 - 10 * MIN, history_end_ms=T0)
    assert h.due(T0, lambda _t: recent) == []  # fitted 10 minutes ago


def test_a_repeated_window_start_keeps_the_last() -> None:
    h = history()
    h.add(window(0, 0.3))
    h.add(window(0, 0.4))
    assert [w.mean_drift for w in h.usable("a")] == [0.4]


def test_fit_input_fits_like_the_offline_fit() -> None:
    h = history(min_new=3)
    ws = [window(i, 0.3 + (i % 7) / 100) for i in range(80)]
    for w in ws:
        h.add(w)
    (due,) = h.due(T0 + 80 * MIN, lambda _t: None)
    policy = PolicyConfig()
    live = fit_baseline(
        "a",
        due.windows,
        policy,
        fitted_at_ms=T0,
        history_start_ms=due.history_start_ms,
        history_end_ms=due.history_end_ms,
    )
    offline = fit_baseline(
        "a", ws, policy, fitted_at_ms=T0, history_start_ms=T0, history_end_ms=T0 + 80 * MIN
    )
    assert live.baseline == offline.baseline


def test_schedule_is_validated() -> None:
    with pytest.raises(ValueError, match="min_new_windows"):
        RefitSchedule(HOUR, HOUR, 0)


def test_a_pinned_type_comes_out_marked_without_windows_and_beyond_the_limit() -> None:
    h = history(min_new=5)
    for doc_type in ("a", "b", "c"):
        for i in range(10):
            h.add(window(i, doc_type=doc_type))
    pinned = baseline("a", T0 - 2 * HOUR, T0).model_copy(update={"pin": BaselinePin(threshold=0.6)})
    held = {"a": pinned}
    due = h.due(T0 + HOUR, held.get, limit=1)  # longest unfitted first: b, c, then a
    assert [(d.doc_type, d.pinned, len(d.windows)) for d in due] == [
        ("b", False, 10),
        ("a", True, 0),
    ]
    # The caller decides what is pinned (settings pins too); marked handled, not due again.
    due = h.due(T0 + HOUR, held.get, pinned=lambda t: t in ("a", "c"))
    assert [(d.doc_type, d.pinned) for d in due] == [("b", False), ("c", True), ("a", True)]
    h.fitted("a", fitted_at_ms=T0 + HOUR, history_end_ms=due[2].history_end_ms)
    assert "a" not in [d.doc_type for d in h.due(T0 + HOUR + MIN, held.get)]


def test_the_backlog_counts_fitted_types_past_their_interval_with_windows_since() -> None:
    h = history(interval_ms=HOUR)
    for doc_type in ("fresh", "late", "quiet", "never"):
        for i in range(10):
            h.add(window(i, doc_type=doc_type))
    now = T0 + 3 * HOUR
    h.fitted("fresh", fitted_at_ms=now - 10 * MIN, history_end_ms=T0 + 5 * MIN)
    # Fitted by its baseline (another instance's or a restart's fit) 2 h ago, windows since.
    held = {"late": baseline("late", fitted_at_ms=T0 + 5 * MIN, history_end_ms=T0 + 5 * MIN)}
    # Past its interval, but no window ended after its fit: nothing to refit on.
    h.fitted("quiet", fitted_at_ms=T0 + 20 * MIN, history_end_ms=T0 + 10 * MIN)
    assert h.backlog(now, held.get) == (1, now - (T0 + 5 * MIN), 1)
    h.fitted("late", fitted_at_ms=now, history_end_ms=T0 + 10 * MIN)
    assert h.backlog(now, held.get) == (0, 0, 1)
