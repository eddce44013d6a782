"""SQL text the drift job builds from settings (no Flink needed)."""

from __future__ import annotations

import pytest

from anchorwatch.jobs.drift_job import seconds


@pytest.mark.parametrize(
    ("value", "interval"),
    [
        (1, "0 00:00:01.000"),
        (10.5, "0 00:00:10.500"),
        # A plain SECOND interval would stop at 99 s: the settings allow far more.
        (419.796, "0 00:06:59.796"),
        (3600, "0 01:00:00.000"),
        (90061.5, "1 01:01:01.500"),
    ],
)
def test_intervals_of_any_length_are_spelled_day_to_second(value: float, interval: str) -> None:
    assert seconds(value) == f"INTERVAL '{interval}' DAY TO SECOND(3)"
