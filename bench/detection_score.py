"""Detection bench, its scoring of the generator-based scenarios: the policies compared
(``Variant``: the static global rule, per-type baselines), their replay over each scenario
and clean week (``evaluate``, into a ``Result`` with precision, recall, delays and false
alarms), the calibration of the simulated week against the generator, and ``q``, the
quantile the tables use. The scenarios come from bench/detection_data.py.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from anchorwatch.backtest import Score, alerts, backtest, score
from anchorwatch.contracts import Baseline, WindowAggregate
from anchorwatch.policy.config import PolicyConfig, RuleConfig, StaticRuleConfig
from anchorwatch.policy.fitting import fit_baselines
from anchorwatch.policy.incidents import IncidentTracker
from bench.detection_data import MINUTE_MS, Scenario, tier


@dataclass(frozen=True)
class Variant:
    name: str
    policy: PolicyConfig
    per_type: bool  # fits baselines (else the rule ignores them)


def variants() -> list[Variant]:
    source = RuleConfig(
        name="static",
        compare="static",
        pooling=False,
        open_after=1,
        open_after_critical=1,
        resolve_after=1,
    )
    return [
        Variant(
            "static global rule (source: mean > 0.85, n > 5)", PolicyConfig(rules=(source,)), False
        ),
        Variant(
            "per-type baselines, no pooling",
            PolicyConfig(rules=(RuleConfig(name="drift", pooling=False),)),
            True,
        ),
        Variant("per-type baselines (default policy)", PolicyConfig(), True),
    ]


def global_variant(threshold: float) -> Variant:
    rule = RuleConfig(
        name="static",
        compare="static",
        pooling=False,
        static=StaticRuleConfig(
            threshold=threshold, critical_threshold=max(threshold, 0.9), min_requests=6
        ),
    )
    return Variant(
        f"static global rule, best threshold ({threshold:.2f}, same hysteresis)",
        PolicyConfig(rules=(rule,)),
        False,
    )


@dataclass
class Result:
    variant: Variant
    seeds: list[int]
    scores: list[Score]
    tiers: dict[tuple[int, str], str]
    week_alarms: dict[str, int]  # "seed/type" -> false alarms in the clean week
    week_days: int

    def _all(self, attr: str) -> list[object]:
        return [x for s in self.scores for x in getattr(s, attr)]

    @property
    def precision(self) -> float:
        t, f = len(self._all("true_alerts")), len(self._all("false_alerts"))
        return t / (t + f) if t + f else 1.0

    def recall(self, kind: str | None = None, only_tier: str | None = None) -> float:
        labels, found = 0, 0
        for seed, s in zip(self.seeds, self.scores, strict=True):
            for lab in s.labels:
                if kind in (None, lab.kind) and only_tier in (
                    None,
                    self.tiers[(seed, lab.doc_type)],
                ):
                    labels += 1
            for d in s.detections:
                lab = d.label
                if kind in (None, lab.kind) and only_tier in (
                    None,
                    self.tiers[(seed, lab.doc_type)],
                ):
                    found += 1
        return found / labels if labels else math.nan

    def delays(self, kind: str | None = None) -> list[int]:
        return sorted(d for s in self.scores for d in s.delays(kind))

    @property
    def fa_per_type_day(self) -> float:
        days = sum(s.type_days for s in self.scores)
        return len(self._all("false_alerts")) / days if days else 0.0

    @property
    def fa_per_type_week(self) -> float:
        return statistics.fmean(self.week_alarms.values()) * 7 / self.week_days

    @property
    def fa_worst_type_week(self) -> float:
        return max(self.week_alarms.values()) * 7 / self.week_days


def evaluate(
    variant: Variant,
    prepared: Sequence[tuple[Scenario, dict[str, list[WindowAggregate]]]],
    week_days: int,
    *,
    with_week: bool = True,
) -> Result:
    scores = []
    alarms: dict[str, int] = {}
    for scenario, week in prepared:
        result = backtest(scenario.windows, variant.policy, fit_until_ms=scenario.fit_until_ms)
        scores.append(
            score(
                result.changes,
                scenario.labels,
                replay_start_ms=result.replay_start_ms,
                replay_end_ms=result.replay_end_ms,
                doc_types=len(scenario.profiles),
            )
        )
        if not with_week:
            continue
        baselines: dict[str, Baseline] = result.baselines if variant.per_type else {}
        for doc_type, windows in week.items():
            tracker = IncidentTracker(variant.policy, baselines)
            alarms[f"{scenario.seed}/{doc_type}"] = len(alerts(tracker.replay(windows)))
    tiers = {(sc.seed, p.name): tier(p) for sc, _ in prepared for p in sc.profiles}
    return Result(variant, [sc.seed for sc, _ in prepared], scores, tiers, alarms, week_days)


def calibration(
    prepared: Sequence[tuple[Scenario, dict[str, list[WindowAggregate]]]],
) -> tuple[float, float, float]:
    """How far fits on the simulated week stray from fits on the generator's own clean
    history of the same types, in standard errors of the generator-side estimate: the worst
    type's center and per-request spread, and the mean spread ratio (1 = no bias)."""
    policy = PolicyConfig()
    worst_center = worst_spread = 0.0
    ratios = []
    for scenario, week in prepared:
        # Only windows no label touches: the simulated week is clean.
        touched = {
            (lab.doc_type, start)
            for lab in scenario.labels
            for start in range(lab.start_ms, lab.end_ms, MINUTE_MS)
        }
        prefix = [
            w
            for w in scenario.windows
            if w.window_end_ms <= scenario.fit_until_ms
            and (w.doc_type, w.window_start_ms) not in touched
        ]
        gen = fit_baselines(prefix, policy, fitted_at_ms=scenario.fit_until_ms)
        sim = fit_baselines(
            [w for ws in week.values() for w in ws], policy, fitted_at_ms=scenario.fit_until_ms
        )
        for doc_type, g in gen.items():
            a, b = g.baseline, sim[doc_type].baseline
            n = a.window_count
            # Standard errors of a median (1.2533 sd / sqrt n) and of a MAD-based sigma
            # (1.167 sigma / sqrt n) for normal data.
            worst_center = max(
                worst_center, abs(a.center - b.center) / (1.2533 * a.spread / math.sqrt(n))
            )
            ratio = (a.spread * math.sqrt(a.typical_request_count)) / (
                b.spread * math.sqrt(b.typical_request_count)
            )
            ratios.append(ratio)
            worst_spread = max(worst_spread, abs(ratio - 1) / (1.167 / math.sqrt(n)))
    return worst_center, worst_spread, statistics.fmean(ratios)


def q(values: list[int], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = p * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
