"""bench/latency.py's pure parts: the run's schedule (measured windows, staggered drift
onsets), the load's pacing and its Kong entries (stamped templates that the ingest path
reads as the events they stand for), and the figures: an incident's latency split into its
parts, misses counted as +inf, the local Slack's receive times."""

from __future__ import annotations

import math

import orjson
import pytest

from anchorwatch.connectors.kong import kong_record
from anchorwatch.contracts import decode_snapshot
from bench.latency import (
    IncidentTimes,
    accepted_rate,
    slack_receive_times,
    split,
    window_latencies,
)
from bench.latency_load import (
    CRITICAL_MARGIN,
    JUMP,
    MIN,
    Sender,
    batches_due,
    build_pools,
    drifting,
    due_s,
    fill,
    plan,
)
from bench.quantiles import MISS, misses, quantile

NOW = 1_900_000_000_000 + 17_123  # 17 s into a minute


def test_measured_windows_start_on_the_first_minute_after_the_warm_up() -> None:
    s = plan(NOW, warmup_s=60, minutes=4, doc_types=500, drifting=40, open_after=2, tail_ms=25_000)
    assert s.measure_start_ms % MIN == 0
    assert NOW + 60_000 <= s.measure_start_ms < NOW + 60_000 + MIN
    assert s.measure_end_ms == s.measure_start_ms + 4 * MIN
    assert s.measured_ends() == [s.measure_start_ms + k * MIN for k in range(1, 5)]
    assert s.stop_ms == s.measure_end_ms + 25_000  # the tail closes the last window
    assert s.start_ms == NOW


def test_drift_onsets_are_staggered_and_every_incident_opens_inside_the_measured_span() -> None:
    s = plan(NOW, warmup_s=60, minutes=4, doc_types=500, drifting=40, open_after=2, tail_ms=0)
    assert len(s.onsets) == 40  # 40 distinct types, spread over the 500
    assert sorted(s.onsets)[:3] == [0, 12, 25]
    starts = sorted(set(s.onsets.values()))
    # Three windows whose incident (opening two windows later) ends by the measured end.
    assert starts == [s.measure_start_ms + k * MIN for k in range(3)]
    assert all(s.opening_end_ms(i) <= s.measure_end_ms for i in s.onsets)
    assert max(s.opening_end_ms(i) for i in s.onsets) == s.measure_end_ms
    assert sorted(list(s.onsets.values()).count(t) for t in starts) == [13, 13, 14]
    # It drifts long enough to open, then comes back (one incident per type).
    assert s.drift_ms == 3 * MIN
    one = plan(NOW, warmup_s=0, minutes=2, doc_types=20, drifting=4, open_after=2, tail_ms=0)
    assert set(one.onsets.values()) == {one.measure_start_ms}


def test_a_plan_that_cannot_hold_its_incidents_is_refused() -> None:
    with pytest.raises(ValueError, match="--drifting"):
        plan(NOW, warmup_s=0, minutes=4, doc_types=5, drifting=6, open_after=2, tail_ms=0)
    with pytest.raises(ValueError, match="--minutes"):
        plan(NOW, warmup_s=0, minutes=1, doc_types=5, drifting=1, open_after=2, tail_ms=0)
    assert plan(NOW, warmup_s=0, minutes=1, doc_types=5, drifting=0, open_after=1,
                tail_ms=0).onsets == {}  # fmt: skip


def test_pacing_spreads_the_rate_over_batches() -> None:
    # 2,000 entries/s in batches of 100: one batch every 50 ms, 1,200 a minute.
    assert due_s(0, start_s=10.0, batch=100, rate=2000) == 10.0
    assert due_s(20, start_s=10.0, batch=100, rate=2000) == pytest.approx(11.0)
    assert batches_due(10.0, 70.0, batch=100, rate=2000) == 1200
    assert batches_due(10.0, 10.01, batch=100, rate=2000) == 1  # a started batch counts
    assert batches_due(10.0, 10.0, batch=100, rate=2000) == 0
    assert batches_due(10.0, 70.0, batch=100, rate=0) == 0


def test_a_type_drifts_from_its_onset_for_its_span_only() -> None:
    assert not drifting(None, MIN, NOW)
    assert not drifting(NOW, MIN, NOW - 1)
    assert drifting(NOW, MIN, NOW)
    assert drifting(NOW, MIN, NOW + MIN - 1)
    assert not drifting(NOW, MIN, NOW + MIN)


def test_stamped_entries_are_read_by_ingest_as_their_own_event_at_their_time() -> None:
    pools = build_pools(7, ["invoice", "nda"], pool=3)
    entry = orjson.loads(fill(pools[0].normal[1], b"run-0-42", b"1900000000123"))
    event = decode_snapshot(kong_record(entry, source="test").value)
    assert (event.event_id, event.event_time_ms, event.doc_type) == (
        "run-0-42",
        1_900_000_000_123,
        "invoice",
    )
    drifted = orjson.loads(fill(pools[0].drifted[1], b"run-0-43", b"1900000000123"))
    shifted = decode_snapshot(kong_record(drifted, source="test").value)
    # The same request JUMP higher (clipped at 1): above the pinned critical threshold.
    assert shifted.mean_drift == pytest.approx(event.mean_drift + JUMP, abs=0.02)
    assert pools[0].drifted_mean - pools[0].normal_mean > CRITICAL_MARGIN


def test_a_batch_goes_round_robin_over_the_types_and_drifts_from_the_onset() -> None:
    pools = build_pools(7, ["invoice", "nda", "tax_form"], pool=2)
    spec = {"onsets": {"1": NOW}, "rate": 1000, "batch": 6, "start_s": 0, "stop_s": 1,
            "host": "h", "port": 1, "token": "t", "drift_ms": MIN, "id_prefix": "r-0",
            "offset": 0, "concurrency": 1}  # fmt: skip
    sender = Sender(spec, pools)

    def events(now_ms: int) -> list[tuple[str, str, float]]:
        out = []
        for e in orjson.loads(sender.body(now_ms)):
            ev = decode_snapshot(kong_record(e, source="test").value)
            assert ev.event_time_ms == now_ms
            out.append((ev.event_id, ev.doc_type, ev.mean_drift))
        return out

    before, after = events(NOW - 1), events(NOW)
    assert [d for _, d, _ in before] == ["invoice", "nda", "tax_form"] * 2
    assert [i for i, _, _ in before + after] == [f"r-0-{j}" for j in range(12)]
    for (_, d, x), (_, _, y) in zip(before, after, strict=True):
        # The same templates in turn; only nda's are the drifted ones once it drifts.
        assert y == pytest.approx(x + JUMP, abs=0.02) if d == "nda" else y == x


def test_an_incident_splits_into_job_topic_and_alerting() -> None:
    end = 1_900_000_020_000
    t = IncidentTimes("nda", end, end + 10_400, end + 10_650, end / 1000 + 11.0)
    s = split(t, cap_s=60)
    assert s.total == pytest.approx(11.0)
    assert (s.job, s.topic, s.alerting) == pytest.approx((10.4, 0.25, 0.35))
    assert s.job + s.topic + s.alerting == pytest.approx(s.total)
    # Later than the cap, or never posted: a miss; what was not seen of it, too.
    assert split(t, cap_s=10).total == MISS
    never = split(IncidentTimes("nda", end, end + 10_400, None, None), cap_s=60)
    assert (never.total, never.topic, never.alerting) == (MISS, MISS, MISS)
    assert never.job == pytest.approx(10.4)
    nothing = split(IncidentTimes("nda", 0, None, None, None), cap_s=60)
    assert math.isinf(nothing.job)
    assert math.isinf(nothing.total)


def test_window_latencies_count_a_window_without_a_verdict_as_a_miss() -> None:
    ends = [120_000, 180_000]
    verdicts = {("a", 120_000): 130_200, ("a", 180_000): 190_500, ("b", 120_000): 131_000}
    got = window_latencies(verdicts, ["a", "b"], ends)
    assert got[:3] == pytest.approx([10.2, 10.5, 11.0])
    assert got[3] == MISS
    assert misses(got) == 1
    assert quantile(got, 0.5) == pytest.approx(10.75)
    assert quantile(got, 0.99) == MISS  # one window in four never judged shows in p99


def test_slack_receive_times_pair_each_post_with_its_message() -> None:
    messages = [
        {"ts": "1900000011.000001"},
        {"ts": "1900000011.000002", "subtype": "file_share"},  # a chart: an upload, no post
        {"ts": "1900000012.000003", "thread_ts": "1900000011.000001"},
        {"ts": "1900000013.000004"},
    ]
    calls = [
        {"method": "auth.test", "status": 200, "error": None, "at": 1_900_000_010.5},
        {"method": "chat.postMessage", "status": 200, "error": None, "at": 1_900_000_011.25},
        {"method": "chat.postMessage", "status": 200, "error": "channel_not_found", "at": 1.0},
        {"method": "files.completeUploadExternal", "status": 200, "error": None, "at": 2.0},
        {"method": "chat.postMessage", "status": 200, "error": None, "at": 1_900_000_012.75},
        # The last one does not fit its message's second: the middle of that second.
        {"method": "chat.postMessage", "status": 200, "error": None, "at": 1_900_000_020.0},
    ]
    assert slack_receive_times(messages, calls) == {
        "1900000011.000001": 1_900_000_011.25,
        "1900000012.000003": 1_900_000_012.75,
        "1900000013.000004": 1_900_000_013.5,
    }


def test_accepted_rate_is_over_the_measured_minutes_only() -> None:
    accepted = {60: 6_000, 120: 120_000, 180: 60_000, 240: 999_999}
    assert accepted_rate(accepted, 120, 240) == pytest.approx(1500.0)
    assert accepted_rate({}, 120, 240) == 0.0


def test_the_drifting_types_get_a_channel_each_or_share_them_round_robin() -> None:
    from bench.latency import channels_of
    from bench.latency_load import plan

    names = [f"t{i:03d}" for i in range(20)]
    schedule = plan(0, warmup_s=0, minutes=3, doc_types=20, drifting=4, open_after=2,
                    tail_ms=0)  # fmt: skip
    drifting = [names[i] for i in schedule.onsets]
    assert sorted(channels_of(names, 4, 0)) == sorted(drifting)
    assert len(set(channels_of(names, 4, 0).values())) == 4
    assert sorted(channels_of(names, 4, 2).values()) == ["#latency-000"] * 2 + ["#latency-001"] * 2
    assert channels_of(names, 0, 0) == {}
