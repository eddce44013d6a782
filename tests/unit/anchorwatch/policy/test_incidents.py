"""The incident state machine: open, update, resolve, re-open; hysteresis; sparse types
through pooled evidence; the source's sustained rule in the same configuration; replays."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from anchorwatch.contracts import Baseline, Verdict, WindowAggregate, verdict_id
from anchorwatch.policy.config import PolicyConfig, RuleConfig, StaticRuleConfig
from anchorwatch.policy.incident_types import (
    IncidentChange,
    drift_event,
    final_incidents,
    incident_id,
)
from anchorwatch.policy.incidents import IncidentTracker
from tests.support.policy import baseline

T0 = 1_764_403_200_000
MIN = 60_000
CLEAN, WARN, CRIT = 0.30, 0.37, 0.50


def win(minute: int, mean: float, n: int = 40, doc_type: str = "nda") -> WindowAggregate:
    return WindowAggregate(
        doc_type=doc_type,
        window_start_ms=T0 + minute * MIN,
        window_end_ms=T0 + (minute + 1) * MIN,
        request_count=n,
        mean_drift=mean,
    )


def feed(
    tracker: IncidentTracker, means: Sequence[float | None], start: int = 0
) -> list[IncidentChange]:
    """One window per minute; None leaves the minute without a window."""
    changes: list[IncidentChange] = []
    for i, mean in enumerate(means):
        if mean is not None:
            changes += tracker.observe(win(start + i, mean))
    return changes


def tracker(**rule: Any) -> IncidentTracker:
    """The window-level machine alone; pooling has tests of its own."""
    rule.setdefault("pooling", False)
    return IncidentTracker(
        PolicyConfig(rules=(RuleConfig(name="drift", **rule),)), {"nda": baseline()}
    )


def kinds(changes: list[IncidentChange]) -> list[tuple[str, int]]:
    return [(c.kind, (c.window_start_ms - T0) // MIN) for c in changes]


def test_opens_after_the_configured_breaching_windows_not_before() -> None:
    t = tracker(open_after=3)
    assert feed(t, [CLEAN, WARN, WARN]) == []
    changes = feed(t, [WARN], start=3)
    assert kinds(changes) == [("opened", 3)]
    inc = changes[0].incident
    assert inc.first_breach_ms == T0 + 1 * MIN
    assert inc.opened_at_ms == T0 + 4 * MIN  # when the opening window closed
    assert inc.severity == "warning"
    assert inc.evidence == "window"
    assert inc.incident_id == incident_id("p1", "drift", "nda", T0 + 3 * MIN)
    assert inc.baseline_version == "b-test"
    assert t.open_incidents() == [inc]


def test_a_clean_window_breaks_the_run() -> None:
    t = tracker(open_after=2)
    assert feed(t, [WARN, CLEAN, WARN, CLEAN, WARN]) == []


def test_critical_opens_at_once_and_warning_escalates() -> None:
    t = tracker(open_after_critical=1)
    assert kinds(feed(t, [CRIT])) == [("opened", 0)]
    assert t.open_incidents()[0].severity == "critical"
    t = tracker(open_after_critical=1)
    changes = feed(t, [WARN, WARN, WARN, CRIT, WARN])
    assert kinds(changes) == [("opened", 1), ("updated", 3)]
    assert changes[1].incident.severity == "critical"
    assert changes[1].incident.incident_id == changes[0].incident.incident_id
    # Severity only goes up while open: no update back to warning.
    assert t.open_incidents()[0].severity == "critical"


def test_by_default_one_critical_window_neither_opens_nor_escalates() -> None:
    """Real series have heavy-tailed one-window spikes: one window, however high, is not
    enough to page, neither to open nor to escalate; two in a row are."""
    t = tracker()
    assert feed(t, [CLEAN, CRIT, CLEAN, CLEAN]) == []
    assert kinds(feed(t, [CRIT, CRIT], start=4)) == [("opened", 5)]
    t = tracker()
    changes = feed(t, [WARN, WARN, CRIT, WARN, CRIT, CRIT])
    assert kinds(changes) == [("opened", 1), ("updated", 5)]


def test_one_window_beyond_anything_the_history_showed_opens_at_once() -> None:
    """The fit's extreme threshold (the history's highest window plus the margin or a
    tail allowance): one window above it opens an incident on its own, as a warning until
    a second critical window confirms it (escalating takes that too). A critical window
    below it does not open, and an open incident does not escalate on one such window."""
    t = IncidentTracker(
        PolicyConfig(rules=(RuleConfig(name="drift", pooling=False),)),
        {"nda": baseline(extreme_threshold=0.60)},
    )
    assert feed(t, [CLEAN, CRIT, CLEAN, CLEAN]) == []  # critical, within the history
    changes = feed(t, [0.65, CLEAN], start=4)
    assert kinds(changes) == [("opened", 4)]
    assert changes[0].incident.severity == "warning"
    assert "beyond_history" in {r.code for r in changes[0].judgement.reasons}  # type: ignore[union-attr]
    t = IncidentTracker(
        PolicyConfig(rules=(RuleConfig(name="drift", pooling=False),)),
        {"nda": baseline(extreme_threshold=0.60)},
    )
    assert kinds(feed(t, [WARN, WARN, 0.65, WARN])) == [("opened", 1)]
    assert t.open_incidents()[0].severity == "warning"
    assert kinds(feed(t, [0.65, CRIT], start=4)) == [("updated", 5)]


def test_resolving_needs_windows_back_near_normal_not_just_under_the_threshold() -> None:
    """Separate trigger and recovery levels: while open, windows between the recovery
    level (center + recovery_share x margin) and the threshold hold the incident; no flapping
    of a type that hovers at its threshold."""
    hovering = 0.34  # under the threshold 0.35, above the recovery level 0.325
    t = tracker(resolve_after=3)
    changes = feed(t, [WARN, WARN] + [hovering, WARN] * 10 + [hovering] * 5)
    assert kinds(changes) == [("opened", 1)]
    changes = feed(t, [CLEAN] * 3, start=27)
    assert kinds(changes) == [("resolved", 29)]
    # Recovery at the threshold itself: the old behaviour, flapping included.
    flappy = tracker(resolve_after=3, recovery_share=1.0, reopen_within=0)
    changes = feed(flappy, [WARN, WARN] + [hovering] * 3 + [WARN, WARN] + [hovering] * 3)
    assert [c.kind for c in changes] == ["opened", "resolved", "opened", "resolved"]


def test_resolves_after_clean_windows_with_hysteresis() -> None:
    t = tracker(resolve_after=3)
    changes = feed(t, [WARN, WARN, CLEAN, CLEAN, WARN, CLEAN, CLEAN, CLEAN, CLEAN])
    assert kinds(changes) == [("opened", 1), ("resolved", 7)]
    inc = changes[-1].incident
    assert inc.resolved_at_ms == T0 + 8 * MIN
    assert inc.resolution == "clean"
    assert inc.breach_windows == 3
    assert inc.peak_mean_drift == WARN
    assert t.open_incidents() == []


def test_a_flapping_type_keeps_one_incident() -> None:
    t = tracker(open_after=2, resolve_after=3)
    flapping = [WARN, WARN] + [CLEAN, WARN] * 30 + [CLEAN] * 3
    changes = feed(t, flapping)
    assert kinds(changes) == [("opened", 1), ("resolved", len(flapping) - 1)]


def test_reopens_the_same_incident_within_the_window_and_opens_a_new_one_after() -> None:
    t = tracker(resolve_after=2, reopen_within=5)
    first = feed(t, [WARN, WARN, CLEAN, CLEAN])
    assert kinds(first) == [("opened", 1), ("resolved", 3)]
    again = feed(t, [CLEAN, WARN, WARN], start=4)
    assert kinds(again) == [("reopened", 6)]
    assert again[0].incident.incident_id == first[0].incident.incident_id
    assert again[0].incident.reopened == 1
    assert again[0].incident.resolved_at_ms is None
    assert again[0].incident.breach_windows == 4
    resolved = feed(t, [CLEAN, CLEAN], start=7)
    later = feed(t, [CLEAN] * 10 + [WARN, WARN], start=9)
    assert kinds(resolved) == [("resolved", 8)]
    assert kinds(later) == [("opened", 20)]
    assert later[0].incident.incident_id != first[0].incident.incident_id
    assert len(final_incidents(first + again + resolved + later)) == 2


def test_too_few_requests_neither_counts_nor_breaks_the_clean_run() -> None:
    t = tracker(resolve_after=3)
    changes = feed(t, [WARN, WARN, CLEAN])
    # Below min_requests 10, and 0.40 is not 3 standard errors up at 3 requests: not judged.
    changes += t.observe(win(3, 0.40, n=3))
    changes += feed(t, [CLEAN, CLEAN], start=4)
    assert kinds(changes) == [("opened", 1), ("resolved", 5)]


def test_empty_minutes_neither_count_nor_break_a_breaching_run() -> None:
    """Rows sampled every few windows, or a sparse type's empty minutes: breaching windows
    with nothing judged between them are consecutive; a clean window between them is not,
    and a silence longer than resolve_when_silent forgets the run."""
    t = tracker(open_after=2)
    assert kinds(feed(t, [WARN, None, None, None, None, WARN])) == [("opened", 5)]
    t = tracker(open_after=2)
    assert feed(t, [WARN, CLEAN, WARN]) == []
    t = tracker(open_after=2, resolve_when_silent=3)
    assert feed(t, [WARN, None, None, None, None, WARN]) == []
    assert kinds(feed(t, [WARN], start=6)) == [("opened", 6)]


def test_silence_resolves_an_open_incident() -> None:
    t = tracker(resolve_when_silent=5)
    assert kinds(feed(t, [WARN, WARN])) == [("opened", 1)]
    assert t.advance("nda", T0 + 6 * MIN) == []  # 4 silent windows so far
    changes = t.advance("nda", T0 + 7 * MIN)
    assert kinds(changes) == [("resolved", 6)]
    assert changes[0].incident.resolution == "silent"
    assert changes[0].window is None
    # A long gap between two windows is handled the same way, without looping over it.
    t = tracker(resolve_when_silent=5)
    feed(t, [WARN, WARN])
    changes = t.observe(win(10**6, CLEAN))
    assert [c.kind for c in changes] == ["resolved"]


def test_duplicates_and_late_windows_are_ignored_and_replays_are_identical() -> None:
    rng = random.Random(5)
    means = [rng.choice([CLEAN] * 7 + [WARN, WARN, CRIT]) for _ in range(300)]
    first = feed(tracker(storm_after=0), means)  # many changes: no storm
    assert len(first) > 10
    t = tracker(storm_after=0)
    again: list[IncidentChange] = []
    for i, mean in enumerate(means):
        again += t.observe(win(i, mean))
        again += t.observe(win(i, mean))  # at-least-once delivery
        if i > 2:
            again += t.observe(win(i - 2, CRIT))  # a straggler for an old window
    assert [(c.kind, c.incident) for c in again] == [(c.kind, c.incident) for c in first]


def test_state_survives_a_restart() -> None:
    rng = random.Random(9)
    means = [rng.choice([CLEAN, CLEAN, WARN, WARN, CRIT]) for _ in range(200)]
    whole = feed(tracker(), means)
    t1 = tracker()
    part = feed(t1, means[:97])
    saved = orjson.loads(orjson.dumps(t1.export_state()))  # e.g. kept in a database
    t2 = IncidentTracker(t1.policy, {"nda": baseline()}, state=saved)
    part += feed(t2, means[97:], start=97)
    assert [(c.kind, c.incident) for c in part] == [(c.kind, c.incident) for c in whole]
    # Another policy version starts afresh (its ids differ anyway).
    fresh = IncidentTracker(PolicyConfig(version="p2"), state=t1.export_state())
    assert fresh.open_incidents() == []


def test_a_state_exported_per_type_is_the_whole_one_cut_by_type() -> None:
    """The alerting service stores, per batch, only the types it touched; each is what the
    whole export holds for it, open and resolved incidents and pooled evidence included."""
    rng = random.Random(4)
    t = tracker()
    for i in range(120):
        for doc_type in ("nda", "invoice", "memo"):
            t.observe(win(i, rng.choice([CLEAN, CLEAN, WARN, CRIT]), doc_type=doc_type))
    whole = t.export_state()
    assert any(s["open"] or s["resolved"] for s in whole["states"])

    def by_type(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # The types in any order (the service stores each apart); a type's rules in order.
        return sorted(states, key=lambda s: s["doc_type"])

    for kept in ({"invoice"}, {"nda", "memo"}, set()):
        cut = t.export_state(kept)
        assert by_type(cut["states"]) == by_type(
            [s for s in whole["states"] if s["doc_type"] in kept]
        )
        assert cut["policy_version"] == whole["policy_version"]
    assert orjson.loads(orjson.dumps(whole)) == whole  # plain values all through


def sparse_baseline() -> Baseline:
    # A type with ~1 request a minute and per-request sigma 0.06.
    return baseline(
        "sparse", center=0.30, spread=0.06, typical_request_count=1.0, threshold=0.54,
        critical_threshold=0.78, min_requests=3,
    )  # fmt: skip


def sparse_traffic(
    rng: random.Random, minutes: int, start: int, shift: float = 0.0
) -> list[WindowAggregate]:
    out = []
    for m in range(minutes):
        n = sum(1 for _ in range(3) if rng.random() < 0.35)  # ~1 request a minute, often 0
        if n:
            mean = sum(rng.gauss(0.30 + shift, 0.06) for _ in range(n)) / n
            out.append(win(start + m, min(1.0, max(0.0, mean)), n=n, doc_type="sparse"))
    return out


def test_sparse_types_are_detected_by_pooling_evidence() -> None:
    policy = PolicyConfig(rules=(RuleConfig(name="drift", pooling=True),))
    rng = random.Random(21)
    t = IncidentTracker(policy, {"sparse": sparse_baseline()})
    windows = sparse_traffic(rng, 60, 0) + sparse_traffic(rng, 10, 60, shift=0.2)
    changes: list[IncidentChange] = []
    for x in windows:
        changes += t.observe(x)
    opened = [c for c in changes if c.kind == "opened"]
    assert len(opened) == 1
    assert opened[0].incident.evidence == "pooled"
    assert 60 <= (opened[0].window_start_ms - T0) // MIN < 66  # within a few minutes
    # Once the type is back to normal, the pooled evidence decays and the incident resolves.
    for x in sparse_traffic(rng, 60, 70):
        changes += t.observe(x)
    assert changes[-1].kind == "resolved"


def test_pooling_is_what_sees_a_sparse_drift_no_window_shows_alone() -> None:
    """The same windows through two trackers that differ only in pooling: a sparse type
    0.14 up (more than two per-request sigmas) in windows of one or two requests (under its
    min_requests). Pooled evidence opens an incident within a few minutes;
    judged window by window, no window is far enough up at its own size, and nothing opens."""
    rng = random.Random(21)
    clean = sparse_traffic(rng, 60, 0)
    drifted = sparse_traffic(rng, 10, 60, shift=0.14)
    windows = clean + drifted
    assert all(w.request_count < 3 for w in drifted)  # under the baseline's min_requests

    def changes(pooling: bool) -> list[IncidentChange]:
        policy = PolicyConfig(rules=(RuleConfig(name="drift", pooling=pooling),))
        t = IncidentTracker(policy, {"sparse": sparse_baseline()})
        return [change for x in windows for change in t.observe(x)]

    pooled = changes(pooling=True)
    assert [(c.kind, c.incident.evidence) for c in pooled] == [("opened", "pooled")]
    assert 60 <= (pooled[0].window_start_ms - T0) // MIN < 66
    assert changes(pooling=False) == []


def test_pooling_stays_quiet_on_a_month_of_clean_sparse_traffic() -> None:
    t = IncidentTracker(PolicyConfig(), {"sparse": sparse_baseline()})
    changes: list[IncidentChange] = []
    for x in sparse_traffic(random.Random(4), 30 * 1440, 0):
        changes += t.observe(x)
    assert changes == []


def test_the_sources_sustained_rule_is_a_rule_of_the_same_configuration() -> None:
    # drift_score > 0.9 sustained for 3 minutes -> ANCHOR_DRIFT_ALERT
    sustained = RuleConfig(
        name="sustained_above_0.9",
        compare="static",
        static=StaticRuleConfig(threshold=0.9, critical_threshold=0.9, min_requests=1),
        open_after=3,
        open_after_critical=3,
        resolve_after=1,
        pooling=False,
    )
    policy = PolicyConfig.from_mapping(
        {"rules": [RuleConfig(name="drift").model_dump(), sustained.model_dump()]}
    )
    t = IncidentTracker(policy, {"nda": baseline()})
    changes = feed(t, [0.95, 0.95, 0.9, 0.95, 0.95])  # 0.9 is not above 0.9
    assert [(c.kind, c.incident.rule) for c in changes] == [("opened", "drift")]
    changes = feed(t, [0.95], start=5)
    assert [(c.kind, c.incident.rule) for c in changes] == [("opened", "sustained_above_0.9")]
    assert changes[0].incident.first_breach_ms == T0 + 3 * MIN
    event = drift_event(changes[0], emitted_at_ms=T0 + 6 * MIN)
    assert event.event_type == "ANCHOR_DRIFT_ALERT"


def test_types_without_a_baseline_use_the_static_fallback() -> None:
    t = IncidentTracker(PolicyConfig(), {})
    assert feed(t, [0.8] * 5) == []
    changes = feed(t, [0.86, 0.86], start=5)
    assert kinds(changes) == [("opened", 6)]
    assert changes[0].incident.baseline_version is None
    assert changes[0].incident.threshold == 0.85


def test_the_flink_jobs_verdict_is_used_as_judged() -> None:
    t = tracker()

    def verdict(minute: int, level: str) -> Verdict:
        window = win(minute, CLEAN)
        return Verdict(
            verdict_id=verdict_id("nda", window.window_start_ms, "1"),
            job_version="1",
            window=window,
            rule="baseline",
            baseline_version="b-other",
            threshold=0.29,
            critical_threshold=0.4,
            min_requests=5,
            breach_level=level,  # type: ignore[arg-type]
        )

    changes = t.observe_verdict(verdict(0, "warning")) + t.observe_verdict(verdict(1, "warning"))
    assert kinds(changes) == [("opened", 1)]
    assert changes[0].incident.baseline_version == "b-other"


def test_hourly_baselines_move_the_threshold_with_the_hour() -> None:
    hourly = [0.30] * 24
    hourly[9:12] = [0.40] * 3  # 09-12h UTC run hot every day (T0 is 08:00Z)
    t = tracker()
    t.set_baseline(baseline(hourly_center=hourly))
    assert feed(t, [0.42] * 5, start=2 * 60) == []  # within 0.05 of 10h's center
    # From 11:30 the profile runs down to 12h's center: at 12:00 it is 0.35 (threshold 0.40).
    assert kinds(feed(t, [0.42] * 2, start=4 * 60)) == [("opened", 4 * 60 + 1)]


def test_pooling_judges_small_windows_and_busy_independent_ones() -> None:
    """Windows big enough to be judged alone are pooled only when the type's windows are
    independent draws; where neighbours are correlated (the fit's autocorrelation), a
    busy window is judged by its own mean. Small windows are pooled either way, correlated
    ones needing a larger rise (their evidence is discounted, the reference is not)."""
    just_under = 0.345

    def opened(autocorrelation: float | None, n: int, mean: float) -> list[IncidentChange]:
        t = IncidentTracker(
            PolicyConfig(rules=(RuleConfig(name="drift"),)),
            {"nda": baseline(autocorrelation=autocorrelation)},
        )
        changes: list[IncidentChange] = []
        for i in range(100):
            changes += t.observe(win(i, mean, n=n))
        return [c for c in changes if c.kind == "opened"]

    assert opened(0.9, 40, just_under) == []  # busy, correlated: no pooling
    assert opened(0.9, 8, just_under) == []  # small, correlated: a wander, not evidence
    # busy independent; small (< 10) correlated, above the threshold but short of the
    # 3 standard errors that would let one window count alone
    for autocorrelation, n, mean in ((None, 40, just_under), (0.9, 8, 0.365)):
        [first] = opened(autocorrelation, n, mean)
        assert first.incident.evidence == "pooled"


def test_pooled_evidence_opens_at_once_also_on_a_window_that_breaches_alone() -> None:
    """Two windows just under the threshold bank evidence; the third breaches alone (a run
    of one) and takes the pool over its limit: it opens, as it would have under a higher
    sensitivity whose wider margin keeps that window under its threshold."""
    t = IncidentTracker(PolicyConfig(rules=(RuleConfig(name="drift"),)), {"nda": baseline()})
    changes = feed(t, [0.34, 0.34, 0.36])
    assert kinds(changes) == [("opened", 2)]
    assert changes[0].incident.evidence == "pooled"


def test_one_spike_is_never_pooled_evidence_on_its_own() -> None:
    t = IncidentTracker(PolicyConfig(rules=(RuleConfig(name="drift"),)), {"nda": baseline()})
    # One window 20 standard errors up, then an ordinary one: the spike alone adds at most
    # half the pooling limit, so the next window is no pooled breach and nothing opens.
    changes = t.observe(win(0, 0.50, n=40)) + t.observe(win(1, 0.31, n=40))
    assert changes == []


def test_pooled_evidence_is_discounted_on_correlated_windows() -> None:
    """The same small windows pool more slowly on a type whose windows are correlated (the
    fit's lag-1 autocorrelation): they are worth fewer independent ones."""

    def opened_at(phi: float | None) -> int | None:
        t = IncidentTracker(
            PolicyConfig(rules=(RuleConfig(name="drift"),)),
            {"nda": baseline(autocorrelation=phi)},
        )
        for i in range(200):
            for c in t.observe(win(i, 0.345, n=8)):
                if c.kind == "opened":
                    return i
        return None

    independent, correlated = opened_at(None), opened_at(0.9)
    assert independent is not None
    assert correlated is None or correlated > 2 * independent


def test_drift_events_have_distinct_deterministic_ids_per_change() -> None:
    t = tracker(resolve_after=1, reopen_within=5, open_after_critical=1)
    changes = feed(t, [WARN, WARN, CRIT, CLEAN, WARN, WARN, CLEAN])
    assert [c.kind for c in changes] == ["opened", "updated", "resolved", "reopened", "resolved"]
    events = [drift_event(c, emitted_at_ms=T0 + 10 * MIN) for c in changes]
    assert len({e.event_id for e in events}) == len(events)
    assert [e.event_type for e in events] == [
        "ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED",
        "ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED",
    ]  # fmt: skip
    assert {e.incident_id for e in events} == {changes[0].incident.incident_id}
    assert events[2].resolved_at_ms == T0 + 4 * MIN
    assert events[0].evidence.mean_drift == WARN
    assert events[0].evidence.threshold == 0.35
    again = [drift_event(c, emitted_at_ms=T0 + 99 * MIN) for c in changes]
    assert [e.event_id for e in again] == [e.event_id for e in events]
    assert math.isclose(events[1].evidence.mean_drift, CRIT)


def test_a_persistent_level_shift_is_announced_once_then_becomes_the_new_normal() -> None:
    """0.30 -> 0.40 for good: one incident, resolved as 'adapted' after adapt_after windows
    at the new level, with the old and new levels in the resolution event; from then on
    the type is judged around 0.40, so a real rise on top of it opens a new incident."""
    t = tracker(adapt_after=20)
    changes = feed(t, [0.40] * 60)
    assert [c.kind for c in changes] == ["opened", "resolved"]
    resolved = changes[1].incident
    assert resolved.resolution == "adapted"
    assert resolved.adapted_from == pytest.approx(0.30)
    assert resolved.adapted_to == pytest.approx(0.40)
    event = drift_event(changes[1], emitted_at_ms=T0)
    assert event.event_type == "ANCHOR_DRIFT_RESOLVED"
    [reason] = [r for r in event.evidence.reasons if r.code == "baseline_adapted"]
    assert reason.message == "nda moved from 0.30 to 0.40 and stayed: baseline adapted"
    moved = t.baseline("nda")
    assert moved is not None
    assert moved.center == pytest.approx(0.40)
    assert moved.threshold - moved.center == pytest.approx(0.05)  # the margin is kept
    assert moved.version != "b-test"
    # A rise on top of the new level is a new incident (after the re-open window).
    later = feed(t, [0.40] * 40 + [0.50] * 3, start=60)
    assert [c.kind for c in later] == ["opened"]


def test_an_accepted_shift_that_goes_away_gives_the_fitted_baseline_back() -> None:
    """0.30 -> 0.40, accepted; then back to 0.30 for adapt_after windows: the fitted
    baseline applies again (silently: nothing pages), so the next rise to 0.38, under the
    moved threshold (0.45) but over the fitted one (0.35), opens an incident. A partial
    return (to 0.38, still over the fitted threshold) moves the baseline to that level."""
    t = tracker(adapt_after=20)
    feed(t, [0.40] * 60)
    assert t.baseline("nda").center == pytest.approx(0.40)  # type: ignore[union-attr]
    assert feed(t, [0.30] * 5, start=60) == []  # a dip: most of the last 20 still at 0.40
    assert t.baseline("nda").center == pytest.approx(0.40)  # type: ignore[union-attr]
    assert feed(t, [0.30] * 15, start=65) == []
    assert t.baseline("nda") == baseline()
    assert [c.kind for c in feed(t, [0.38] * 2, start=80)] == ["opened"]

    partial = tracker(adapt_after=20)
    feed(partial, [0.50] * 60)
    assert feed(partial, [0.38] * 20, start=60) == []
    moved = partial.baseline("nda")
    assert moved is not None
    assert moved.center == pytest.approx(0.38)
    assert moved.threshold - moved.center == pytest.approx(0.05)


def test_adapting_after_one_window_keeps_one_window() -> None:
    """adapt_after = 1 (the smallest the settings allow): the shift is accepted at once and
    the tracker keeps one recent mean, not every one (it crashed on the first window, and
    kept the whole history, when it read [-0:] as "the last none")."""
    t = tracker(adapt_after=1)
    assert [c.kind for c in feed(t, [0.40] * 5)] == ["opened", "resolved"]
    assert t.baseline("nda").center == pytest.approx(0.40)  # type: ignore[union-attr]
    assert all(len(s.recent) <= 1 for s in t._states.values())


def test_a_ramp_is_not_adapted_and_adapting_can_be_turned_off() -> None:
    ramp = [0.36 + 0.004 * i for i in range(60)]
    t = tracker(adapt_after=20)
    # One incident, escalated as the ramp climbs, still open: a trend is no new normal.
    assert [c.kind for c in feed(t, ramp)] == ["opened", "updated"]
    assert t.baseline("nda").version == "b-test"  # type: ignore[union-attr]
    never = tracker(adapt_after=0)
    assert [c.kind for c in feed(never, [0.40] * 200)] == ["opened"]


def test_an_adapted_baseline_survives_a_restart_until_a_later_fit_replaces_it() -> None:
    t = tracker(adapt_after=20)
    feed(t, [0.40] * 30)
    state = orjson.loads(orjson.dumps(t.export_state()))
    policy = PolicyConfig(rules=(RuleConfig(name="drift", pooling=False, adapt_after=20),))
    again = IncidentTracker(policy, {"nda": baseline()}, state=state)
    assert again.baseline("nda") == t.baseline("nda")
    assert feed(again, [0.40] * 10, start=30) == []  # the new normal, not a new incident
    again.set_baseline(baseline())  # the old fit, published before the shift: ignored
    assert again.baseline("nda") == t.baseline("nda")
    refit = baseline(version="b-refit", fitted_at_ms=T0 + 10**9, center=0.41)
    again.set_baseline(refit)
    assert again.baseline("nda") == refit


def test_verdicts_of_an_adapted_type_are_judged_against_the_adapted_baseline() -> None:
    """The job still compares with the published baseline until a refit reaches it; the
    tracker re-judges that type's windows against the level it accepted."""
    t = tracker(adapt_after=20)
    feed(t, [0.40] * 30)

    def verdict(minute: int) -> Verdict:
        window = win(minute, 0.40)
        return Verdict(
            verdict_id=verdict_id("nda", window.window_start_ms, "1"),
            job_version="1",
            window=window,
            rule="baseline",
            baseline_version="b-test",
            threshold=0.35,
            critical_threshold=0.45,
            min_requests=10,
            breach_level="warning",  # against the old level
        )

    assert t.observe_verdict(verdict(30)) + t.observe_verdict(verdict(31)) == []
