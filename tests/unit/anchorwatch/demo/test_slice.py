from __future__ import annotations

from typing import Literal

import pytest

from anchorwatch.contracts import AnchorSnapshot, SnapshotEvent, WindowAggregate
from anchorwatch.demo.slice import compare, percentile, reference_windows, run_scoped_topics
from anchorwatch.settings import TopicSettings

T0 = 1_764_403_200_000


def event(
    t: int, doc: str, *drifts: float, status: Literal["active", "disabled"] = "active"
) -> SnapshotEvent:
    anchors = [
        AnchorSnapshot(anchor_id=f"A{i}", position=i, l2_norm=1.0, cosine_angle=0.9,
                       kl_divergence=0.1 * (i + 1), drift_score=d,
                       recommendation="re-sample" if d > 0.8 else "none")
        for i, d in enumerate(drifts)
    ]  # fmt: skip
    return SnapshotEvent(
        event_id=f"{doc}{t}",
        event_time_ms=t,
        doc_type=doc,
        snapshot_status=status,
        anchor_count=len(anchors),
        anchors=anchors,
    )


def test_reference_windows_compute_every_figure() -> None:
    events = [event(T0 + 1, "a", 0.2, 0.4), event(T0 + 59_999, "a", 0.9),
              event(T0 + 60_000, "a", 0.5), event(T0 + 5, "b", status="disabled")]  # fmt: skip
    got = reference_windows(events, 60_000)
    a0 = got[("a", T0)]
    assert a0.request_count == 2
    assert a0.mean_drift == pytest.approx((0.3 + 0.9) / 2)
    assert a0.max_drift == 0.9
    assert a0.stddev_drift == pytest.approx(0.3)
    assert a0.p95_drift == pytest.approx(0.3 + 0.95 * 0.6)
    assert a0.anchor_count == 3
    assert a0.resample_share == pytest.approx(1 / 3)
    assert a0.mean_kl_divergence == pytest.approx((0.2 + 0.1) / 2)
    assert got[("a", T0 + 60_000)].request_count == 1
    b0 = got[("b", T0)]
    assert (b0.mean_drift, b0.disabled_share, b0.zero_anchor_share) == (0.0, 1.0, 1.0)
    assert b0.resample_share is None  # no anchors: a share of nothing


def test_percentile_interpolates_like_flink() -> None:
    assert percentile([0.5, 0.9], 0.95) == pytest.approx(0.88)
    assert percentile([0.1], 0.95) == 0.1


def test_compare_finds_missing_unexpected_wrong_and_duplicates() -> None:
    def w(doc: str, n: int, mean: float, start: int = T0) -> WindowAggregate:
        return WindowAggregate(
            doc_type=doc,
            window_start_ms=start,
            window_end_ms=start + 60_000,
            request_count=n,
            mean_drift=mean,
        )

    expected = {("a", T0): w("a", 2, 0.5), ("b", T0): w("b", 1, 0.1)}
    assert compare(expected, [w("a", 2, 0.5), w("b", 1, 0.1 + 1e-12)]).ok
    result = compare(expected, [w("a", 3, 0.5), w("c", 1, 0.1), w("c", 1, 0.1)])
    assert result.missing == [("b", T0)]
    assert result.unexpected == [("c", T0), ("c", T0)]
    assert result.wrong == [(("a", T0), "request_count: expected 2, got 3")]
    assert not result.ok


def test_run_scoped_topics_are_distinct() -> None:
    t = run_scoped_topics(TopicSettings(), "r1")
    assert t.snapshots == "anchorwatch.snapshots.r1"
    assert t.baselines == "anchorwatch.baselines.r1"
