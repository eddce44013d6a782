"""Generated event ids are unique per event across streams, so deduplicating by event_id (as
the drift job does) never drops an event of another generated stream."""

from __future__ import annotations

from anchorwatch.demo.generator import MINUTE_MS, TrafficConfig, generate

START = 1_764_403_200_000


def ids(config: TrafficConfig) -> list[str]:
    return [r.event.event_id for r in generate(config).records() if r.event is not None]


def test_ids_are_unique_within_a_stream() -> None:
    got = ids(TrafficConfig(minutes=4, doc_types=3))
    assert got
    assert len(got) == len(set(got))


def test_streams_with_different_starts_share_no_id() -> None:
    # Overlapping event time (the second starts 2 minutes into the first) and adjacent
    # starts: each pair would have shared every id when ids counted from the stream's start.
    base = TrafficConfig(minutes=4, doc_types=3, start_ms=START)
    for later in (START + 2 * MINUTE_MS, START + MINUTE_MS, START + 60 * MINUTE_MS):
        other = TrafficConfig(minutes=4, doc_types=3, start_ms=later)
        assert not set(ids(base)) & set(ids(other)), later


def test_streams_with_different_seeds_share_no_id() -> None:
    first, second = (TrafficConfig(seed=s, minutes=3, doc_types=3) for s in (1, 11))
    assert not set(ids(first)) & set(ids(second))


def test_the_same_stream_has_the_same_ids() -> None:
    config = TrafficConfig(minutes=2, doc_types=2)
    assert ids(config) == ids(config)
