"""The fault campaign's alerting-pair kinds: planned like the others, a pause outlasting
the demo's lease, and the takeover times summed up over the trials that ran them."""

from __future__ import annotations

from anchorwatch.demo.journey_alerting_pair import LEASE_S
from bench.fault_alerting import PAIR_FAULTS, takeover_line
from bench.fault_plan import FAULTS, plan_trials


def test_the_pair_kinds_are_planned_and_a_pause_outlasts_the_lease() -> None:
    assert set(PAIR_FAULTS) <= set(FAULTS)
    specs = plan_trials(40, seed=5, only=PAIR_FAULTS)
    assert {s.fault for s in specs} == set(PAIR_FAULTS)
    pauses = [s for s in specs if s.fault == "alerting-pause"]
    assert all(s.duration_s > 2 * LEASE_S for s in pauses)
    assert all("(" in s.describe() and "of the live span" in s.describe() for s in pauses)


def test_takeover_times_are_summed_up_as_median_and_max() -> None:
    assert takeover_line([{}, {}]) is None  # no trial of these kinds
    line = takeover_line(
        [{"takeover_s": 5.1, "next_post_s": 9.0}, {"takeover_s": 6.3}, {"takeover_s": 4.0}, {}]
    )
    assert line == (
        "alerting takeover: 3 trials, fault to an instance leading median 5.1s, max 6.3s; "
        "to the next Slack post median 9.0s, max 9.0s"
    )
