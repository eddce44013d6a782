"""Alertmanager (deploy/alertmanager/): amtool validates the configuration and shows where
each alert of the Prometheus rules goes, the compose service and Prometheus point at each
other, the Slack webhook URL is a secret file and never written into a file of the
repository but the local Slack's, and a real Alertmanager (Debian's
prometheus-alertmanager) posts a rule's alert to the local Slack's incoming webhook.

amtool is Debian bookworm's (0.25); the compose image runs a newer release (0.28). The
configuration uses nothing either lacks (matchers, api_url_file, inhibit_rules' matchers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.stack.processes import free_port
from tests.support.waiting import wait_until
from tools import deploy_checks as dc

SEVERITIES = {"critical": "slack-critical", "warning": "slack-warning"}
SECRET = "slack_webhook_url"


def amtool() -> str:
    found = dc.amtool()
    if found is None:
        pytest.fail(dc.AMTOOL_MISSING)
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, cwd=dc.ROOT)


def config() -> dict[str, Any]:
    data = yaml.safe_load(dc.ALERTMANAGER_CONFIG.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def routed_to(labels: dict[str, str], config_file: Path = dc.ALERTMANAGER_CONFIG) -> str:
    """The receiver(s) amtool routes a label set to, as it prints them."""
    pairs = [f"{k}={v}" for k, v in sorted(labels.items())]
    result = run(amtool(), "config", "routes", "test", f"--config.file={config_file}", *pairs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def rule_labels(rule: dict[str, Any]) -> dict[str, str]:
    """An alert's labels as the rule sets them (a templated value gets a sample one)."""
    labels = {k: ("ingest" if "{{" in str(v) else str(v)) for k, v in rule["labels"].items()}
    return {"alertname": rule["alert"], **labels}


def test_config_is_valid() -> None:
    result = run(amtool(), "check-config", str(dc.ALERTMANAGER_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 templates" in result.stdout, result.stdout


def test_check_config_rejects_a_broken_config(tmp_path: Path) -> None:
    text = dc.ALERTMANAGER_CONFIG.read_text(encoding="utf-8")
    assert "receiver: slack-critical" in text
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(text.replace("receiver: slack-critical", "receiver: slack-critcal", 1))
    result = run(amtool(), "check-config", str(broken))
    assert result.returncode != 0, result.stdout


def test_critical_alerts_route_to_slack() -> None:
    assert routed_to({"alertname": "AnchorDriftHigh", "severity": "critical"}) == "slack-critical"
    assert routed_to({"alertname": "X", "severity": "warning"}) == "slack-warning"
    # A label set no route knows still reaches Slack, through the root route.
    assert routed_to({"alertname": "X", "severity": "info"}) == "slack-warning"
    assert routed_to({"alertname": "X"}) == "slack-warning"


def test_every_rule_has_labels_the_route_tree_handles() -> None:
    cfg = config()
    route = cfg["route"]
    assert route["group_by"] == ["alertname", "service"]
    children = {tuple(r["matchers"]): r["receiver"] for r in route["routes"]}
    assert children == {(f'severity="{s}"',): r for s, r in SEVERITIES.items()}
    rules = list(dc.alert_rules())
    assert len(rules) >= 13
    for rule in rules:
        labels = rule_labels(rule)
        assert labels.get("severity") in SEVERITIES, f"{rule['alert']}: severity {labels}"
        assert labels.get("service"), f"{rule['alert']}: no service label to group by"
        expected = SEVERITIES[labels["severity"]]
        assert routed_to(labels) == expected, f"{rule['alert']} does not reach {expected}"


def test_timings_and_inhibition() -> None:
    cfg = config()
    critical, warning = cfg["route"]["routes"]
    assert (critical["group_wait"], critical["repeat_interval"]) == ("10s", "1h")
    assert (warning["group_wait"], warning["repeat_interval"]) == ("1m", "12h")
    assert cfg["inhibit_rules"] == [
        {
            "source_matchers": ['severity="critical"'],
            "target_matchers": ['severity="warning"'],
            "equal": ["alertname", "service"],
        }
    ]


def test_slack_receivers_read_the_webhook_url_from_the_secret() -> None:
    cfg = config()
    assert not {"slack_api_url", "slack_api_url_file"} & set(cfg.get("global") or {})
    receivers = {r["name"]: r for r in cfg["receivers"]}
    assert set(receivers) == set(SEVERITIES.values())
    for name, receiver in receivers.items():
        assert set(receiver) == {"name", "slack_configs"}, name
        for slack in receiver["slack_configs"]:
            assert "api_url" not in slack, f"{name}: the webhook URL is written inline"
            assert slack["api_url_file"] == f"/run/secrets/{SECRET}", name
            assert slack["send_resolved"] is True, name
    assert "hooks.slack.com" not in dc.ALERTMANAGER_CONFIG.read_text(encoding="utf-8")


def test_compose_runs_it_with_the_config_the_secret_and_a_volume(slack: LocalSlack) -> None:
    stack = dc.compose()
    service = stack["services"]["alertmanager"]
    assert service["image"].startswith("prom/alertmanager:v")
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in service["command"]
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in service["volumes"]
    assert "--storage.path=/alertmanager" in service["command"]
    assert "alertmanager-data:/alertmanager" in service["volumes"]
    # Published only with deploy/compose/publish-internals.yml: anyone could silence alerts.
    assert dc.port_mappings(service) == []
    published = dc.with_overrides()["services"]["alertmanager"]
    assert [p.target for p in dc.port_mappings(published)] == [9093]
    assert "localhost:9093/-/ready" in json.dumps(service["healthcheck"]["test"])
    prometheus = yaml.safe_load((dc.PROMETHEUS_DIR / "prometheus.yml").read_text())
    targets = [
        t
        for am in prometheus["alerting"]["alertmanagers"]
        for c in am["static_configs"]
        for t in c["targets"]
    ]
    assert targets == ["alertmanager:9093"]
    # The secret: by default the local Slack's incoming webhook, a file of the repository.
    assert service["secrets"] == [SECRET]
    default = dc.ROOT / stack["secrets"][SECRET]["file"]
    url = urlsplit(default.read_text(encoding="utf-8").strip())
    local_slack = stack["services"]["local-slack"]["command"]
    assert (url.scheme, url.hostname) == ("http", "local-slack")
    assert str(url.port) == local_slack[local_slack.index("--port") + 1]
    assert url.path == urlsplit(slack.webhook_url).path  # the path the local Slack answers
    # Your own: a file named in .env, never the URL itself.
    own = dc.compose({"ALERTMANAGER_SLACK_WEBHOOK_URL_FILE": "./secrets/slack_webhook_url"})
    assert own["secrets"][SECRET] == {"file": "./secrets/slack_webhook_url"}


# ------------------------------------------------------------- a real Alertmanager


def utc() -> str:
    """Now, as the Alertmanager API takes a time."""
    return datetime.now(UTC).isoformat()


@pytest.fixture
def alertmanager(tmp_path: Path, slack: LocalSlack) -> Iterator[str]:
    """Alertmanager on a free port with deploy/alertmanager/ as it is, but the webhook URL
    file pointing at the in-process local Slack and every route's group_wait and
    group_interval at 1s (the receivers, matchers and inhibition untouched)."""
    binary = dc.alertmanager_binary()
    if binary is None:
        pytest.fail(dc.AMTOOL_MISSING)
    conf_dir = tmp_path / "alertmanager"
    shutil.copytree(dc.ALERTMANAGER_DIR, conf_dir)
    secret = tmp_path / SECRET
    secret.write_text(slack.webhook_url + "\n", encoding="utf-8")
    cfg = config()
    routes = [cfg["route"], *cfg["route"]["routes"]]
    for route in routes:
        route.update(group_wait="1s", group_interval="1s")
    for receiver in cfg["receivers"]:
        for slack_config in receiver["slack_configs"]:
            slack_config["api_url_file"] = str(secret)
    (conf_dir / "alertmanager.yml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    port = free_port()
    log = tmp_path / "alertmanager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={conf_dir / 'alertmanager.yml'}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ready(url) or process.poll() is not None, 10, "Alertmanager ready")
        assert process.poll() is None, log.read_text(encoding="utf-8")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


def post_alerts(url: str, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(  # noqa: S310
        f"{url}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        assert response.status == 200


def attachments(slack: LocalSlack) -> dict[str, str]:
    """Title -> text of every attachment the local Slack accepted."""
    with slack.lock:
        messages = list(slack.messages)
    found = [a for m in messages for a in m["params"].get("attachments", [])]
    return {a.get("title", ""): a.get("text", "") for a in found}


def titles(slack: LocalSlack) -> list[str]:
    return list(attachments(slack))


def test_a_critical_rule_reaches_the_local_slack_and_resolves(
    alertmanager: str, slack: LocalSlack
) -> None:
    rule = next(r for r in dc.alert_rules() if r["alert"] == "AnchorwatchDriftJobNotRunning")
    labels = rule_labels(rule)
    assert labels["severity"] == "critical"
    service = labels["service"]
    critical: dict[str, Any] = {
        "labels": labels,
        "annotations": {k: str(v) for k, v in rule["annotations"].items()},
        "startsAt": utc(),
    }
    # A warning of the same alert name and service (inhibited) and one of another name.
    inhibited = {"labels": {**labels, "severity": "warning"}}
    other = {"labels": {"alertname": "AnchorwatchOutboxBacklog", "severity": "warning",
                        "service": service}}  # fmt: skip
    post_alerts(alertmanager, [critical, inhibited, other])
    firing = f"[FIRING:1] AnchorwatchDriftJobNotRunning ({service}, critical)"
    warning = f"[FIRING:1] AnchorwatchOutboxBacklog ({service}, warning)"
    wait_until(
        lambda: {firing, warning} <= set(titles(slack)),
        15,
        "Alertmanager's webhooks at the local Slack",
    )
    assert not [t for t in titles(slack) if "AnchorwatchDriftJobNotRunning" in t and "warning" in t]
    with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts", timeout=5) as response:  # noqa: S310
        states = {
            a["labels"]["severity"] + "/" + a["labels"]["alertname"]: a["status"]
            for a in json.load(response)
        }
    assert states["warning/AnchorwatchDriftJobNotRunning"]["inhibitedBy"], states
    assert f"*{rule['annotations']['summary']}*" in attachments(slack)[firing]
    # Resolved: the critical alert ends, Slack hears it (send_resolved).
    post_alerts(alertmanager, [{**critical, "endsAt": utc()}])
    wait_until(
        lambda: f"[RESOLVED] AnchorwatchDriftJobNotRunning ({service}, critical)" in titles(slack),
        15,
        "the resolved notification",
    )
