"""The tracker's shortcut for windows that change nothing but a few counters (``quiet``) is
only a shortcut: with it and without it, every window sequence gives the same incident
changes and leaves the same state behind, whatever the baseline (flat, hourly profile,
weekday offsets without a profile, a spike record, correlated windows), the rules, the
pins and whether the job's judgement comes with the window."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from anchorwatch.contracts import BaselinePin, WindowAggregate
from anchorwatch.policy import incidents
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.incident_types import IncidentChange
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.quiet import quiet_window
from anchorwatch.policy.window import judge_window, verdict_for
from tests.support.policy import baseline as fitted_baseline

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z, a Monday
MIN = 60_000


def history(seed: int, count: int = 3000) -> list[WindowAggregate]:
    """Noise around 0.30 with a daily wave, sparse stretches, quantised holds that step up,
    single spikes, a few incidents and a level shift that stays (adaptation)."""
    rng = random.Random(seed)
    out = []
    hold = None
    for i in range(count):
        n = rng.choice((0, 1, 2, 4, 12, 40, 40, 40)) if (i // 300) % 3 == 1 else 40
        if n == 0:
            continue
        level = 0.30 + 0.04 * math.sin(2 * math.pi * i / 1440) + (0.12 if i > 2400 else 0.0)
        mean = rng.gauss(level, 0.06 / math.sqrt(n))
        if (i // 200) % 5 == 3:  # a level held exactly, then a step up from it
            hold = hold if hold is not None and i % 200 < 150 else round(mean, 2)
            mean = hold + (0.08 if i % 200 >= 150 else 0.0)
        if rng.random() < 0.01:
            mean += 0.2
        if any(s <= i < s + 12 for s in (500, 1300, 1900)):
            mean += 0.15
        if 100 <= i < 114:  # a held level, a small window that ends it, and a step up
            n, mean = (2, 0.29) if i == 112 else (40, 0.36 if i == 113 else 0.28)
        out.append(
            WindowAggregate(
                doc_type="nda",
                window_start_ms=T0 + i * MIN,
                window_end_ms=T0 + (i + 1) * MIN,
                request_count=n,
                mean_drift=min(1.0, max(0.0, mean)),
            )
        )
    return out


BASELINES: dict[str, dict[str, Any]] = {
    "flat": {},
    "hourly": {"hourly_center": [0.30 + 0.04 * math.sin(2 * math.pi * h / 24) for h in range(24)]},
    "weekday only": {"weekday_offset": [-0.02, -0.03, 0.01, 0.02, 0.0, -0.02, 0.03]},
    "spiky, correlated": {"spike_record": [0.09, 0.04, 0.02], "autocorrelation": 0.5},
}
POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "two rules": {
        "rules": [
            {"name": "drift"},
            {"name": "fast", "open_after": 1, "adapt_after": 30, "storm_after": 0},
            {"name": "static", "compare": "static", "pooling": False},
        ]
    },
    "pinned volume": {"pins": {"nda": {"min_requests": 8}}},
}


def run(
    tracker: IncidentTracker, ws: list[WindowAggregate], verdicts: bool
) -> list[IncidentChange]:
    changes: list[IncidentChange] = []
    for w in ws:
        if verdicts:  # the job's judgement, against the published baseline
            stored = tracker.baseline("nda")
            verdict = verdict_for(w, judge_window(w, stored), "job-1")
            changes += tracker.observe_verdict(verdict)
        else:
            changes += tracker.observe(w)
    return changes + tracker.advance("nda", ws[-1].window_end_ms + 90 * MIN)


@pytest.mark.parametrize("shape", BASELINES)
@pytest.mark.parametrize("policy_name", POLICIES)
@pytest.mark.parametrize("verdicts", [False, True])
def test_the_shortcut_changes_nothing(
    shape: str, policy_name: str, verdicts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = []

    def counted(*args: Any) -> bool:
        taken.append(quiet_window(*args))
        return taken[-1]

    monkeypatch.setattr(incidents, "quiet_window", counted)
    policy = PolicyConfig.model_validate(POLICIES[policy_name])
    stored = fitted_baseline(t0=T0, spread=0.008, threshold=0.37, **BASELINES[shape])
    ws = history(seed=len(shape) + len(policy_name))
    full = IncidentTracker(policy, {"nda": stored})
    full.quiet_windows = False
    quick = IncidentTracker(policy, {"nda": stored})
    expected = run(full, ws, verdicts)
    assert run(quick, ws, verdicts) == expected
    assert quick.export_state() == full.export_state()
    # The history shows what the shortcut must hand over (incidents), and a good share of
    # its windows took it (none on a type pinned in settings).
    assert {c.kind for c in expected} >= {"opened", "resolved"}
    assert sum(taken) > len(ws) // 20 or (policy.pins and not any(taken))


def test_a_pin_on_the_baseline_takes_the_full_path() -> None:
    pinned = fitted_baseline(t0=T0, pin=BaselinePin(min_requests=30, source="command"))
    ws = history(seed=3)
    full = IncidentTracker(PolicyConfig(), {"nda": pinned})
    full.quiet_windows = False
    quick = IncidentTracker(PolicyConfig(), {"nda": pinned})
    assert run(quick, ws, False) == run(full, ws, False)
    assert quick.export_state() == full.export_state()


def test_weekday_offsets_without_a_profile_are_judged_once_as_the_job_judges() -> None:
    """The tracker's own judgement (no job verdict, or an adapted type) moves a weekday
    offset once, as ``judge_window`` on the stored baseline does for the job: on a Monday
    (-0.02) the threshold is 0.35, not 0.33 (moved twice). Windows at 0.34 then breach
    nothing; three of them open an incident on pooled evidence alone, on both paths."""
    stored = fitted_baseline(t0=T0, threshold=0.37, weekday_offset=[-0.02, 0, 0, 0, 0, 0, 0])
    means = [0.28] * 10 + [0.34] * 3 + [0.28] * 10
    ws = [
        WindowAggregate(
            doc_type="nda",
            window_start_ms=T0 + i * MIN,
            window_end_ms=T0 + (i + 1) * MIN,
            request_count=40,
            mean_drift=mean,
        )
        for i, mean in enumerate(means)
    ]
    assert judge_window(ws[10], stored).threshold == pytest.approx(0.35)
    full = IncidentTracker(PolicyConfig(), {"nda": stored})
    full.quiet_windows = False
    quick = IncidentTracker(PolicyConfig(), {"nda": stored})
    expected = run(full, ws, False)
    assert [c.kind for c in expected] == ["opened", "resolved"]
    opened = expected[0]
    assert opened.judgement is not None
    assert opened.judgement.threshold == pytest.approx(0.35)
    assert opened.judgement.breach_level == "none"
    assert opened.incident.evidence == "pooled"
    assert run(quick, ws, False) == expected
    assert quick.export_state() == full.export_state()
