"""bench/alerting_paced.py's quantiles from two scrapes of a Prometheus histogram."""

from __future__ import annotations

import math

from bench.alerting_paced import bucket_quantile


def scrape(**cumulative: float) -> dict[str, float]:
    return {f"le {bound.replace('_', '.')}": n for bound, n in cumulative.items()}


def test_only_the_observations_between_the_scrapes_count() -> None:
    before = scrape(**{"0_1": 90, "1_0": 100, "5_0": 100, "+Inf": 100})
    # 100 more: 10 under 0.1 s, 89 more under 1 s, 1 under 5 s.
    after = scrape(**{"0_1": 100, "1_0": 199, "5_0": 200, "+Inf": 200})
    assert bucket_quantile(before, after, 0.1) == 0.1
    assert bucket_quantile(before, after, 0.5) == 1.0
    assert bucket_quantile(before, after, 0.99) == 1.0
    assert bucket_quantile(before, after, 1.0) == 5.0


def test_past_the_last_finite_bound_is_infinite_and_nothing_observed_is_nan() -> None:
    before = scrape(**{"1_0": 0, "+Inf": 0})
    after = scrape(**{"1_0": 1, "+Inf": 3})
    assert bucket_quantile(before, after, 0.99) == math.inf
    assert math.isnan(bucket_quantile(after, after, 0.5))
