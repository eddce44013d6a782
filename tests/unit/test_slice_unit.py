from __future__ import annotations

import pytest

from anchorwatch.contracts import AnchorSnapshot, SnapshotEvent, WindowAggregate
from anchorwatch.settings import TopicSettings
from anchorwatch.slice import ExpectedWindow, compare, expected_windows, run_scoped_topics

T0 = 1_764_403_200_000


def event(t: int, doc: str, *drifts: float) -> SnapshotEvent:
    anchors = [
        AnchorSnapshot(
            anchor_id=f"A{i}",
            position=i,
            l2_norm=1.0,
            cosine_angle=0.9,
            kl_divergence=0.1,
            drift_score=d,
            recommendation="none",
        )
        for i, d in enumerate(drifts)
    ]
    return SnapshotEvent(
        event_id=f"{doc}{t}",
        event_time_ms=t,
        doc_type=doc,
        snapshot_status="active",
        anchor_count=len(anchors),
        anchors=anchors,
    )


def test_expected_windows_average_request_level_drift() -> None:
    events = [
        event(T0 + 1, "a", 0.2, 0.4),
        event(T0 + 59_999, "a", 0.9),
        event(T0 + 60_000, "a", 0.5),
        event(T0 + 5, "b"),
    ]
    got = expected_windows(events, 60_000)
    assert got[("a", T0)].request_count == 2
    assert got[("a", T0)].mean_drift == pytest.approx((0.3 + 0.9) / 2)
    assert got[("a", T0 + 60_000)] == ExpectedWindow(1, 0.5)
    assert got[("b", T0)] == ExpectedWindow(1, 0.0)


def test_compare_finds_missing_unexpected_wrong_and_duplicates() -> None:
    expected = {("a", T0): ExpectedWindow(2, 0.5), ("b", T0): ExpectedWindow(1, 0.1)}

    def w(doc: str, n: int, mean: float, start: int = T0) -> WindowAggregate:
        return WindowAggregate(
            doc_type=doc,
            window_start_ms=start,
            window_end_ms=start + 60_000,
            request_count=n,
            mean_drift=mean,
        )

    assert compare(expected, [w("a", 2, 0.5), w("b", 1, 0.1)]).ok
    result = compare(expected, [w("a", 3, 0.5), w("c", 1, 0.1), w("c", 1, 0.1)])
    assert result.missing == [("b", T0)]
    assert result.unexpected == [("c", T0), ("c", T0)]
    assert [k for k, _, _ in result.wrong] == [("a", T0)]
    assert not result.ok


def test_run_scoped_topics_are_distinct() -> None:
    t = run_scoped_topics(TopicSettings(), "r1")
    assert t.snapshots == "anchorwatch.snapshots.r1"
    assert t.baselines == "anchorwatch.baselines.r1"
