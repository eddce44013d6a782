"""What the engine stores of each type's recent windows is always its points' rows
(``history_to_json``): with and without a breakdown, after a restart, and past the
history's length."""

from __future__ import annotations

import time
from pathlib import Path

from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.payload import history_to_json
from anchorwatch.contracts import Verdict, WindowAggregate
from anchorwatch.contracts.models import KindFigures
from anchorwatch.policy.window import judge_window, verdict_for
from tests.support.alerting import MINUTE, T0
from tests.support.alerting_harness import Harness, settings_for


def _verdict(doc_type: str, minute: int, breakdown: bool) -> Verdict:
    start = T0 + minute * MINUTE
    extra = (
        {
            "kinds": {
                "SECTION": KindFigures(anchor_count=4, mean_drift=0.123456789, max_drift=0.9),
                "TABLE": KindFigures(anchor_count=2, mean_drift=0.2, max_drift=0.3),
            },
            "latency_count": 10,
            "latency_p50_ms": 120,
            "latency_p95_ms": 900,
        }
        if breakdown
        else {}
    )
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=20 + minute,
        mean_drift=0.3 + minute / 1000,
        **extra,  # type: ignore[arg-type]
    )
    return verdict_for(window, judge_window(window, None), "j1")


def _check(h: Harness) -> None:
    stored = h.store.restore().doc_types
    assert stored
    for doc_type, row in stored.items():
        points = h.engine._types[doc_type].history
        assert row.history == history_to_json(points)


def test_the_stored_history_is_always_the_rows_of_the_points(tmp_path: Path) -> None:
    h = Harness(settings_for(tmp_path, None, None), ManualClock(start=time.time()))
    types = ["plain", "broken-down", "mixed"]
    length = h.engine._history_len
    for minute in range(length + 8):  # longer than the history kept
        h.publish(
            [
                _verdict("plain", minute, False),
                _verdict("broken-down", minute, True),
                _verdict("mixed", minute, minute % 3 == 0),
            ]
        )
        h.consume(batch_max=2)
        _check(h)
        if minute in (5, length + 2):
            h.restart()
            _check(h)
    assert set(h.store.restore().doc_types) == set(types)
