"""Each rule's breach level of a verdict's window: a static rule judges the window by its
own figures, whatever the drift job's verdict (judged against a baseline) says."""

from __future__ import annotations

from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.static_rule import BreachLevels
from anchorwatch.policy.window import StaticRule, judge_window, verdict_for
from tests.support.policy import window

POLICY = PolicyConfig.from_mapping(
    {
        "rules": [
            {"name": "drift"},
            {
                "name": "sustained",
                "compare": "static",
                "static": {"threshold": 0.9, "critical_threshold": 0.95, "min_requests": 1},
                "pooling": False,
            },
        ]
    }
)


def test_a_static_rule_judges_the_window_by_its_own_figures() -> None:
    # The job judged 0.92 clean (a lenient rule standing in for a baseline's threshold).
    verdict = verdict_for(
        window(0.92, 50), judge_window(window(0.92, 50), None, StaticRule(0.99, 0.995)), "j"
    )
    assert verdict.breach_level == "none"
    levels = BreachLevels(POLICY)
    assert levels.of("sustained", verdict) == "warning"
    assert levels.of("drift", verdict) == "none"  # a baseline rule goes by the verdict


def test_other_rules_and_unknown_ones_take_the_verdicts_level() -> None:
    verdict = verdict_for(window(0.97, 50), judge_window(window(0.97, 50), None), "j")
    levels = BreachLevels(POLICY)
    assert levels.of("sustained", verdict) == "critical"
    assert levels.of("drift", verdict) == verdict.breach_level == "critical"
    assert levels.of("a rule of an older policy", verdict) == "critical"
