"""The generator's model versions, anchor kinds and latencies, and its incidents that live
in one model version or one anchor kind only: deterministic, drawn from streams of their
own (the drift of every request is what it was without them), and carried into the Kong
entry where the ingest service reads them."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from statistics import fmean, median

import orjson
import pytest

from anchorwatch.connectors.kong import kong_record
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.contracts.breakdown import ANCHOR_KINDS, KINDS, LATENCY_MAX_MS, anchor_kind
from anchorwatch.demo import routing
from anchorwatch.demo.generator import (
    MINUTE_MS,
    SCOPED_KINDS,
    IncidentLabel,
    Traffic,
    TrafficConfig,
    generate,
)
from anchorwatch.demo.kong_entry import to_kong_entry

BUSY = TrafficConfig(
    seed=4, minutes=20, doc_types=8, rate_scale=2.0, background_fault_rate=0.02, incidents=3
)


@functools.lru_cache(maxsize=8)
def _events(config: TrafficConfig) -> tuple[SnapshotEvent, ...]:
    return tuple(r.event for r in generate(config).records() if r.event is not None)


def _without_breakdown(event: SnapshotEvent) -> dict[str, object]:
    """An event's figures the models, kinds and latencies must leave as they were."""
    data = event.model_dump(exclude={"model", "latency_ms", "kinds", "top_anchors"})
    for anchor in data["anchors"]:
        anchor["anchor_id"] = anchor["anchor_id"].split("_")[1]  # the number, not the kind
    return data


# --------------------------------------------------------------------------- model versions


def test_each_type_routes_to_its_versions_by_their_shares() -> None:
    traffic = generate(BUSY)
    events = _events(BUSY)
    rollouts = 0
    for profile in traffic.profiles:
        assert profile.models, profile
        assert sum(share for _, share in profile.models) == pytest.approx(1.0)
        production = profile.models[0][0]
        line = next(line for line in routing.MODEL_LINES if line[0] == production)
        assert [m for m, _ in profile.models] in ([line[0]], list(line))
        counts = Counter(e.model for e in events if e.doc_type == profile.name)
        assert set(counts) <= {m for m, _ in profile.models}
        total = sum(counts.values())
        if len(profile.models) == 2 and total >= 200:
            rollouts += 1
            share = profile.models[1][1]
            assert counts[profile.models[1][0]] / total == pytest.approx(share, abs=0.08)
    assert rollouts >= 1


def test_versions_are_deterministic_and_leave_the_drift_as_it_was() -> None:
    routed = _events(BUSY)
    assert routed == _events(dataclasses.replace(BUSY))
    unnamed = _events(dataclasses.replace(BUSY, models=False))
    assert all(e.model is None for e in unnamed)
    assert len({e.model for e in routed}) >= 2
    assert [_without_breakdown(e) for e in routed] == [_without_breakdown(e) for e in unnamed]


def test_a_rollout_keeps_the_production_version_and_gives_the_candidate_its_share() -> None:
    line = (("summarizer-2.0", 1.0),)
    assert routing.rollout(line, 0.4) == (("summarizer-2.0", 0.6), ("summarizer-2.1", 0.4))
    assert routing.pick_model((("a", 0.6), ("b", 0.4)), 0.59) == "a"
    assert routing.pick_model((("a", 0.6), ("b", 0.4)), 0.61) == "b"
    assert routing.pick_model((("a", 0.6), ("b", 0.4)), 0.9999999) == "b"


@pytest.mark.parametrize("models", [1, "yes", None])
def test_models_must_be_a_flag(models: object) -> None:
    with pytest.raises(ValueError, match=r"^models: "):
        TrafficConfig(models=models)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- anchor kinds


def test_documents_hold_their_sort_of_anchors() -> None:
    traffic = generate(BUSY)
    events = _events(BUSY)
    seen: Counter[str] = Counter()
    for profile in traffic.profiles:
        assert len(profile.anchor_kinds) == 7  # the draws of the mix before it was per type
        prefixes = Counter(
            a.anchor_id.split("_")[0]
            for e in events
            if e.doc_type == profile.name
            for a in e.anchors
        )
        assert set(prefixes) <= set(profile.anchor_kinds)
        seen.update(anchor_kind(f"{p}_") for p in prefixes.elements())
    # Every kind the breakdown knows occurs, and an unknown prefix (CLAUSE) counts as OTHER.
    assert set(seen) == set(KINDS)
    by_name = {p.name: p for p in traffic.profiles}
    assert routing.main_kind(by_name["invoice"].anchor_kinds) == "TABLE"
    assert routing.main_kind(by_name["purchase_contract"].anchor_kinds) == "SECTION"
    assert routing.kind_share(by_name["invoice"].anchor_kinds, "TABLE") == pytest.approx(3 / 7)


def test_an_events_kind_figures_follow_its_anchors() -> None:
    event = next(e for e in _events(BUSY) if len(e.anchors) >= 8)
    kinds = event.kinds
    assert sum(f.anchor_count for f in kinds.values()) == len(event.anchors)
    assert list(kinds) == [k for k in KINDS if k in kinds]
    assert [a.drift_score for a in event.top_anchors] == sorted(
        (a.drift_score for a in event.anchors), reverse=True
    )[:3]


# --------------------------------------------------------------------------- latency


def test_every_request_carries_a_latency_that_rises_with_resampling() -> None:
    events = _events(BUSY)
    latencies = [e.latency_ms for e in events]
    assert all(isinstance(v, int) and 0 < v <= LATENCY_MAX_MS for v in latencies)
    calm = [e.latency_ms or 0 for e in events if e.anchors and e.resample_count == 0]
    busy = [e.latency_ms or 0 for e in events if e.resample_count >= 2]
    assert 800 < median(calm) < 3_000
    assert median(busy) > median(calm) + 300
    blank = [e.latency_ms or 0 for e in events if not e.anchors]
    assert blank
    assert median(blank) < median(calm)


def test_latency_grows_by_the_resample_cost_per_anchor() -> None:
    import random

    low, high = routing.RESAMPLE_MS
    for resampled in (0, 1, 5):
        values = [routing.latency_ms(random.Random(i), 10, resampled) for i in range(400)]
        base = [routing.latency_ms(random.Random(i), 10, 0) for i in range(400)]
        extra = [v - b for v, b in zip(values, base, strict=True)]
        assert all(low * resampled - 1 <= x <= high * resampled + 1 for x in extra)
    assert routing.latency_ms(random.Random(1), 100_000, 10_000) == LATENCY_MAX_MS


# --------------------------------------------------------------------------- incidents


def _with(label: IncidentLabel, config: TrafficConfig) -> tuple[list[SnapshotEvent], Traffic]:
    plain = generate(config)
    traffic = Traffic(config, plain.profiles, (label,))
    return [r.event for r in traffic.records() if r.event is not None], plain


def test_a_model_incident_lifts_only_that_versions_requests() -> None:
    config = TrafficConfig(seed=4, minutes=12, doc_types=3, rate_scale=4.0)
    plain = generate(config)
    profile = max(plain.profiles, key=lambda p: p.rate_per_minute)
    models = routing.rollout(profile.models, 0.5)
    profiles = tuple(dataclasses.replace(p, models=models) if p == profile else p
                     for p in plain.profiles)  # fmt: skip
    start = config.start_ms + 5 * MINUTE_MS
    label = IncidentLabel(
        profile.name, start, start + 4 * MINUTE_MS, "model_jump", 0.4, models[1][0]
    )
    hit = Traffic(config, profiles, (label,))
    calm = Traffic(config, profiles, ())
    pairs = [
        (a.event, b.event)
        for a, b in zip(hit.records(), calm.records(), strict=True)
        if a.event is not None and b.event is not None
    ]
    lifted = [(a, b) for a, b in pairs if a.anchors and a.mean_drift != b.mean_drift]
    assert lifted
    assert all(label.covers(a.event_time_ms) and a.model == label.model for a, _ in lifted)
    assert fmean(a.mean_drift - b.mean_drift for a, b in lifted) > 0.25
    # The other version's requests in the span are untouched.
    others = [(a, b) for a, b in pairs if label.covers(a.event_time_ms) and a.model != label.model
              and a.doc_type == profile.name]  # fmt: skip
    assert others
    assert all(a == b for a, b in others)


def test_a_kind_incident_lifts_only_that_kinds_anchors() -> None:
    config = TrafficConfig(seed=4, minutes=12, doc_types=3, rate_scale=4.0)
    profile = generate(config).profiles[0]
    start = config.start_ms + 5 * MINUTE_MS
    label = IncidentLabel(profile.name, start, start + 4 * MINUTE_MS, "kind_jump", 0.4,
                          anchor_kind=routing.main_kind(profile.anchor_kinds))  # fmt: skip
    hit, _ = _with(label, config)
    calm = list(_events(config))
    assert len(hit) == len(calm)
    rises: dict[bool, list[float]] = {True: [], False: []}
    for a, b in zip(hit, calm, strict=True):
        for x, y in zip(a.anchors, b.anchors, strict=True):
            assert x.anchor_id == y.anchor_id
            inside = label.covers(a.event_time_ms) and a.doc_type == label.doc_type
            rises[inside and anchor_kind(x.anchor_id) == label.anchor_kind].append(
                x.drift_score - y.drift_score
            )
    assert all(r == 0.0 for r in rises[False])
    assert fmean(rises[True]) > 0.25


def test_scoped_incidents_are_placed_after_the_others_and_name_their_part() -> None:
    base = TrafficConfig(seed=9, minutes=120, doc_types=6, incidents=3, fault_incidents=2)
    scoped = dataclasses.replace(base, scoped_incidents=4)
    before, after = generate(base), generate(scoped)
    # The same labels as without them: placed last, from the same stream.
    assert set(before.incidents) < set(after.incidents)
    extra = [i for i in after.incidents if i not in before.incidents]
    assert len(extra) == 4
    assert {i.kind for i in extra} <= set(SCOPED_KINDS)
    profiles = {p.name: p for p in after.profiles}
    for label in extra:
        profile = profiles[label.doc_type]
        if label.kind == "model_jump":
            assert len(profile.models) == 2
            assert label.model == profile.models[1][0]
        else:
            assert label.anchor_kind == routing.main_kind(profile.anchor_kinds)
        assert 0.4 <= label.magnitude <= 0.6
    # Without versions there is no rollout to drift in.
    unnamed = generate(dataclasses.replace(scoped, models=False))
    assert all(i.kind != "model_jump" for i in unnamed.incidents)


def test_a_scoped_label_names_its_part_and_only_it() -> None:
    t = 1_764_403_200_000
    label = IncidentLabel("nda", t, t + MINUTE_MS, "model_jump", 0.5, model="m-2")
    assert orjson.loads(label.to_json())["model"] == "m-2"
    kind = IncidentLabel("nda", t, t + MINUTE_MS, "kind_jump", 0.5, anchor_kind="TABLE")
    assert orjson.loads(kind.to_json())["anchor_kind"] == "TABLE"
    # Other labels read as they always did.
    assert set(orjson.loads(IncidentLabel("nda", t, t + 1, "jump", 0.3).to_json())) == {
        "doc_type", "start_ms", "end_ms", "kind", "magnitude"
    }  # fmt: skip
    for bad in (
        {"kind": "model_jump"},
        {"kind": "jump", "model": "m-2"},
        {"kind": "kind_jump", "anchor_kind": "CLAUSE"},
        {"kind": "kind_jump"},
        {"kind": "ramp", "anchor_kind": "TABLE"},
    ):
        with pytest.raises(ValueError, match=r"^(model|anchor_kind): "):
            IncidentLabel("nda", t, t + 1, magnitude=0.3, **bad)
    assert set(ANCHOR_KINDS) < set(KINDS)


# --------------------------------------------------------------------------- Kong entries


def test_the_kong_entry_carries_the_model_in_its_body_and_the_latency_kong_measured() -> None:
    event = next(e for e in _events(BUSY) if e.anchors and e.model)
    entry = to_kong_entry(event)
    assert orjson.loads(entry["request"]["body"])["model"] == event.model
    latencies = entry["latencies"]
    assert latencies["request"] == event.latency_ms
    assert latencies["request"] >= latencies["kong"] + latencies["proxy"]
    assert entry["response"]["headers"]["x-kong-upstream-latency"] == str(latencies["proxy"])
    # What the ingest service reads from it is the event, to the byte.
    assert kong_record(entry, source="generator").value == encode(event)


def test_an_event_without_model_or_latency_gives_an_entry_without_them() -> None:
    event = next(e for e in _events(BUSY) if e.anchors)
    bare = event.model_copy(update={"model": None, "latency_ms": None})
    entry = to_kong_entry(bare)
    assert "body" not in entry["request"]
    assert "request" not in entry["latencies"]
    assert entry["latencies"]["proxy"] > 0
    assert kong_record(entry, source="generator").value == encode(bare)
