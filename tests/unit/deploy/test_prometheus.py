"""Prometheus configuration, alert rules and the Grafana dashboard: promtool validates the
configuration and runs the rules' unit tests, every query parses, every metric a rule or a
panel uses is one the code (or Flink) exports, and the provisioning points at what the
compose file mounts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import deploy_checks as dc


def promtool() -> str:
    found = dc.promtool()
    if found is None:
        pytest.fail(dc.PROMTOOL_MISSING)
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, cwd=dc.ROOT)


def test_prometheus_config_and_rules_are_valid() -> None:
    result = run(promtool(), "check", "config", str(dc.PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr
    rules = sorted(dc.RULES_DIR.glob("*.yml"))
    result = run(promtool(), "check", "rules", *map(str, rules))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass() -> None:
    tests = sorted(dc.RULE_TESTS_DIR.glob("*.yml"))
    assert tests
    result = run(promtool(), "test", "rules", *map(str, tests))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_fail_when_the_rule_changes(tmp_path: Path) -> None:
    """The tests pin the source's rule: a lower threshold or a shorter `for` fails them."""
    promtool()
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    rules = (dc.RULES_DIR / "anchorwatch.yml").read_text(encoding="utf-8")
    test = (dc.RULE_TESTS_DIR / "anchorwatch_test.yml").read_text(encoding="utf-8")
    (tmp_path / "tests" / "anchorwatch_test.yml").write_text(test, encoding="utf-8")
    for old, new in (("> 0.9\n", ">= 0.9\n"), ("for: 3m", "for: 2m")):
        assert old in rules
        (tmp_path / "rules" / "anchorwatch.yml").write_text(rules.replace(old, new, 1))
        result = run(promtool(), "test", "rules", str(tmp_path / "tests" / "anchorwatch_test.yml"))
        assert result.returncode != 0, f"the tests still pass with {new!r}"


def test_every_rule_is_unit_tested() -> None:
    tested = set(
        re.findall(r"alertname: (\w+)", (dc.RULE_TESTS_DIR / "anchorwatch_test.yml").read_text())
    )
    alerts = {name for name, _ in dc.rule_expressions()}
    assert alerts - tested == set(), f"rules without a test: {sorted(alerts - tested)}"


def test_the_source_rule_is_drift_above_0_9_for_3_minutes() -> None:
    rules = yaml.safe_load((dc.RULES_DIR / "anchorwatch.yml").read_text(encoding="utf-8"))
    rule = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "AnchorDriftHigh"
    )
    assert rule["for"] == "3m"
    assert rule["expr"].strip().endswith("anchorwatch_alerting_window_mean_drift) > 0.9")


def test_every_metric_in_rules_and_dashboard_is_exported() -> None:
    exported = dc.exported_metric_names() | dc.FLINK_METRICS | {"up", "ALERTS"}
    pending = {m for m in dc.PENDING_ALERTING_METRICS if m not in exported}
    used: dict[str, str] = {}
    for name, expr in dc.rule_expressions():
        used.update(dict.fromkeys(dc.promql_metric_names(expr), f"rule {name}"))
    for title, expr in dc.dashboard_queries():
        used.update(dict.fromkeys(dc.promql_metric_names(expr), f"panel {title!r}"))
    unknown = sorted(f"{where}: {m}" for m, where in used.items() if m not in exported | pending)
    assert not unknown, "metrics nothing exports:\n" + "\n".join(unknown)
    # The pending names are only tolerated while they are really missing, and used.
    assert pending <= set(used)


def test_metric_name_extraction_ignores_label_values() -> None:
    expr = 'sum(rate(flink_x_numRecordsOut{operator_name=~"Source:_snapshots_[0-9]+_"}[1m]))'
    assert dc.promql_metric_names(expr) == {"flink_x_numRecordsOut"}


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    promtool()
    queries = dc.dashboard_queries()
    assert len(queries) >= 15
    result = dc.check_promql([q for _, q in queries], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = dc.check_promql(["sum(rate(anchorwatch_x[1m])"], tmp_path)
    assert broken.returncode != 0


def test_dashboard_layout() -> None:
    board = dc.dashboard()
    assert board["uid"] == "anchorwatch"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0, panel["title"]
        assert g["x"] + g["w"] <= 24, f"{panel['title']} leaves the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
    for panel in dc.dashboard_panels(board):
        assert panel.get("targets"), f"{panel['title']} has no query"
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel.get("description"), f"{panel['title']} says nothing about what it shows"


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    queries = " ".join(q for _, q in dc.dashboard_queries())
    for needed in (
        "anchorwatch_alerting_window_mean_drift",  # drift mean per doc type
        "anchorwatch_alerting_window_p95_drift",  # p95
        "anchorwatch_alerting_threshold",  # against the threshold
        "anchorwatch_alerting_window_requests_total",  # request rate
        "anchorwatch_alerting_incidents_open",  # open incidents
        "anchorwatch_alerting_window_quality_share",  # data-quality shares
        "anchorwatch_ingest_records_total",  # throughput
        "KafkaConsumer_records_lag_max",  # lag
    ):
        assert needed in queries, needed
    variables = {v["name"]: v for v in dc.dashboard()["templating"]["list"]}
    assert variables["doc_type"]["multi"]
    assert variables["doc_type"]["includeAll"]


def provisioning(kind: str) -> dict[str, Any]:
    files = sorted((dc.GRAFANA_DIR / "provisioning" / kind).glob("*.yml"))
    assert len(files) == 1
    data = yaml.safe_load(files[0].read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_grafana_provisioning_matches_the_compose_mounts() -> None:
    grafana = dc.compose()["services"]["grafana"]
    mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in grafana["volumes"]}
    provider = provisioning("dashboards")["providers"][0]
    dashboards_dir = provider["options"]["path"]
    assert mounts[dashboards_dir] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    home = dc.environment(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] or ""
    assert home == f"{dashboards_dir}/{dc.DASHBOARD.name}"
    source = provisioning("datasources")["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    default = next(v for v in dc.dashboard()["templating"]["list"] if v["name"] == "datasource")
    assert default["current"]["value"] == source["uid"]
    prometheus = dc.compose()["services"]["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
