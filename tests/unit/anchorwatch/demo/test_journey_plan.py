"""The demo's plan: its labelled incidents are alertable under the default policy, its Kong
entries and batches are what Kong sends, and its outcome is judged against the labels."""

from __future__ import annotations

import functools

import orjson
import pytest

from anchorwatch.backtest import backtest
from anchorwatch.connectors.kong import kong_record
from anchorwatch.contracts import ContractError, encode
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo.slice import reference_windows
from anchorwatch.policy.config import PolicyConfig

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
    # incident on its own; a ramp needs a few more windows to climb.
    assert [f.delay_windows() for f in outcome.found if f.label.kind != "ramp"] == [1, 1, 1]
    assert all(i.resolved_at_ms is not None for i in result.incidents)
    # The labels sit on four different types, inside the live span, which ends at now.
    assert len({lab.doc_type for lab in plan.labels}) == len(plan.labels) == 4
    assert all(plan.live_start_ms <= lab.start_ms < lab.end_ms < plan.end_ms for lab in plan.labels)
    assert plan.end_ms <= NOW


def test_entries_are_read_by_the_ingest_reader_as_planned() -> None:
    plan = jp.make_plan(NOW, seed=3, history_minutes=60, live_minutes=25, doc_types=4)
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
    with pytest.raises(ValueError, match="doc_types"):
        jp.make_plan(NOW, doc_types=3)
    with pytest.raises(ValueError, match="live_minutes"):
        jp.make_plan(NOW, live_minutes=20)
