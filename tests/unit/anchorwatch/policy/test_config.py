"""The policy configuration: defaults, validation naming the field, TOML and environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from anchorwatch.jobs.baseline_settings import BaselineSettings
from anchorwatch.policy.config import PolicyConfig, PolicyConfigError, RuleConfig
from anchorwatch.policy.window import StaticRule
from anchorwatch.settings import SettingsError


def test_defaults_are_one_baseline_rule_with_the_sources_static_fallback() -> None:
    policy = PolicyConfig()
    assert [r.name for r in policy.rules] == ["drift"]
    assert policy.rule("drift").compare == "baseline"
    assert policy.fallback == StaticRule(0.85, 0.9, 6)
    with pytest.raises(KeyError):
        policy.rule("nope")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"rules": [{"name": "a", "open_after": 0}]}, "policy.rules[0].open_after"),
        ({"rules": [{"name": "a"}, {"name": "a"}]}, "policy.rules"),
        ({"rules": [{"name": "bad name"}]}, "policy.rules[0].name"),
        ({"rules": []}, "policy.rules"),
        ({"sensitivity": 5, "critical_sensitivity": 4}, "policy.critical_sensitivity"),
        ({"min_margin": 0.3, "critical_min_margin": 0.2}, "policy.critical_min_margin"),
        ({"seasonality": "weekly"}, "policy.seasonality"),
        ({"rules": [{"name": "s", "compare": "static"}]}, "policy.rules[0].pooling"),
        (
            {"rules": [{"name": "a", "open_after": 2, "open_after_critical": 3}]},
            "policy.rules[0].open_after_critical",
        ),
        (
            {"rules": [{"name": "a", "static": {"threshold": 0.9, "critical_threshold": 0.8}}]},
            "policy.rules[0].static.critical_threshold",
        ),
        ({"pooling_threshold": -1}, "policy.pooling_threshold"),
        ({"sensitivty": 3}, "policy.sensitivty"),
    ],
)
def test_errors_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(PolicyConfigError) as info:
        PolicyConfig.from_mapping(data)
    assert f"  {field}: " in str(info.value)


def test_the_policy_section_loads_from_toml_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "anchorwatch.toml"
    config.write_text(
        """
[job]
window_size_s = 30

[policy]
version = "p7"
sensitivity = 5.0
seasonality = "off"

[[policy.rules]]
name = "drift"
open_after = 3

[[policy.rules]]
name = "sustained_high"
compare = "static"
pooling = false
open_after = 3
open_after_critical = 3
static = { threshold = 0.9, critical_threshold = 0.9, min_requests = 1 }
""",
        encoding="utf-8",
    )
    monkeypatch.setenv("ANCHORWATCH_POLICY__MIN_MARGIN", "0.08")
    settings = BaselineSettings.load(config)
    p = settings.policy
    assert (p.version, p.sensitivity, p.min_margin, p.seasonality) == ("p7", 5.0, 0.08, "off")
    assert p.rule("drift").open_after == 3
    assert p.rule("sustained_high").static.rule() == StaticRule(0.9, 0.9, 1)
    assert settings.job.window_size_s == 30

    monkeypatch.setenv("ANCHORWATCH_POLICY__SENSITIVITY", "-1")
    with pytest.raises(SettingsError) as info:
        BaselineSettings.load(config)
    assert "ANCHORWATCH_POLICY__SENSITIVITY" in str(info.value)


def test_rules_from_the_environment_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ANCHORWATCH_POLICY__RULES", '[{"name": "drift", "resolve_after": 5, "pooling": false}]'
    )
    rule = BaselineSettings.load().policy.rule("drift")
    assert rule == RuleConfig(name="drift", resolve_after=5, pooling=False)


def test_open_after_critical_follows_a_smaller_open_after_unless_set() -> None:
    assert RuleConfig(name="a").open_after_critical == 2
    assert RuleConfig(name="a", open_after=1).open_after_critical == 1
    with pytest.raises(ValueError, match="open_after_critical"):
        RuleConfig(name="a", open_after=1, open_after_critical=2)
