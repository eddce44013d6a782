"""The breakdown's rules, by known answers: every writer (ingest, the job, the demo's own
computation) is compared with these functions, so they must say what the docs say."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from anchorwatch.contracts.breakdown import (
    anchor_kind,
    kind_figures,
    latency_bucket,
    latency_quantile,
    top_anchors,
)


@dataclass(frozen=True)
class A:
    anchor_id: str
    position: int
    drift_score: float


@pytest.mark.parametrize(
    ("anchor_id", "kind"),
    [
        ("SECTION_003", "SECTION"),
        ("TABLE_1_2", "TABLE"),
        ("TIMELINE", "TIMELINE"),  # no "_": the whole id
        ("section_003", "OTHER"),  # case matters
        ("CLAUSE_001", "OTHER"),
        ("SECTIONS_001", "OTHER"),
        ("_SECTION", "OTHER"),
    ],
)
def test_the_kind_is_the_ids_text_before_the_first_underscore(anchor_id: str, kind: str) -> None:
    assert anchor_kind(anchor_id) == kind


def test_kind_figures_come_in_kinds_order_with_the_mean_and_max_of_each() -> None:
    anchors = [A("TABLE_1", 0, 0.2), A("SECTION_1", 5, 0.5), A("x", 9, 0.9), A("TABLE_2", 3, 0.6)]
    assert kind_figures(anchors) == {
        "SECTION": (1, 0.5, 0.5),
        "TABLE": (2, (0.2 + 0.6) / 2, 0.6),
        "OTHER": (1, 0.9, 0.9),
    }
    assert list(kind_figures(anchors)) == ["SECTION", "TABLE", "OTHER"]
    assert kind_figures([]) == {}


def test_top_anchors_rank_by_drift_then_position_then_id() -> None:
    anchors = [A("B_1", 7, 0.8), A("A_1", 7, 0.8), A("C_1", 2, 0.8), A("D_1", 0, 0.9)]
    assert [a.anchor_id for a in top_anchors(anchors, 3)] == ["D_1", "C_1", "A_1"]


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [(0, 0), (127, 127), (128, 128), (129, 128), (255, 254), (256, 256), (257, 256),
     (1000, 1000), (1001, 1000), (1003, 1000), (1007, 1000), (1008, 1008), (3_600_000, 3_571_712)],
)  # fmt: skip
def test_a_latency_bucket_keeps_seven_significant_bits(ms: int, bucket: int) -> None:
    assert latency_bucket(ms) == bucket
    assert bucket <= ms
    assert (ms - bucket) / max(ms, 1) < 0.01


def test_latency_quantiles_are_nearest_rank_over_buckets() -> None:
    values = list(range(1, 101))  # exact below 128
    assert latency_quantile(values, 0.5) == 50
    assert latency_quantile(values, 0.95) == 95
    assert latency_quantile([300], 0.5) == 300
    assert latency_quantile([1001, 1002, 5], 0.95) == 1000
    assert latency_quantile([], 0.5) is None
