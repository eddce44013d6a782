"""The independent computation of the drift job's windows (every figure and the
breakdown) and the comparison with the job's."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from anchorwatch.contracts import AnchorSnapshot, SnapshotEvent, WindowAggregate
from anchorwatch.contracts.models import ModelFigures
from anchorwatch.demo.slice import (
    BREAKDOWN_FIELDS,
    anchor_holders,
    compare,
    percentile,
    reference_windows,
    run_scoped_topics,
)
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


def _request(
    t: int, doc: str, anchors: list[tuple[str, int, float]], *, model: str | None = None,
    latency: int | None = None, event_id: str | None = None,
) -> SnapshotEvent:  # fmt: skip
    return SnapshotEvent(
        event_id=event_id or f"{doc}-{t - T0}",
        event_time_ms=t,
        doc_type=doc,
        snapshot_status="active",
        anchor_count=len(anchors),
        anchors=[
            AnchorSnapshot(
                anchor_id=a,
                position=p,
                l2_norm=1.0,
                cosine_angle=0.9,
                kl_divergence=0.1,
                drift_score=d,
                recommendation="none",
            )
            for a, p, d in anchors
        ],
        model=model,
        latency_ms=latency,
    )


def test_reference_windows_compute_the_breakdown() -> None:
    events = [
        _request(T0 + 1, "a", [("SECTION_001", 5, 0.2), ("TABLE_001", 90, 0.8)], model="m-1",
                 latency=100),
        _request(T0 + 2, "a", [("SECTION_001", 7, 0.6), ("CLAUSE_001", 40, 0.9),
                               ("SECTION_002", 300, 0.6)], model="m-2", latency=1_003),
        _request(T0 + 3, "a", [("ENTITY_001", 1, 0.1)], latency=None),
        _request(T0 + 4, "a", [("LIST_001", 2, 0.4)], model="m-2", latency=129),
    ]  # fmt: skip
    (w,) = reference_windows(events, 60_000).values()
    assert w.kinds is not None
    assert list(w.kinds) == ["SECTION", "ENTITY", "TABLE", "LIST", "OTHER"]
    section = w.kinds["SECTION"]
    # Per event (0.2) and (0.6, 0.6), summed as count * mean.
    assert (section.anchor_count, section.max_drift) == (3, 0.6)
    assert section.mean_drift == pytest.approx((0.2 + 2 * 0.6) / 3)
    assert w.kinds["OTHER"].anchor_count == 1  # CLAUSE is no kind the breakdown knows
    assert w.top_anchors is not None
    assert [(a.anchor_id, a.drift_score, a.event_id) for a in w.top_anchors] == [
        ("CLAUSE_001", 0.9, "a-2"),
        ("TABLE_001", 0.8, "a-1"),
        ("SECTION_001", 0.6, "a-2"),  # tied at 0.6: the lower position first
        ("SECTION_002", 0.6, "a-2"),  # its request kept all three of its anchors
        ("LIST_001", 0.4, "a-4"),
    ]
    assert w.models is not None
    assert [(m.model, m.request_count) for m in w.models] == [("m-2", 2), ("m-1", 1), (None, 1)]
    assert w.models[0].mean_drift == pytest.approx((0.7 + 0.4) / 2)
    assert w.other_models is None
    # Latencies 100, 129 (bucket 128), 1003 (bucket 1000): nearest rank over the buckets.
    assert (w.latency_count, w.latency_p50_ms, w.latency_p95_ms) == (3, 128, 1000)


def test_models_past_the_top_five_and_the_tracked_are_summed() -> None:
    events = [
        _request(T0 + i, "a", [("SECTION_001", 1, 0.5)], model=f"m-{i:02d}") for i in range(40)
    ] + [_request(T0 + 100 + i, "a", [("SECTION_001", 1, 0.1)], model="m-39") for i in range(3)]
    (w,) = reference_windows(events, 60_000).values()
    assert w.models is not None
    assert w.other_models is not None
    # m-39 came after 32 others: not tracked, so not listed for its 4 requests.
    assert [m.model for m in w.models] == ["m-00", "m-01", "m-02", "m-03", "m-04"]
    assert w.other_models.request_count == 43 - 5
    # 27 tracked models not listed, and one per request of the 8 untracked (11 requests).
    assert w.other_models.model_count == 27 + 11
    assert w.other_models.mean_drift == pytest.approx((35 * 0.5 + 3 * 0.1) / 38)
    assert w.latency_count == 0
    assert w.latency_p50_ms is None


def _window(doc: str, **breakdown: Any) -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc, window_start_ms=T0, window_end_ms=T0 + 60_000, request_count=1,
        mean_drift=0.5, **breakdown,
    )  # fmt: skip


def test_a_window_without_a_breakdown_is_compared_without_it_and_counted() -> None:
    events = [_request(T0 + 1, "a", [("SECTION_001", 5, 0.5)], model="m-1", latency=10)]
    expected = reference_windows(events, 60_000)
    (full,) = expected.values()
    old = full.model_copy(update={n: None for n in BREAKDOWN_FIELDS})
    result = compare(expected, [old])
    assert result.ok
    assert result.without_breakdown == [("a", T0)]
    assert compare(expected, [full]).without_breakdown == []
    # A breakdown that is there is compared, field by field.
    wrong = full.model_copy(update={"latency_p95_ms": 11})
    assert compare(expected, [wrong]).wrong == [(("a", T0), "latency_p95_ms: expected 10, got 11")]
    off = full.model_copy(update={"models": [ModelFigures(model="m-1", request_count=1,
                                                          mean_drift=0.5 + 1e-12)]})  # fmt: skip
    assert compare(expected, [off]).ok  # sums in another order


def test_a_breakdown_on_some_windows_only_is_wrong() -> None:
    events = [
        _request(T0 + 1, "a", [("SECTION_001", 5, 0.5)]),
        _request(T0 + 2, "b", [("SECTION_001", 5, 0.5)]),
    ]
    expected = reference_windows(events, 60_000)
    a, b = expected[("a", T0)], expected[("b", T0)]
    result = compare(expected, [a, b.model_copy(update={n: None for n in BREAKDOWN_FIELDS})])
    assert result.breakdown_partial
    assert not result.ok


def test_a_top_anchor_tied_between_requests_may_name_any_of_them() -> None:
    tied = [("SECTION_001", 5, 0.9)]
    events = [_request(T0 + 1, "a", tied), _request(T0 + 2, "a", tied)]
    expected = reference_windows(events, 60_000)
    (w,) = expected.values()
    assert w.top_anchors is not None
    assert [a.event_id for a in w.top_anchors] == ["a-1", "a-2"]
    renamed = w.model_copy(
        update={"top_anchors": [a.model_copy(update={"event_id": "a-2"})
                                for a in w.top_anchors]}
    )  # fmt: skip
    # Without the holders, the request the reference named; with them, any holder.
    assert not compare(expected, [renamed]).ok
    holders = anchor_holders(events, 60_000)
    assert holders[("a", T0)][("SECTION_001", 5, 0.9)] == {"a-1", "a-2"}
    assert compare(expected, [renamed], holders).ok
    stranger = w.model_copy(
        update={"top_anchors": [a.model_copy(update={"event_id": "nobody"}) for a in w.top_anchors]}
    )
    (problem,) = compare(expected, [stranger], holders).wrong
    assert "named in request 'nobody'" in problem[1]
