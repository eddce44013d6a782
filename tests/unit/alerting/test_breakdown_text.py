"""The wording rules of the breakdown (alerting/breakdown_text.py): which anchor kinds moved
against the windows before the incident, whether the drift is concentrated in one model or
spread over all of them, the worst anchors and the latency; a window without a breakdown
says nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from anchorwatch.alerting.breakdown_text import (
    MOVED_MIN,
    NAME_MAX,
    kind_shifts,
    latency_phrase,
    model_groups,
    model_pattern,
    model_phrase,
    moved_margin,
    where_phrase,
    window_latency,
    with_history,
    worst_anchors,
)
from anchorwatch.alerting.render import IncidentView, WindowPoint, pack_kind_means
from anchorwatch.contracts import WindowAggregate
from anchorwatch.contracts.models import KindFigures, ModelFigures, OtherModels, TopAnchor
from tests.support.rendering import view

T0 = 1_767_621_600_000  # the window of tests.support.rendering.view, opened at its end
MINUTE = 60_000


def kinds(**means: float) -> dict[str, KindFigures]:
    return {
        k: KindFigures(anchor_count=10, mean_drift=m, max_drift=min(1.0, m + 0.05))
        for k, m in means.items()
    }


def window(**breakdown: Any) -> WindowAggregate:
    base = view().window
    return base.model_copy(update=breakdown)


def point(minute: int, mean: float, **kind_means: float) -> WindowPoint:
    """A window ``minute`` minutes after T0 (negative: before the incident)."""
    start = T0 + minute * MINUTE
    packed = pack_kind_means(kind_means) if kind_means else b""
    return WindowPoint(start, start + MINUTE, mean, 0.85, 100, kind_drift=packed)


def incident(history: list[WindowPoint], **breakdown: Any) -> IncidentView:
    return with_history(view(window=window(**breakdown)), history)


def models(*figures: tuple[str | None, int, float]) -> list[ModelFigures]:
    return [ModelFigures(model=m, request_count=n, mean_drift=d) for m, n, d in figures]


def plain(text: str) -> str:
    return f"[{text}]"


# --------------------------------------------------------------------------- where


def test_the_issue_example_section_moved_table_steady() -> None:
    # The type sat just under its threshold (0.84 vs 0.85): the margin is the floor, 0.05.
    history = [point(-i, 0.84, SECTION=0.85, TABLE=0.80) for i in range(1, 6)]
    v = incident(history, kinds=kinds(SECTION=0.92, TABLE=0.82))
    assert moved_margin(v) == MOVED_MIN
    assert where_phrase(v) == "SECTION anchors 0.92 against 0.85; TABLE steady"


def test_a_kind_moves_only_when_it_rose_by_more_than_the_types_margin() -> None:
    # Before: the type at 0.60 against a threshold of 0.85, so a kind must rise by 0.25.
    history = [point(-i, 0.60, SECTION=0.55, TABLE=0.62, LIST=0.60) for i in range(1, 11)]
    v = incident(history, kinds=kinds(SECTION=0.92, TABLE=0.86, LIST=0.61))
    assert moved_margin(v) == pytest.approx(0.25)
    shifts = {s.kind: s for s in kind_shifts(v) or []}
    assert shifts["SECTION"].moved  # rose 0.37
    assert not shifts["TABLE"].moved  # rose 0.24
    assert where_phrase(v) == "SECTION anchors 0.92 against 0.55; TABLE, LIST steady"


def test_several_kinds_moved_are_named_by_their_rise() -> None:
    history = [point(-1, 0.84, SECTION=0.80, ENTITY=0.70, TABLE=0.82)]
    v = incident(history, kinds=kinds(SECTION=0.90, ENTITY=0.95, TABLE=0.83))
    assert where_phrase(v) == (
        "ENTITY anchors 0.95 against 0.70, SECTION anchors 0.90 against 0.80; TABLE steady"
    )


def test_no_kind_moved_on_its_own_names_the_one_that_rose_most() -> None:
    history = [point(-1, 0.60, SECTION=0.55, TABLE=0.62)]
    v = incident(history, kinds=kinds(SECTION=0.72, TABLE=0.70))
    assert where_phrase(v) == (
        "no anchor kind rose by more than 0.25 on its own (most: SECTION anchors 0.72 against 0.55)"
    )


def test_a_kind_no_earlier_window_had_is_shown_without_comparison() -> None:
    history = [point(-1, 0.84, SECTION=0.84)]
    v = incident(history, kinds=kinds(SECTION=0.95, LIST=0.91))
    assert where_phrase(v) == "SECTION anchors 0.95 against 0.84; LIST anchors 0.91 (none before)"


def test_without_earlier_windows_the_kinds_are_shown_as_they_are() -> None:
    v = incident([], kinds=kinds(TABLE=0.40, SECTION=0.92))
    assert where_phrase(v) == (
        "SECTION anchors 0.92, TABLE anchors 0.40 (no earlier windows to compare with)"
    )


def test_before_means_the_windows_that_ended_before_the_opening_window() -> None:
    """The opening window (ending at opened_at_ms) and later ones are not "before"; windows
    without a breakdown count for the type's mean but not for the kinds'."""
    history = [
        point(-3, 0.50),  # an older job: no kinds
        point(-2, 0.60, SECTION=0.40),
        point(-1, 0.70, SECTION=0.60, TABLE=0.30),
        point(0, 0.95, SECTION=0.99, TABLE=0.99),  # the incident's own window
        point(1, 0.95, SECTION=0.99),
    ]
    v = incident(history, kinds=kinds(SECTION=0.9))
    assert dict(v.kinds_before or {}) == pytest.approx({"SECTION": 0.5, "TABLE": 0.3})
    assert v.drift_before == pytest.approx(0.6)


def test_before_ends_where_the_run_that_opened_it_began() -> None:
    """Opened after two breaching windows: the first of them is not "before" either."""
    history = [
        point(-3, 0.50, SECTION=0.50),
        point(-2, 0.60, SECTION=0.60),
        point(-1, 0.90, SECTION=0.95),  # the first breach of the run
        point(0, 0.92, SECTION=0.96),  # the window that opened it
    ]
    v = with_history(
        view(window=window(kinds=kinds(SECTION=0.96)), first_breach_ms=T0 - MINUTE), history
    )
    assert dict(v.kinds_before or {}) == pytest.approx({"SECTION": 0.55})
    assert v.drift_before == pytest.approx(0.55)
    assert where_phrase(v) == "SECTION anchors 0.96 against 0.55"


def test_kinds_outside_the_fixed_set_are_never_shown() -> None:
    # Not validated (model_construct): the wording reads only the known kinds.
    w = WindowAggregate.model_construct(
        **{**window().__dict__, "kinds": {"<!here>": kinds(SECTION=0.9)["SECTION"]}}
    )
    assert where_phrase(view(window=w)) is None


# --------------------------------------------------------------------------- which model


def test_the_issue_example_is_concentrated_in_the_new_version() -> None:
    w = window(models=models(("claude-x-1", 72, 0.71), ("claude-x-2", 48, 0.93)))
    assert model_phrase(w, 0.85, plain) == (
        "[claude-x-2] 0.93 over 40% of requests; [claude-x-1] 0.71 over 60%: concentrated in "
        "[claude-x-2], a rollout problem: consider rolling back"
    )


def test_drift_in_every_model_is_spread() -> None:
    w = window(
        models=models(("m-1", 50, 0.90), ("m-2", 30, 0.93)),
        other_models=OtherModels(model_count=3, request_count=20, mean_drift=0.88),
    )
    assert model_phrase(w, 0.85, plain) == (
        "[m-2] 0.93 over 30% of requests; [m-1] 0.90 over 50%; 3 other models 0.88 over 20%: "
        "spread over every model: look upstream of the model, e.g. the input"
    )


@pytest.mark.parametrize(
    ("figures", "other", "pattern"),
    [
        ([("a", 10, 0.95)], None, "single"),
        ([("a", 10, 0.95), ("b", 90, 0.80)], None, "concentrated"),
        ([("a", 10, 0.95), ("b", 90, 0.86)], None, "spread"),
        ([("a", 10, 0.80), ("b", 90, 0.84)], None, "none"),
        ([("a", 10, 0.95), ("b", 10, 0.95), ("c", 80, 0.50)], None, "partial"),
        # One model above, the others together too (one of them barely under): not one model.
        ([("a", 50, 0.99), ("b", 10, 0.84)], (2, 40, 0.86), "partial"),
        # The only drifting group is the unlisted models: concentrated there.
        ([("a", 50, 0.60)], (4, 50, 0.95), "concentrated"),
        ([(None, 30, 0.95), ("b", 70, 0.60)], None, "concentrated"),
    ],
)
def test_model_patterns(
    figures: list[tuple[str | None, int, float]],
    other: tuple[int, int, float] | None,
    pattern: str,
) -> None:
    w = window(
        models=models(*figures),
        other_models=OtherModels(model_count=other[0], request_count=other[1], mean_drift=other[2])
        if other
        else None,
    )
    groups = model_groups(w)
    assert groups is not None
    assert model_pattern(groups, 0.85) == pattern


def test_partial_says_which_models_and_which_not() -> None:
    w = window(models=models(("a", 10, 0.95), ("b", 10, 0.92), ("c", 80, 0.50)))
    assert model_phrase(w, 0.85, plain) == (
        "[a] 0.95 over 10% of requests; [b] 0.92 over 10%; [c] 0.50 over 80%: in [a], [b], "
        "not in [c]: compare those versions with the others"
    )


def test_unknown_model_one_model_and_tiny_shares() -> None:
    w = window(models=models((None, 999, 0.91), ("rare", 1, 0.2)))
    assert model_phrase(w, 0.85, plain) == (
        "unknown model 0.91 over 100% of requests; [rare] 0.20 over <1%: concentrated in "
        "unknown model, a rollout problem: consider rolling back"
    )
    single = window(models=models(("only-1", 40, 0.9)))
    assert model_phrase(single, 0.85, plain) == (
        "[only-1] 0.90 over 100% of requests: one model answered every request: it cannot "
        "tell a rollout from the input"
    )
    one_other = window(
        models=models(("a", 5, 0.6)),
        other_models=OtherModels(model_count=1, request_count=5, mean_drift=0.9),
    )
    assert "1 other model 0.90 over 50%" in (model_phrase(one_other, 0.85, plain) or "")


def test_hostile_names_are_cut_then_shown_through_the_escaper() -> None:
    # Not validated (model_construct): the wording holds up even for what the contract
    # would refuse (longer than its bounds).
    long = "m" * 10_000
    w = window(
        models=[
            ModelFigures.model_construct(model=long, request_count=60, mean_drift=0.95),
            ModelFigures.model_construct(model="<!channel>", request_count=40, mean_drift=0.5),
        ],
        top_anchors=[
            TopAnchor.model_construct(
                anchor_id="T" * 10_000, position=7, drift_score=0.9, event_id="e" * 300
            )
        ],
    )
    seen: list[str] = []

    def show(text: str) -> str:
        seen.append(text)
        return "X"

    assert model_phrase(w, 0.85, show) is not None
    assert worst_anchors(w, show)
    assert seen
    assert all(len(t) <= NAME_MAX for t in seen)
    assert "<!channel>" in seen  # short names pass whole, for the escaper to make safe


# --------------------------------------------------------------------------- worst, latency


def test_worst_anchors_with_position_and_request() -> None:
    w = window(
        top_anchors=[
            TopAnchor(anchor_id="TABLE_003", position=1_204, drift_score=0.97, event_id="ev-9"),
            TopAnchor(anchor_id="SECTION_001", position=3, drift_score=0.9),
        ]
    )
    assert worst_anchors(w, plain) == [
        "[TABLE_003] at position 1,204: 0.97 (request [ev-9])",
        "[SECTION_001] at position 3: 0.90",
    ]
    assert len(worst_anchors(w, plain, limit=1)) == 1


def test_latency_phrases() -> None:
    assert latency_phrase(420, 1_840) == "p95 latency 1,840 ms (p50 420 ms)"
    assert latency_phrase(None, 1_840) == "p95 latency 1,840 ms"
    assert latency_phrase(420, None) == "p50 latency 420 ms"
    assert latency_phrase(None, None) is None
    w = window(latency_count=10, latency_p50_ms=420, latency_p95_ms=12_000)
    assert window_latency(w) == "p95 latency 12,000 ms (p50 420 ms)"
    assert window_latency(w, short=True) == "p95 latency 12,000 ms"


# --------------------------------------------------------------------------- older windows


def test_a_window_without_a_breakdown_says_nothing() -> None:
    history = [point(-1, 0.6, SECTION=0.5)]
    v = view()
    assert with_history(v, history) is v
    assert where_phrase(v) is None
    assert model_phrase(v.window, v.threshold, plain) is None
    assert worst_anchors(v.window, plain) == []
    assert window_latency(v.window) is None
    # Figures computed but empty (no anchors, no models): nothing either.
    empty = replace(v, window=window(kinds={}, models=[], top_anchors=[]))
    assert with_history(empty, history) is empty
    assert where_phrase(empty) is None
    assert model_phrase(empty.window, 0.85, plain) is None


def test_only_a_drift_incident_is_compared() -> None:
    group = replace(view(window=window(kinds=kinds(SECTION=0.9))), kind="group")
    assert with_history(group, [point(-1, 0.5, SECTION=0.5)]) is group
