"""The traffic generator: determinism, contract agreement, delivery shape, labelled incidents."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable
from statistics import NormalDist, fmean
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anchorwatch.contracts import RESAMPLE, AnchorSnapshot, ContractError, decode_snapshot, encode
from anchorwatch.contracts.models import SnapshotEvent
from anchorwatch.demo.generator import (
    DOC_TYPE_NAMES,
    DRIFT_KINDS,
    FAULT_KINDS,
    INCIDENT_KINDS,
    WARMUP_MINUTES,
    GeneratedRecord,
    Traffic,
    TrafficConfig,
    generate,
)
from anchorwatch.demo.kong_entry import KongHeaderNames, to_kong_entry
from anchorwatch.demo.malformed import MALFORMED_REASONS

MINUTE = 60_000


@functools.lru_cache(maxsize=32)
def _run(config: TrafficConfig) -> tuple[Traffic, tuple[GeneratedRecord, ...]]:
    # Several tests read the same traffic; configs are frozen, hence hashable.
    traffic = generate(config)
    return traffic, tuple(traffic.records())


def _events(config: TrafficConfig) -> list[SnapshotEvent]:
    return [r.event for r in _run(config)[1] if r.event is not None]


def _first_seed(predicate: Callable[[Traffic], bool], **kwargs: Any) -> TrafficConfig:
    """The first config (by seed) whose labels satisfy ``predicate``: deterministic."""
    for seed in range(200):
        config = TrafficConfig(seed=seed, **kwargs)
        if predicate(generate(config)):
            return config
    raise AssertionError("no seed in 0..199 fits")


def _clipped_mean(mu: float, sigma: float) -> float:
    """E[clip(X, 0, 1)] for X ~ N(mu, sigma): the integral of P(X > t) over [0, 1]."""
    dist, steps = NormalDist(mu, sigma), 2_000
    return fmean(1.0 - dist.cdf((i + 0.5) / steps) for i in range(steps))


def _binomial_ok(hits: int, n: int, p: float) -> bool:
    return abs(hits / n - p) <= 4.5 * math.sqrt(p * (1 - p) / n) + 1e-9


def _anchor_drifts(events: list[SnapshotEvent]) -> list[float]:
    return [a.drift_score for e in events for a in e.anchors]


# --------------------------------------------------------------------------------------------
# Determinism

_BUSY = TrafficConfig(
    minutes=12,
    doc_types=5,
    malformed_rate=0.05,
    late_rate=0.03,
    incidents=2,
    fault_incidents=2,
    background_fault_rate=0.02,
)


def test_same_config_gives_byte_identical_records() -> None:
    first = generate(_BUSY)
    second = generate(dataclasses.replace(_BUSY))
    a, b = list(first.records()), list(second.records())
    assert len(a) > 1_000
    assert [(r.arrival_ms, r.raw, r.late, r.malformed_reason) for r in a] == [
        (r.arrival_ms, r.raw, r.late, r.malformed_reason) for r in b
    ]
    assert first.profiles == second.profiles
    assert first.incidents == second.incidents
    # records() regenerates: a second pass over the same Traffic is identical too.
    assert [r.raw for r in first.records()] == [r.raw for r in a]


def test_different_seed_gives_different_traffic() -> None:
    a, b = _run(_BUSY), _run(dataclasses.replace(_BUSY, seed=8))
    assert a[0].profiles != b[0].profiles
    assert [r.raw for r in a[1]] != [r.raw for r in b[1]]


def test_delivery_rates_do_not_reshuffle_the_underlying_traffic() -> None:
    # Raising malformed_rate replaces some records; the rest are the very same events.
    clean = {e.event_id: e for e in _events(TrafficConfig(minutes=6, doc_types=3))}
    noisy = _run(TrafficConfig(minutes=6, doc_types=3, malformed_rate=0.3))[1]
    assert len(noisy) == len(clean)
    valid = [r.event for r in noisy if r.event is not None]
    assert 0 < len(valid) < len(clean)
    assert all(clean[e.event_id] == e for e in valid)


# --------------------------------------------------------------------------------------------
# Contract agreement


def test_every_valid_record_round_trips_through_the_codec() -> None:
    records = _run(_BUSY)[1]
    valid = [(r, r.event) for r in records if r.event is not None]
    assert len(valid) > 1_000
    for record, event in valid:
        assert record.malformed_reason is None
        assert record.raw == encode(event)
        assert decode_snapshot(record.raw) == event
    assert len({e.event_id for _, e in valid}) == len(valid)


def test_every_malformed_record_fails_decode_for_its_reason() -> None:
    records = _run(TrafficConfig(minutes=10, doc_types=4, malformed_rate=0.2))[1]
    malformed = [r for r in records if r.event is None]
    assert Counter(r.malformed_reason for r in malformed).keys() == set(MALFORMED_REASONS)
    for record in malformed:
        assert b"\n" not in record.raw
        with pytest.raises(ContractError) as info:
            decode_snapshot(record.raw)
        error, reason = info.value, record.malformed_reason
        if reason in ("not_json", "truncated"):
            assert error.first_field == "$"
            assert "not valid JSON" in str(error)
        elif reason == "missing_field":
            assert error.problems[0].reason == "required field is missing"
        elif reason == "out_of_range":
            assert re.fullmatch(r"anchors\[\d+\]\.drift_score|event_time_ms", error.first_field)
        elif reason == "wrong_type":
            assert re.fullmatch(r"anchors\[\d+\]\.drift_score|anchor_count", error.first_field)
        else:
            assert reason == "count_mismatch"
            assert error.first_field == "anchors"


def test_malformed_share_follows_the_rate() -> None:
    records = _run(TrafficConfig(minutes=20, doc_types=6, rate_scale=2.0, malformed_rate=0.1))[1]
    assert len(records) > 5_000
    hits = sum(r.event is None for r in records)
    assert _binomial_ok(hits, len(records), 0.1)
    assert not any(r.event is None for r in _run(TrafficConfig(minutes=5, doc_types=6))[1])


# --------------------------------------------------------------------------------------------
# Delivery: order, disorder, late records


def test_arrivals_are_sorted_and_delays_bounded() -> None:
    config = TrafficConfig(minutes=20, doc_types=6, rate_scale=2.0, late_rate=0.05)
    records = _run(config)[1]
    arrivals = [r.arrival_ms for r in records]
    assert arrivals == sorted(arrivals)
    low, high = config.late_delay_ms
    valid = [(r, r.event) for r in records if r.event is not None]
    for record, event in valid:
        delay = record.arrival_ms - event.event_time_ms
        if record.late:
            assert low <= delay <= high
        else:
            assert 0 <= delay <= config.disorder_ms
        assert config.start_ms <= event.event_time_ms < config.end_ms
    assert _binomial_ok(sum(r.late for r in records), len(records), 0.05)
    # The disorder is real: in arrival order, event times go backwards somewhere.
    times = [e.event_time_ms for _, e in valid]
    assert times != sorted(times)


def test_no_late_records_without_late_rate() -> None:
    records = _run(TrafficConfig(minutes=5, doc_types=6))[1]
    assert not any(r.late for r in records)


# --------------------------------------------------------------------------------------------
# Profiles


@pytest.mark.parametrize(("seed", "doc_types"), [(7, 6), (1, 8), (2, 12), (3, 20), (4, 40)])
def test_profiles_mix_hot_cool_busy_and_sparse_types(seed: int, doc_types: int) -> None:
    profiles = generate(TrafficConfig(seed=seed, doc_types=doc_types)).profiles
    assert len(profiles) == doc_types
    assert len({p.name for p in profiles}) == doc_types
    rates = [p.rate_per_minute for p in profiles]
    assert min(rates) < 3.0
    assert max(rates) > 30.0
    assert any(5.0 <= r <= 30.0 for r in rates)
    assert all(0.15 <= p.base_drift <= 0.6 for p in profiles)
    assert all(0.03 <= p.spread <= 0.12 for p in profiles)
    by_name = {p.name: p for p in profiles}
    medical, purchase = by_name["medical_report"], by_name["purchase_contract"]
    assert medical.base_drift - purchase.base_drift == pytest.approx(0.15, abs=0.002)


def test_doc_type_names_extend_the_list_with_suffixes() -> None:
    names = [p.name for p in generate(TrafficConfig(doc_types=len(DOC_TYPE_NAMES) + 2)).profiles]
    assert names[: len(DOC_TYPE_NAMES)] == list(DOC_TYPE_NAMES)
    assert names[len(DOC_TYPE_NAMES) :] == ["purchase_contract_2", "medical_report_2"]


def test_rate_scale_multiplies_rates_only() -> None:
    base = generate(TrafficConfig(doc_types=8)).profiles
    scaled = generate(TrafficConfig(doc_types=8, rate_scale=2.5)).profiles
    for a, b in zip(base, scaled, strict=True):
        assert b.rate_per_minute == pytest.approx(2.5 * a.rate_per_minute)
        assert (a.name, a.base_drift, a.spread, a.anchors_mean) == (
            b.name,
            b.base_drift,
            b.spread,
            b.anchors_mean,
        )


def test_observed_traffic_matches_the_profiles() -> None:
    config = TrafficConfig(seed=3, minutes=30, doc_types=8)
    traffic, _ = _run(config)
    events = _events(config)
    for profile in traffic.profiles:
        mine = [e for e in events if e.doc_type == profile.name]
        expected = profile.rate_per_minute * config.minutes
        # Poisson count: within 5 standard deviations of rate * minutes.
        assert abs(len(mine) - expected) <= 5 * math.sqrt(expected) + 1
        if len(mine) >= 50:
            drifts = _anchor_drifts(mine)
            target = _clipped_mean(profile.base_drift, profile.spread)
            assert fmean(drifts) == pytest.approx(target, abs=0.03)
            assert fmean(len(e.anchors) for e in mine) == pytest.approx(
                profile.anchors_mean, rel=0.15
            )
    means = {
        p.name: fmean(_anchor_drifts([e for e in events if e.doc_type == p.name]))
        for p in traffic.profiles
    }
    assert max(means.values()) - min(means.values()) > 0.2


def test_normal_requests_are_well_formed_snapshots() -> None:
    config = TrafficConfig(seed=5, minutes=10, doc_types=6)
    by_name = {p.name: p for p in _run(config)[0].profiles}
    events = _events(config)
    assert events
    for event in events:
        assert event.snapshot_status == "active"
        assert event.anchor_count == len(event.anchors) >= 1
        assert len(event.event_id) <= 200
        positions = [a.position for a in event.anchors]
        assert positions == sorted(set(positions))
        assert len({a.anchor_id for a in event.anchors}) == len(event.anchors)
        for anchor in event.anchors:
            prefix = anchor.anchor_id.split("_")[0]
            assert re.fullmatch(r"[A-Z]+_\d{3}", anchor.anchor_id)
            assert prefix in by_name[event.doc_type].anchor_kinds
            assert 3.0 <= anchor.l2_norm <= 6.0
            assert 0.01 <= anchor.kl_divergence <= 0.08
            assert anchor.cosine_angle <= 1.0 - 0.2 * anchor.drift_score + 1e-4
            assert (anchor.recommendation == RESAMPLE) == (anchor.drift_score > 0.8)


# --------------------------------------------------------------------------------------------
# Incidents


def test_incident_labels_are_placed_within_the_run_without_overlap() -> None:
    config = TrafficConfig(minutes=120, doc_types=4, incidents=6, fault_incidents=6)
    labels = generate(config).incidents
    assert len(labels) == 12
    assert sum(i.kind in DRIFT_KINDS for i in labels) == 6
    assert [i.start_ms for i in labels] == sorted(i.start_ms for i in labels)
    for label in labels:
        assert label.kind in INCIDENT_KINDS
        assert label.start_ms >= config.start_ms + WARMUP_MINUTES * MINUTE
        assert label.end_ms <= config.end_ms
        assert (label.start_ms - config.start_ms) % MINUTE == 0
        assert 3 * MINUTE <= label.end_ms - label.start_ms <= 10 * MINUTE
        if label.kind in DRIFT_KINDS:
            assert 0.2 <= label.magnitude <= 0.45
        assert orjson.loads(label.to_json()) == {
            "doc_type": label.doc_type,
            "start_ms": label.start_ms,
            "end_ms": label.end_ms,
            "kind": label.kind,
            "magnitude": label.magnitude,
        }
    for doc_type in {i.doc_type for i in labels}:
        spans = sorted((i.start_ms, i.end_ms) for i in labels if i.doc_type == doc_type)
        assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))


def test_incidents_keep_the_warm_up_free_even_when_crowded() -> None:
    config = TrafficConfig(minutes=14, doc_types=10, incidents=10, fault_incidents=10)
    labels = generate(config).incidents
    assert len(labels) >= 10
    assert min(i.start_ms for i in labels) >= config.start_ms + WARMUP_MINUTES * MINUTE
    assert max(i.end_ms for i in labels) <= config.end_ms


@pytest.mark.parametrize(("minutes", "placed"), [(1, 0), (7, 0), (8, 1), (30, 1)])
def test_short_runs_get_fewer_incidents(minutes: int, placed: int) -> None:
    labels = generate(TrafficConfig(minutes=minutes, doc_types=1, incidents=1)).incidents
    assert len(labels) == placed


def test_jump_raises_drift_by_its_magnitude_for_its_span_only() -> None:
    config = _first_seed(
        lambda t: [i.kind for i in t.incidents] == ["jump"],
        minutes=30,
        doc_types=1,
        rate_scale=4.0,
        incidents=1,
    )
    traffic, _ = _run(config)
    (jump,), (profile,) = traffic.incidents, traffic.profiles
    events = _events(config)

    def minute_means(low: int, high: int) -> float:
        per_minute: dict[int, list[float]] = {}
        for e in events:
            if low <= e.event_time_ms < high:
                per_minute.setdefault(e.event_time_ms // MINUTE, []).append(e.mean_drift)
        return fmean(fmean(v) for v in per_minute.values())

    before = minute_means(config.start_ms, jump.start_ms)
    during = minute_means(jump.start_ms, jump.end_ms)
    after = minute_means(jump.end_ms, config.end_ms)
    normal = _clipped_mean(profile.base_drift, profile.spread)
    raised = _clipped_mean(profile.base_drift + jump.magnitude, profile.spread)
    assert before == pytest.approx(normal, abs=0.03)
    assert during - before == pytest.approx(raised - normal, abs=0.04)
    assert during - before > 0.6 * jump.magnitude
    assert after == pytest.approx(normal, abs=0.03)


def test_ramp_grows_over_its_span() -> None:
    config = _first_seed(
        lambda t: [i.kind for i in t.incidents] == ["ramp"],
        minutes=30,
        doc_types=1,
        rate_scale=4.0,
        incidents=1,
    )
    traffic, _ = _run(config)
    (ramp,), (profile,) = traffic.incidents, traffic.profiles
    inside = [e for e in _events(config) if ramp.covers(e.event_time_ms)]
    half = (ramp.start_ms + ramp.end_ms) // 2
    early = fmean(_anchor_drifts([e for e in inside if e.event_time_ms < half]))
    late = fmean(_anchor_drifts([e for e in inside if e.event_time_ms >= half]))
    # Half-span means sit at a quarter and three quarters of the way up the ramp.
    expected = _clipped_mean(profile.base_drift + 0.75 * ramp.magnitude, profile.spread)
    expected -= _clipped_mean(profile.base_drift + 0.25 * ramp.magnitude, profile.spread)
    assert late - early == pytest.approx(expected, abs=0.04)


def test_data_quality_incidents_show_their_signature() -> None:
    config = _first_seed(
        lambda t: {i.kind for i in t.incidents} == set(FAULT_KINDS),
        minutes=120,
        doc_types=1,
        rate_scale=4.0,
        fault_incidents=12,
    )
    traffic, _ = _run(config)
    events = _events(config)
    for label in traffic.incidents:
        inside = [e for e in events if label.covers(e.event_time_ms)]
        assert len(inside) >= 30
        if label.kind == "zero_anchors":
            zero = [e for e in inside if e.anchor_count == 0]
            assert _binomial_ok(len(zero), len(inside), label.magnitude)
            assert all(e.anchors == [] and e.mean_drift == 0.0 for e in zero)
            assert all(e.snapshot_status == "active" for e in zero)
        elif label.kind == "disabled":
            off = [e for e in inside if e.snapshot_status == "disabled"]
            assert _binomial_ok(len(off), len(inside), label.magnitude)
            assert all(e.anchors == [] and e.anchor_count >= 1 for e in off)
        elif label.kind == "kl_spike":
            for e in inside:
                assert e.anchors
                assert all(
                    0.85 * label.magnitude - 1e-4
                    <= a.kl_divergence
                    <= 1.15 * label.magnitude + 1e-4
                    for a in e.anchors
                )
        else:
            calm = [a for e in inside for a in e.anchors if a.drift_score <= 0.8]
            flagged = sum(a.recommendation == RESAMPLE for a in calm)
            assert _binomial_ok(flagged, len(calm), label.magnitude)
    # Outside the labelled spans (and with no background faults) nothing is faulty.
    for e in events:
        if not any(i.covers(e.event_time_ms) for i in traffic.incidents):
            assert e.snapshot_status == "active"
            assert e.anchor_count == len(e.anchors) >= 1
            assert e.max_kl_divergence <= 0.08


def test_background_faults_are_sporadic_and_unlabelled() -> None:
    config = TrafficConfig(minutes=15, doc_types=4, rate_scale=2.0, background_fault_rate=0.2)
    traffic, _ = _run(config)
    assert traffic.incidents == ()
    events = _events(config)
    kinds = Counter(
        "zero"
        if e.anchor_count == 0
        else "disabled"
        if e.snapshot_status == "disabled"
        else "kl"
        if e.max_kl_divergence > 1.0
        else "ok"
        for e in events
    )
    assert {"zero", "disabled", "kl", "ok"} == kinds.keys()
    assert _binomial_ok(len(events) - kinds["ok"], len(events), 0.2)
    assert all(e.mean_drift == 0.0 for e in events if e.anchor_count == 0)


# --------------------------------------------------------------------------------------------
# Kong http-log entries


def test_kong_entry_carries_the_snapshot_in_headers() -> None:
    event = next(e for e in _events(_BUSY) if len(e.anchors) >= 3)
    entry = to_kong_entry(event)
    headers = entry["request"]["headers"]
    upstream = entry["response"]["headers"]  # the measurements come from the upstream
    assert entry["request"]["method"] == "POST"
    assert entry["request"]["uri"] == "/v1/messages"
    assert entry["request"]["url"].endswith("/v1/messages")
    assert entry["response"]["status"] == 200
    assert entry["started_at"] == event.event_time_ms
    latencies = entry["latencies"]
    assert latencies["request"] >= latencies["kong"] + latencies["proxy"] > 0
    assert entry["service"]["host"] == "api.anthropic.com"
    assert entry["route"]["paths"] == ["/v1/messages"]
    assert headers["x-request-id"] == event.event_id
    assert headers["x-anthropic-doc-type"] == event.doc_type
    assert upstream["x-anthropic-snapshot-status"] == "active"
    assert upstream["x-anthropic-anchor-count"] == str(event.anchor_count)
    assert "x-anthropic-snapshot-status" not in headers
    log = orjson.loads(upstream["x-anthropic-snapshot-log"])
    assert [AnchorSnapshot.model_validate(a) for a in log] == event.anchors
    # Plain JSON all the way down, and the same event always gives the same entry.
    assert orjson.loads(orjson.dumps(entry)) == entry
    assert to_kong_entry(event) == entry


def test_kong_entry_uses_configured_header_names() -> None:
    disabled = SnapshotEvent(
        event_id="req-1",
        event_time_ms=1_764_403_200_000,
        doc_type="nda",
        snapshot_status="disabled",
        anchor_count=4,
    )
    names = KongHeaderNames(
        doc_type="x-doc",
        snapshot_status="x-status",
        anchor_count="x-count",
        snapshot_log="x-log",
        request_id="x-id",
    )
    entry = to_kong_entry(disabled, headers=names)
    headers, upstream = entry["request"]["headers"], entry["response"]["headers"]
    assert headers["x-doc"] == "nda"
    assert upstream["x-status"] == "disabled"
    assert upstream["x-count"] == "4"
    assert upstream["x-log"] == "[]"
    assert headers["x-id"] == "req-1"
    assert "x-anthropic-doc-type" not in headers


# --------------------------------------------------------------------------------------------
# Config validation


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", "7"),
        ("start_ms", 1_764_403_200),  # seconds, not milliseconds
        ("start_ms", 1_764_403_200_001),  # not minute aligned
        ("minutes", 0),
        ("minutes", 1.5),
        ("minutes", 50_000_000),  # would run past 2100
        ("doc_types", 0),
        ("rate_scale", -1.0),
        ("rate_scale", math.inf),
        ("malformed_rate", 1.5),
        ("malformed_rate", math.nan),
        ("late_rate", -0.1),
        ("background_fault_rate", 2),
        ("disorder_ms", -1),
        ("late_delay_ms", (5, 1)),
        ("late_delay_ms", (1,)),
        ("incidents", -1),
        ("fault_incidents", True),
    ],
)
def test_config_errors_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: "):
        TrafficConfig(**{field: value})


# --------------------------------------------------------------------------------------------
# Invariants over small configs


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(min_value=-(2**31), max_value=2**31),
    minutes=st.integers(min_value=1, max_value=3),
    doc_types=st.integers(min_value=1, max_value=4),
    malformed_rate=st.floats(min_value=0.0, max_value=1.0),
    late_rate=st.floats(min_value=0.0, max_value=0.5),
    disorder_ms=st.integers(min_value=0, max_value=20_000),
)
def test_invariants_hold_for_small_configs(
    seed: int,
    minutes: int,
    doc_types: int,
    malformed_rate: float,
    late_rate: float,
    disorder_ms: int,
) -> None:
    config = TrafficConfig(
        seed=seed,
        minutes=minutes,
        doc_types=doc_types,
        malformed_rate=malformed_rate,
        late_rate=late_rate,
        disorder_ms=disorder_ms,
    )
    traffic = generate(config)
    records = list(traffic.records())
    assert len(traffic.profiles) == doc_types
    assert [r.arrival_ms for r in records] == sorted(r.arrival_ms for r in records)
    ids = []
    for record in records:
        if record.event is None:
            assert record.malformed_reason in MALFORMED_REASONS
            with pytest.raises(ContractError):
                decode_snapshot(record.raw)
            continue
        assert decode_snapshot(record.raw) == record.event
        assert config.start_ms <= record.event.event_time_ms < config.end_ms
        delay = record.arrival_ms - record.event.event_time_ms
        assert 0 <= delay <= (config.late_delay_ms[1] if record.late else disorder_ms)
        ids.append(record.event.event_id)
    assert len(ids) == len(set(ids))
