"""The demo's plan: its labelled incidents are alertable under the default policy (and the
alerts of those living in one model version or one anchor kind would name it), its Kong
entries and batches are what Kong sends, and its outcome is judged against the labels."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from statistics import fmean

import orjson
import pytest

from anchorwatch.alerting.breakdown_text import model_phrase, where_phrase, with_history
from anchorwatch.alerting.render import IncidentView, WindowPoint, pack_kind_means
from anchorwatch.backtest import backtest
from anchorwatch.connectors.kong import kong_record
from anchorwatch.contracts import Baseline, ContractError, WindowAggregate, encode
from anchorwatch.contracts.breakdown import KINDS
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import routing
from anchorwatch.demo.journey_checks import named_first
from anchorwatch.demo.journey_operator import label_lines
from anchorwatch.demo.slice import reference_windows
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.window import QualityLimits

NOW = 1_767_600_000_000 + 12_345


@functools.lru_cache(maxsize=2)
def _plan(seed: int, history_minutes: int = 180) -> jp.Plan:
    return jp.make_plan(NOW, seed=seed, history_minutes=history_minutes)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [7, 2])
def test_each_labelled_incident_is_alerted_once_by_the_default_policy(seed: int) -> None:
    """What the live run must see, replayed offline: the job's windows of the plan's
    accepted events, baselines fitted on the history, the live span through the policy."""
    plan = _plan(seed)
    history, live = plan.split()
    entries = jp.kong_entries(history + live)
    windows = reference_windows([e.event for e in entries if e.event is not None], jp.MINUTE_MS)
    result = backtest(list(windows.values()), PolicyConfig(), fit_until_ms=plan.live_start_ms)
    raised = [
        jp.Raised(i.incident_id, i.doc_type, i.severity, i.opened_at_ms, i.reopened)
        for i in result.incidents
    ]
    outcome = jp.match_alerts(plan.labels, raised)
    assert outcome.missed == []
    assert outcome.unlabelled == []
    assert outcome.repeated == []
    # A jump's first window lies beyond anything its type's history showed, which opens an
    # incident on its own; a ramp needs a few more windows to climb, a drift in part of a
    # type's traffic at most one more.
    delays = {f.label.kind: f.delay_windows() for f in outcome.found}
    assert [delays[k] for k in ("jump", "kl_spike")] == [1, 1]
    assert 1 <= (delays["model_jump"] or 9) <= 2
    assert 1 <= (delays["kind_jump"] or 9) <= 2
    assert all(i.resolved_at_ms is not None for i in result.incidents)
    # The labels sit on five different types, inside the live span, which ends at now.
    assert len({lab.doc_type for lab in plan.labels}) == len(plan.labels) == 5
    assert all(plan.live_start_ms <= lab.start_ms < lab.end_ms < plan.end_ms for lab in plan.labels)
    assert plan.end_ms <= NOW
    # What the alerts of the scoped incidents would say names their model, their kind first;
    # they are drift, not a burst of re-sampling (a data-quality fault, held for its group).
    limit = QualityLimits().resample_share
    for found in outcome.found:
        if found.label.model or found.label.anchor_kind:
            lab = found.label
            spanned = [w for (doc, start), w in windows.items()
                       if doc == lab.doc_type and lab.start_ms <= start < lab.end_ms]  # fmt: skip
            assert max(w.resample_share or 0.0 for w in spanned) <= limit, lab
            (alert,) = found.alerts
            said = _breakdown_said(plan, windows, found.label, alert, result.baselines)
            name = found.label.model or found.label.anchor_kind or ""
            others = _others(plan, found.label)
            assert named_first(said, name, others) is None, (found.label, said)


def _others(plan: jp.Plan, label: jp.Label) -> list[str]:
    if label.model:
        profile = next(p for p in plan.traffic.profiles if p.name == label.doc_type)
        return [m for m, _ in profile.models if m != label.model]
    return [k for k in KINDS if k != label.anchor_kind]


def _breakdown_said(
    plan: jp.Plan,
    windows: dict[tuple[str, int], WindowAggregate],
    label: jp.Label,
    alert: jp.Raised,
    baselines: Mapping[str, Baseline],
) -> str:
    """The alerting service's breakdown text for the window that opened ``alert``, its
    threshold the type's baseline's, its history the type's windows before it."""
    threshold = baselines[label.doc_type].threshold
    window = windows[(label.doc_type, alert.opened_at_ms - jp.MINUTE_MS)]
    history = [
        WindowPoint(w.window_start_ms, w.window_end_ms, w.mean_drift, threshold,
                    w.request_count, kind_drift=pack_kind_means(
                        {k: f.mean_drift for k, f in (w.kinds or {}).items()}))
        for (doc, start), w in sorted(windows.items())
        if doc == label.doc_type and start + jp.MINUTE_MS <= plan.live_start_ms
    ]  # fmt: skip
    view = IncidentView(
        incident_id=alert.incident_id, doc_type=label.doc_type, severity="warning",
        state="open", opened_at_ms=alert.opened_at_ms, resolved_at_ms=None, window=window,
        threshold=threshold, baseline_version=None,
    )  # fmt: skip
    view = with_history(view, history)
    return f"{where_phrase(view)} {model_phrase(window, threshold, lambda s: f'`{s}`')}"


def test_the_scoped_incidents_name_their_part_of_the_traffic() -> None:
    plan = _plan(7)
    by_kind = {lab.kind: lab for lab in plan.labels}
    model, kind = by_kind["model_jump"], by_kind["kind_jump"]
    profiles = {p.name: p for p in plan.traffic.profiles}
    # The model incident's type is in a rollout: its candidate answers MODEL_SHARE.
    rollout = profiles[model.doc_type].models
    share = jp.MODEL_SHARE
    assert rollout == ((rollout[0][0], round(1 - share, 2)), (model.model, share))
    assert kind.anchor_kind == routing.main_kind(profiles[kind.doc_type].anchor_kinds)
    injected = {(i.doc_type, i.kind): i for i in plan.traffic.incidents}
    assert injected[(model.doc_type, "model_jump")].model == model.model
    assert injected[(kind.doc_type, "kind_jump")].anchor_kind == kind.anchor_kind
    # The live traffic shows it: the candidate drifts, the other version does not.
    _, live = plan.split()
    inside = [r.event for r in live if r.event is not None and r.event.doc_type == model.doc_type
              and model.start_ms <= r.event.event_time_ms < model.end_ms]  # fmt: skip
    candidate = fmean(e.mean_drift for e in inside if e.model == model.model and e.anchors)
    production = fmean(e.mean_drift for e in inside if e.model != model.model and e.anchors)
    assert candidate - production > 0.2
    lines = label_lines(plan, None)
    assert any(f"in {model.model} only" in line for line in lines), lines
    assert any(f"in its {kind.anchor_kind} anchors only" in line for line in lines), lines


def test_entries_are_read_by_the_ingest_reader_as_planned() -> None:
    plan = jp.make_plan(NOW, seed=3, history_minutes=60, live_minutes=25, doc_types=6)
    _, live = plan.split()
    entries = jp.kong_entries(live, broken_every=10)
    broken = [e for e in entries if e.broken]
    assert 0 < len(broken) < len(entries) // 5
    assert {e.broken for e in broken} == {path for _, path in jp.BREAKAGES}
    for e in entries:
        if e.event is not None:
            assert kong_record(orjson.loads(e.body), source="ingest").value == encode(e.event)
        else:
            with pytest.raises(ContractError) as err:
                kong_record(orjson.loads(e.body), source="ingest")
            assert err.value.first_field.split("[", 1)[0] == e.broken
    # The same events break in every run.
    again = jp.kong_entries(live, broken_every=10)
    assert [e.body for e in again] == [e.body for e in entries]


def _entry(t: int) -> jp.Entry:
    return jp.Entry(t, str(t).encode(), None)


def test_kong_batches_fill_to_the_batch_size_or_flush_after_the_coalescing_delay() -> None:
    # Two workers; entries alternate between them. A burst, then a trickle.
    entries = [_entry(t) for t in range(0, 10)] + [_entry(t) for t in (5_000, 5_100, 9_000)]
    batches = jp.kong_batches(entries, workers=2, batch_size=3, coalesce_ms=1_000)
    assert [(b.worker, b.send_at_ms, [e.arrival_ms for e in b.entries]) for b in batches] == [
        (0, 4, [0, 2, 4]),
        (1, 5, [1, 3, 5]),
        (0, 1_006, [6, 8]),
        (1, 1_007, [7, 9]),
        (0, 6_000, [5_000]),
        (1, 6_100, [5_100]),
        (0, 10_000, [9_000]),
    ]
    sent = [e for b in batches for e in b.entries]
    assert sorted(e.arrival_ms for e in sent) == [e.arrival_ms for e in entries]
    assert batches[0].body() == b"[0,2,4]"


def _label(doc: str, start_min: int, end_min: int, diagnosis: str | None = None) -> jp.Label:
    m = jp.MINUTE_MS
    return jp.Label(doc, start_min * m, end_min * m, "jump", 0.3, diagnosis)


def _raised(doc: str, opening_window_min: int, reopened: int = 0, *codes: str) -> jp.Raised:
    end = (opening_window_min + 1) * jp.MINUTE_MS
    return jp.Raised(f"i-{doc}-{opening_window_min}", doc, "warning", end, reopened, codes)


def test_alerts_are_matched_with_labels_by_type_and_opening_window() -> None:
    labels = [_label("a", 10, 15), _label("b", 10, 15, "kl_divergence_spike"), _label("c", 20, 25)]
    outcome = jp.match_alerts(
        labels,
        [
            _raised("a", 11),  # second window of a's incident: delay 2
            _raised("b", 16, 0, "kl_divergence_spike"),  # one window after b's end: in grace
            _raised("a", 30),  # long after: unlabelled
            _raised("c", 19),  # before c began: unlabelled, and c is missed
        ],
    )
    assert [f.delay_windows() for f in outcome.found] == [2, 7, None]
    assert outcome.missed == [labels[2]]
    assert [a.opened_at_ms // jp.MINUTE_MS for a in outcome.unlabelled] == [20, 31]
    assert not outcome.ok


def test_a_label_alerted_twice_or_reopened_or_without_its_diagnosis_fails() -> None:
    assert jp.match_alerts([_label("a", 10, 15)], [_raised("a", 11)]).ok
    twice = jp.match_alerts([_label("a", 10, 15)], [_raised("a", 11), _raised("a", 14)])
    assert [f.label.doc_type for f in twice.repeated] == ["a"]
    assert not twice.ok
    reopened = jp.match_alerts([_label("a", 10, 15)], [_raised("a", 11, 1)])
    assert not reopened.ok
    quiet = jp.match_alerts([_label("a", 10, 15, "kl_divergence_spike")], [_raised("a", 11)])
    assert quiet.undiagnosed == [quiet.found[0].label]
    assert not quiet.ok


def test_the_plan_refuses_too_few_types_or_too_short_a_live_span() -> None:
    with pytest.raises(ValueError, match="doc_types: at least 6"):
        jp.make_plan(NOW, doc_types=5)
    with pytest.raises(ValueError, match="live_minutes"):
        jp.make_plan(NOW, live_minutes=20)


@pytest.mark.slow
@pytest.mark.parametrize("later_minutes", [0, 148, 222])
def test_the_gateway_faults_entries_all_arrive_and_each_type_reads_as_disabled(
    later_minutes: int,
) -> None:
    """Which entries break depends on when the run starts; none in the gateway-wide
    fault's span may, or a sparse type's first window of it could fall under the disabled
    share that makes its incident a member of the group."""
    plan = jp.with_gateway_fault(jp.make_plan(NOW + later_minutes * jp.MINUTE_MS, seed=7))
    _, live = plan.split()
    entries = jp.kong_entries(live, intact=plan.intact)
    events = [r.event for r in live if r.event is not None]
    assert len(entries) == len(events)
    gateway = [lab for lab in plan.labels if lab.kind == "gateway"]
    assert len(gateway) >= 3
    for event, entry in zip(events, entries, strict=True):
        if plan.intact(event):
            assert entry.event is not None
    windows = reference_windows([e.event for e in entries if e.event is not None], jp.MINUTE_MS)
    limit = QualityLimits().disabled_share
    for lab in gateway:
        first = windows[(lab.doc_type, lab.start_ms)]
        assert (first.disabled_share or 0.0) > limit, (lab.doc_type, first.disabled_share)
    # Elsewhere entries still break.
    assert any(e.broken for e in entries)
