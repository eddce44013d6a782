"""The ingest producer's memory of acknowledged events (connectors/producer.py,
``Acknowledged``): a client's retry of a request that failed in part skips the events Kafka
already acknowledged, and nothing else. tests/integration/connectors/test_sizes.py runs the same
retry through a real Kafka."""

from __future__ import annotations

from anchorwatch.connectors.producer import Acknowledged
from anchorwatch.connectors.validation import Accepted


def _event(event_id: str, value: str = "") -> Accepted:
    return Accepted(event_id, "invoice", f'{{"event_id":"{event_id}"{value}}}'.encode())


EVENTS = [_event(f"e{i}") for i in range(5)]


def test_a_retry_skips_the_events_acknowledged_in_the_failed_request_and_no_others() -> None:
    acked = Acknowledged()
    assert acked.unwritten(EVENTS, now=0.0) == EVENTS  # nothing failed yet
    # e1 and e3 were not acknowledged: the retry writes them, and only them.
    acked.remember(EVENTS, {EVENTS[1].value, EVENTS[3].value}, now=1.0)
    assert len(acked) == 3
    assert acked.unwritten(EVENTS, now=2.0) == [EVENTS[1], EVENTS[3]]
    # Another request with events of its own is untouched.
    others = [_event("x1"), _event("x2")]
    assert acked.unwritten(others, now=2.0) == others


def test_an_event_reusing_an_acknowledged_id_with_other_content_is_written() -> None:
    acked = Acknowledged()
    acked.remember(EVENTS[:1], set(), now=0.0)
    reused = _event("e0", ',"event_time_ms":2')
    assert acked.unwritten([EVENTS[0], reused], now=1.0) == [reused]
    same_content_other_id = Accepted("e9", "invoice", EVENTS[0].value)
    assert acked.unwritten([same_content_other_id], now=1.0) == [same_content_other_id]


def test_acknowledged_events_are_forgotten_after_the_ttl() -> None:
    acked = Acknowledged(ttl_s=600)
    acked.remember(EVENTS[:2], set(), now=100.0)
    acked.remember(EVENTS[2:3], set(), now=400.0)
    assert acked.unwritten(EVENTS[:3], now=700.0) == []  # 600 s on: still kept
    assert acked.unwritten(EVENTS[:3], now=700.5) == EVENTS[:2]
    assert len(acked) == 1
    assert acked.unwritten(EVENTS[:3], now=1000.5) == EVENTS[:3]
    assert len(acked) == 0


def test_an_event_acknowledged_again_is_kept_from_its_latest_acknowledgement() -> None:
    acked = Acknowledged(ttl_s=10)
    acked.remember(EVENTS[:2], set(), now=0.0)
    acked.remember(EVENTS[:1], set(), now=8.0)
    # e1 expires at 10; e0, first in the request, is kept until 18.
    assert acked.unwritten(EVENTS[:2], now=12.0) == [EVENTS[1]]
    assert len(acked) == 1


def test_at_most_max_events_are_kept_the_oldest_going_first() -> None:
    acked = Acknowledged(max_events=3)
    acked.remember(EVENTS, set(), now=0.0)
    assert len(acked) == 3
    assert acked.unwritten(EVENTS, now=1.0) == EVENTS[:2]
