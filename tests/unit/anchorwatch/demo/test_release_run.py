"""Model versions in generated traffic and the release gate's test runs: a version asked for
is on every event, and a test run holds the truth it claims."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter
from statistics import fmean

import orjson
import pytest

from anchorwatch.contracts import SnapshotEvent, decode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.release_run import ReleaseRunConfig, TypeTruth, release_run


def _first_records(config: TrafficConfig, n: int = 200) -> list[bytes]:
    return [r.raw for r in itertools.islice(generate(config).records(), n)]


def test_a_model_asked_for_answers_every_request_and_changes_nothing_else() -> None:
    config = TrafficConfig(minutes=2, doc_types=3, background_fault_rate=0.2)
    routed = _first_records(config)
    unnamed = _first_records(dataclasses.replace(config, models=False))
    versioned = _first_records(dataclasses.replace(config, model="summarizer-2.1"))
    assert not any(b'"model"' in raw for raw in unnamed)
    for plain, one, each in zip(unnamed, versioned, routed, strict=True):
        record, own = orjson.loads(one), orjson.loads(each)
        assert record.pop("model") == "summarizer-2.1"
        assert own.pop("model")  # each type's own versions otherwise
        # Nothing else changes: the same draws, the same records.
        assert record == orjson.loads(plain) == own


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("m" * 10_000, "model: String should have at most 128 characters"),
        ("v\n2", "model: U+000A (Cc) not allowed"),
        ("   ", "model: only whitespace or invisible characters"),
        (2, "model: Input should be a valid string"),
    ],
)
def test_a_bad_model_version_is_refused(model: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        TrafficConfig(model=model)  # type: ignore[arg-type]


def test_a_release_run_holds_its_truth() -> None:
    config = ReleaseRunConfig(
        types=(TypeTruth("invoice", 0.40, 0.05, docs=600), TypeTruth("nda", 0.6, -0.1, docs=600)),
        other_models=("exp-9",),
    )
    events = [decode(SnapshotEvent, line) for line in release_run(config)]
    counts = Counter((e.model, e.doc_type) for e in events)
    assert counts == {
        (model, doc_type): 600
        for model in ("summarizer-2.1", "summarizer-2.0", "exp-9")
        for doc_type in ("invoice", "nda")
    }
    assert len({e.event_id for e in events}) == len(events)
    for truth in config.types:
        for model, expected in (
            ("summarizer-2.1", truth.candidate_drift),
            ("summarizer-2.0", truth.production_drift),
            ("exp-9", truth.production_drift),
        ):
            drifts = [
                e.mean_drift for e in events if (e.model, e.doc_type) == (model, truth.doc_type)
            ]
            assert fmean(drifts) == pytest.approx(expected, abs=0.01)


def test_a_release_run_is_deterministic_and_seeded() -> None:
    config = ReleaseRunConfig(types=(TypeTruth("invoice", 0.4, docs=20),))
    assert list(release_run(config)) == list(release_run(config))
    other = ReleaseRunConfig(types=config.types, seed=8)
    assert list(release_run(config)) != list(release_run(other))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"types": ()}, "at least one doc type"),
        ({"types": (TypeTruth("a", 0.4), TypeTruth("a", 0.5))}, "each doc type once"),
        ({"types": (TypeTruth("a", 0.9),)}, "outside [0.15, 0.85]"),
        ({"types": (TypeTruth("a", 0.4, docs=-1),)}, "must be >= 0"),
        ({"types": (TypeTruth("a", 0.4),), "candidate": "x" * 129}, "candidate: String"),
        ({"types": (TypeTruth("a", 0.4),), "production": "summarizer-2.1"}, "each model version"),
        ({"types": (TypeTruth("a", 0.4),), "model_noise": float("nan")}, "model_noise"),
    ],
)
def test_a_release_run_config_refuses_what_it_cannot_generate(
    kwargs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        ReleaseRunConfig(**kwargs)  # type: ignore[arg-type]
