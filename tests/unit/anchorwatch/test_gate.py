"""The release gate's logic on generated test runs with a known truth: each case is labelled
with what the gate must say (per doc type, and the exit status), and the statistics are held
to published values."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from anchorwatch.contracts import SnapshotEvent, decode
from anchorwatch.demo.release_run import ReleaseRunConfig, TypeTruth, release_run
from anchorwatch.gate import GateConfig, GateDataError, GateReport, RunTally, judge
from anchorwatch.gate_stats import Sample, t_cdf, t_quantile, welch_interval

NEW, OLD = "summarizer-2.1", "summarizer-2.0"


def run_gate(run: ReleaseRunConfig, lines: list[bytes] | None = None, **config: Any) -> GateReport:
    tally = RunTally(GateConfig.model_validate({"candidate": NEW, "against": OLD, **config}))
    for line in release_run(run) if lines is None else lines:
        tally.add(decode(SnapshotEvent, line))
    return judge(tally)


def one_type(production: float, difference: float, **kw: object) -> ReleaseRunConfig:
    truth = TypeTruth("invoice", production, difference, **kw)  # type: ignore[arg-type]
    return ReleaseRunConfig(types=(truth,))


@dataclass(frozen=True)
class Case:
    name: str
    run: ReleaseRunConfig
    statuses: dict[str, str]  # doc type -> the label
    exit_code: int
    config: dict[str, Any] = field(default_factory=dict)


def _seeded(production: float, difference: float, seed: int) -> ReleaseRunConfig:
    return ReleaseRunConfig(types=(TypeTruth("invoice", production, difference),), seed=seed)


CASES = [
    Case("better by 0.05", one_type(0.45, -0.05), {"invoice": "pass"}, 0),
    Case("better by 0.01", one_type(0.45, -0.01), {"invoice": "pass"}, 0),
    Case("equal", one_type(0.45, 0.0), {"invoice": "pass"}, 0),
    Case("equal, another seed", _seeded(0.50, 0.0, 11), {"invoice": "pass"}, 0),
    Case("equal, a third seed", _seeded(0.30, 0.0, 23), {"invoice": "pass"}, 0),
    Case("slightly worse (0.02)", one_type(0.45, 0.02), {"invoice": "fail"}, 1),
    Case(
        "slightly worse (0.01), inside a 0.03 margin",
        one_type(0.45, 0.01),
        {"invoice": "pass"},
        0,
        {"margin": 0.03},
    ),
    Case(
        "worse (0.05), beyond a 0.02 margin",
        one_type(0.45, 0.05),
        {"invoice": "fail"},
        1,
        {"margin": 0.02},
    ),
    Case("much worse (0.15)", one_type(0.40, 0.15), {"invoice": "fail"}, 1),
    Case("above max-mean, equal to production", one_type(0.76, 0.0), {"invoice": "fail"}, 1),
    Case("above max-mean, better than production", one_type(0.82, -0.06), {"invoice": "fail"}, 1),
    Case("just under max-mean", one_type(0.68, 0.0), {"invoice": "pass"}, 0),
    Case(
        "above a stricter max-mean",
        one_type(0.45, 0.0),
        {"invoice": "fail"},
        1,
        {"max_mean": 0.40},
    ),
    Case(
        "no production model, below max-mean",
        ReleaseRunConfig(types=(TypeTruth("invoice", 0.5),), production=None),
        {"invoice": "pass"},
        0,
        {"against": None},
    ),
    Case(
        "no production model, above max-mean",
        ReleaseRunConfig(types=(TypeTruth("invoice", 0.8),), production=None),
        {"invoice": "fail"},
        1,
        {"against": None},
    ),
    Case("too few candidate docs", one_type(0.45, -0.05, docs=400), {"invoice": "error"}, 2),
    Case(
        "too few production docs",
        one_type(0.45, -0.05, production_docs=999),
        {"invoice": "error"},
        2,
    ),
    Case(
        "fewer docs, with a lower min-docs",
        one_type(0.45, 0.1, docs=200),
        {"invoice": "fail"},
        1,
        {"min_docs": 200},
    ),
    Case(
        "a type the candidate never answered",
        ReleaseRunConfig(
            types=(TypeTruth("invoice", 0.45), TypeTruth("nda", 0.5, docs=0, production_docs=1000))
        ),
        {"invoice": "pass", "nda": "error"},
        2,
    ),
    Case(
        "three types, one much worse",
        ReleaseRunConfig(
            types=(
                TypeTruth("invoice", 0.45, -0.02),
                TypeTruth("nda", 0.55, 0.08),
                TypeTruth("lease", 0.35, 0.0),
            )
        ),
        {"invoice": "pass", "nda": "fail", "lease": "pass"},
        1,
    ),
    Case(
        "three types, all fine",
        ReleaseRunConfig(
            types=(
                TypeTruth("invoice", 0.45, -0.02),
                TypeTruth("nda", 0.55, 0.0),
                TypeTruth("lease", 0.70, -0.1),
            ),
            seed=3,
        ),
        {"invoice": "pass", "nda": "pass", "lease": "pass"},
        0,
    ),
    Case(
        "a failing type and a short one: not judged wins",
        ReleaseRunConfig(types=(TypeTruth("invoice", 0.8), TypeTruth("nda", 0.4, docs=10))),
        {"invoice": "fail", "nda": "error"},
        2,
    ),
    Case(
        "other models in the run are skipped without --strict",
        ReleaseRunConfig(types=(TypeTruth("invoice", 0.45, 0.1),), other_models=("exp-9",)),
        {"invoice": "fail"},
        1,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_gate_finds_the_labelled_answer(case: Case) -> None:
    report = run_gate(case.run, **case.config)
    assert {v.doc_type: v.status for v in report.verdicts} == case.statuses
    assert report.exit_code == case.exit_code
    for verdict in report.verdicts:
        # A pass carries no reason; anything else says why.
        assert bool(verdict.reasons) == (verdict.status != "pass")


def test_the_figures_estimate_the_true_difference() -> None:
    run = ReleaseRunConfig(types=(TypeTruth("invoice", 0.45, 0.03), TypeTruth("nda", 0.6, -0.04)))
    report = run_gate(run)
    truth = {t.doc_type: t for t in run.types}
    for verdict in report.verdicts:
        t = truth[verdict.doc_type]
        assert verdict.candidate is not None
        assert verdict.interval is not None
        assert verdict.candidate.n == 1000
        assert verdict.candidate.mean == pytest.approx(t.candidate_drift, abs=0.01)
        assert verdict.interval.low < t.difference < verdict.interval.high
        assert verdict.interval.high - verdict.interval.low < 0.02


def test_a_too_short_type_names_the_model_and_the_counts() -> None:
    report = run_gate(one_type(0.45, 0.0, docs=400, production_docs=1000))
    (verdict,) = report.verdicts
    assert verdict.reasons == (
        f"candidate {NEW!r} has 400 documents of this type, fewer than --min-docs 1000",
    )


def test_a_failure_message_carries_the_figures() -> None:
    (verdict,) = run_gate(one_type(0.76, 0.0)).verdicts
    assert verdict.candidate is not None
    assert verdict.reasons[0] == f"mean drift {verdict.candidate.mean:.4f} above --max-mean 0.72"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"candidate": "nope"}, "--model 'nope': no record of this model in the run"),
        ({"against": "summarizer-1.0"}, "--against 'summarizer-1.0': no record of this model"),
    ],
)
def test_an_unknown_model_is_an_error_listing_the_models_seen(
    config: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(GateDataError) as caught:
        run_gate(one_type(0.45, 0.0, docs=50), min_docs=2, **config)
    assert fragment in str(caught.value)
    assert "summarizer-2.0" in str(caught.value)


def test_strict_refuses_records_of_other_models() -> None:
    run = ReleaseRunConfig(types=(TypeTruth("invoice", 0.45, docs=20),), other_models=("exp-9",))
    with pytest.raises(GateDataError, match="of model 'exp-9', neither --model nor --against"):
        run_gate(run, strict=True, min_docs=2)
    assert run_gate(run, min_docs=2).ignored == 20


def test_the_same_record_twice_counts_once() -> None:
    lines = list(release_run(one_type(0.45, 0.0, docs=30)))
    report = run_gate(one_type(0.45, 0.0), lines + lines[:5], min_docs=30)
    assert report.duplicates == 5
    assert [v.candidate.n for v in report.verdicts if v.candidate] == [30]


def test_one_event_id_with_two_records_is_a_mixed_run() -> None:
    first = list(release_run(one_type(0.45, 0.0, docs=30)))
    # The same ids, other documents: another run of the same harness.
    second = list(release_run(ReleaseRunConfig(types=(TypeTruth("invoice", 0.6, docs=30),))))
    with pytest.raises(GateDataError, match="appears twice with different mean drift"):
        run_gate(one_type(0.45, 0.0), first + second[:1], min_docs=2)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"candidate": "m" * 10_000}, "candidate"),
        ({"candidate": "a\x1bb"}, "candidate"),
        ({"candidate": NEW, "against": NEW}, "against"),
        ({"candidate": NEW, "max_mean": math.nan}, "max_mean"),
        ({"candidate": NEW, "max_mean": 1.5}, "max_mean"),
        ({"candidate": NEW, "min_docs": 1}, "min_docs"),
        ({"candidate": NEW, "margin": -0.1}, "margin"),
        ({"candidate": NEW, "max_mean": "0.72"}, "max_mean"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(config: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        GateConfig.model_validate(config)
    assert field in str(caught.value)


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        # Published two-sided 95% and 99% critical values of Student's t.
        (0.975, 1, 12.706204736),
        (0.975, 2, 4.302652730),
        (0.975, 5, 2.570581836),
        (0.975, 10, 2.228138852),
        (0.975, 30, 2.042272456),
        (0.975, 1000, 1.962339081),
        (0.995, 3, 5.840909310),
        (0.025, 10, -2.228138852),
        (0.975, 1e9, 1.959963985),
    ],
)
def test_t_quantile_matches_published_values(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-8)


@pytest.mark.parametrize("df", [1.0, 2.5, 7.3, 150.0, 2_000_000.0])
def test_t_quantile_inverts_the_distribution_function(df: float) -> None:
    for p in (0.6, 0.9, 0.975, 0.999):
        # lgamma of millions loses digits: about 1e-10 there, far below any figure shown.
        assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_cdf(0.0, df) == 0.5


def test_welch_interval_by_hand() -> None:
    a, b = Sample.of([1.0, 2.0, 3.0, 4.0]), Sample.of([2.0, 4.0, 6.0])
    interval = welch_interval(a, b)
    # se^2 = 1.6667/4 + 4/3; df by Welch-Satterthwaite.
    se_sq = (5 / 3) / 4 + 4 / 3
    df = se_sq**2 / (((5 / 3) / 4) ** 2 / 3 + (4 / 3) ** 2 / 2)
    half = t_quantile(0.975, df) * math.sqrt(se_sq)
    assert interval.difference == pytest.approx(-1.5)
    assert interval.df == pytest.approx(df)
    assert (interval.low, interval.high) == pytest.approx((-1.5 - half, -1.5 + half))
    assert 3.2 < df < 3.3  # unequal variances: fewer df than the pooled 5


def test_constant_samples_give_an_exact_difference() -> None:
    interval = welch_interval(Sample.of([0.5] * 3), Sample.of([0.25] * 4))
    assert (interval.low, interval.difference, interval.high) == (0.25, 0.25, 0.25)


@pytest.mark.parametrize("bad", [(0.0, 5.0), (1.0, 5.0), (0.5, 0.0), (0.9, -1.0)])
def test_t_quantile_refuses_what_has_no_answer(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        t_quantile(*bad)


def test_a_sample_needs_two_values() -> None:
    with pytest.raises(ValueError, match="at least 2 values, got 1"):
        Sample.of([0.5])
