"""The compose stack is secure by default (docs/security.md), checked without a Docker
engine: it publishes only the ingest port, Grafana and the local Slack and Jira pages, each
bound to a variable that defaults to 127.0.0.1; no credential has a literal default; Grafana
asks for a login with a generated password; the ingest service reads a token generated on
the first start. Each rule is checked on the files and shown to catch its breach."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tools import deploy_checks as dc


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = dc.compose()["services"]
    return found


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Target -> (source, options) of a service's volumes."""
    out = {}
    for volume in service.get("volumes") or []:
        source, target, *options = str(volume).split(":")
        out[target] = (source, ",".join(options))
    return out


def test_only_ingest_grafana_and_the_local_pages_are_published(
    services: dict[str, dict[str, Any]],
) -> None:
    published = {name for name, s in services.items() if dc.port_mappings(s)}
    assert published == {"ingest", "grafana", "local-slack", "local-jira"}
    assert dc.exposure_problems(dc.raw_compose(), default_file=True) == []
    # The alerting service's metrics (and silences API), Kafka, Flink, Prometheus and
    # Alertmanager: only with the override, and never on BIND_ADDRESS.
    (override,) = dc.COMPOSE_OVERRIDES
    assert dc.exposure_problems(dc.raw_compose(override), default_file=False) == []
    internals = dc.compose({"BIND_ADDRESS": "0.0.0.0"}, override)["services"]
    assert set(internals) == {"kafka", "jobmanager", "alerting", "prometheus", "alertmanager"}
    for name, service in internals.items():
        assert {p.host_ip for p in dc.port_mappings(service)} == {dc.LOOPBACK}, name


def test_each_published_port_follows_its_bind_variable() -> None:
    stack = dc.compose({"BIND_ADDRESS": "0.0.0.0"})["services"]
    assert {p.host_ip for s in stack.values() for p in dc.port_mappings(s)} == {"0.0.0.0"}
    # Gateways on other hosts reach the ingest port alone.
    stack = dc.compose({"INGEST_BIND_ADDRESS": "0.0.0.0"})["services"]
    hosts = {n: {p.host_ip for p in dc.port_mappings(s)} for n, s in stack.items()}
    assert hosts.pop("ingest") == {"0.0.0.0"}
    assert {h for v in hosts.values() for h in v} == {dc.LOOPBACK}


@pytest.mark.parametrize(
    ("service", "ports", "problem"),
    [
        ("ingest", ["8686:8686"], "binds to no variable"),
        ("ingest", ["0.0.0.0:8686:8686"], "binds to no variable"),
        ("ingest", ["127.0.0.1:8686:8686"], "binds to no variable"),
        ("ingest", ["${BIND_ADDRESS:-0.0.0.0}:8686:8686"], "binds to '0.0.0.0' by default"),
        ("ingest", [{"target": 8686, "published": 8686}], "binds to no variable"),
        ("prometheus", ["${BIND_ADDRESS:-127.0.0.1}:9090:9090"], "published by default"),
    ],
)
def test_the_exposure_check_catches_a_breach(service: str, ports: list[Any], problem: str) -> None:
    raw = copy.deepcopy(dc.raw_compose())
    raw["services"][service]["ports"] = ports
    problems = dc.exposure_problems(raw, default_file=True)
    assert any(problem in p for p in problems), problems


def test_no_credential_has_a_literal_default() -> None:
    for path in (dc.COMPOSE_FILE, *dc.COMPOSE_OVERRIDES):
        assert dc.secret_default_problems(dc.raw_compose(path)) == [], path.name
    raw = copy.deepcopy(dc.raw_compose())
    grafana = raw["services"]["grafana"]["environment"]
    grafana["GF_SECURITY_ADMIN_PASSWORD"] = "${GRAFANA_ADMIN_PASSWORD:-admin}"
    raw["services"]["ingest"]["environment"]["ANCHORWATCH_INGEST__AUTH_TOKEN"] = "s3cret"
    alerting = raw["services"]["alerting"]["environment"]
    alerting["ANCHORWATCH_JIRA__API_TOKEN"] = "${ANCHORWATCH_JIRA__API_TOKEN:-hunter2}"
    problems = dc.secret_default_problems(raw)
    assert problems == [
        "ingest: ANCHORWATCH_INGEST__AUTH_TOKEN is written into the file; take it from .env",
        "alerting: ANCHORWATCH_JIRA__API_TOKEN defaults to the literal 'hunter2'",
        "grafana: GF_SECURITY_ADMIN_PASSWORD defaults to the literal 'admin'",
    ]
    # Required without a default: Compose refuses to start without it, which is fine.
    grafana["GF_SECURITY_ADMIN_PASSWORD"] = "${GRAFANA_ADMIN_PASSWORD:?set it in .env}"
    assert not [p for p in dc.secret_default_problems(raw) if p.startswith("grafana")]
    # .env.example shows no password to copy either.
    assert "PASSWORD=" not in dc.ENV_EXAMPLE.read_text(encoding="utf-8")


def test_grafana_asks_for_a_login_with_the_generated_password(
    services: dict[str, dict[str, Any]],
) -> None:
    assert dc.grafana_problems(dc.compose()) == []
    env = dc.environment(services["grafana"])
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    password = Path(env["GF_SECURITY_ADMIN_PASSWORD__FILE"] or "")
    source, options = _mounts(services["grafana"])[str(password.parent)]
    assert (source, options) == ("grafana-secrets", "ro")
    assert _mounts(services["secrets-init"])["/secrets/grafana"][0] == "grafana-secrets"
    assert services["grafana"]["depends_on"]["secrets-init"] == {
        "condition": "service_completed_successfully"
    }
    # Anonymous viewers only when asked for.
    on = dc.compose({"GRAFANA_ANONYMOUS": "true"})
    assert dc.environment(on["services"]["grafana"])["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert any("anonymous access is 'true'" in p for p in dc.grafana_problems(on))


def test_ingest_reads_the_token_generated_on_the_first_start(
    services: dict[str, dict[str, Any]],
) -> None:
    env = dc.environment(services["ingest"])
    assert "ANCHORWATCH_INGEST__AUTH_TOKEN" not in env
    assert "ANCHORWATCH_INGEST__INSECURE_NO_AUTH" not in env
    token = Path(env["ANCHORWATCH_INGEST__AUTH_TOKEN_FILE"] or "")
    assert _mounts(services["ingest"])[str(token.parent)] == ("ingest-secrets", "ro")
    assert _mounts(services["secrets-init"])["/secrets/ingest"][0] == "ingest-secrets"
    assert services["ingest"]["depends_on"]["secrets-init"] == {
        "condition": "service_completed_successfully"
    }
    # The script writes each secret where its reader looks for it.
    script = dc.SECRETS_SCRIPT.read_text(encoding="utf-8")
    assert f'ingest-token) echo "$root/ingest/{token.name}"' in script
    password = dc.environment(services["grafana"])["GF_SECURITY_ADMIN_PASSWORD__FILE"] or ""
    assert f'grafana-admin-password) echo "$root/grafana/{Path(password).name}"' in script


def test_each_secret_volume_is_mounted_by_its_reader_alone(
    services: dict[str, dict[str, Any]],
) -> None:
    readers = {"ingest-secrets": {"ingest"}, "grafana-secrets": {"grafana"}}
    for volume, expected in readers.items():
        users = {
            name: options
            for name, service in services.items()
            for source, options in _mounts(service).values()
            if source == volume
        }
        assert set(users) == {"secrets-init", *expected}, volume
        assert all(users[r] == "ro" for r in expected), users


def test_secrets_init_runs_the_script_without_network_or_extra_capabilities(
    services: dict[str, dict[str, Any]],
) -> None:
    init = services["secrets-init"]
    script_dir, options = _mounts(init)["/opt/anchorwatch-secrets"]
    assert (dc.ROOT / script_dir / dc.SECRETS_SCRIPT.name).is_file()
    assert options == "ro"
    assert init["entrypoint"] == ["sh", f"/opt/anchorwatch-secrets/{dc.SECRETS_SCRIPT.name}"]
    # The image's CMD (--help) would reach the script: the command is explicit.
    assert init["command"] == ["init"]
    assert init["network_mode"] == "none"
    assert init["read_only"] is True
    assert init["cap_drop"] == ["ALL"]
    assert set(init["cap_add"]) <= {"CHOWN", "FOWNER", "DAC_OVERRIDE"}
