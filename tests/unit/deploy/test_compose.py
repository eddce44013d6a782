"""docker-compose.yml, checked without a Docker engine: it parses and validates against the
Compose Specification's schema, every service's variables are settings the code reads,
every image and build context exists, ports are unique, and start order, volumes and
secrets are wired as docs/deploy.md describes. What it publishes and the secrets it must
not hold: test_compose_exposure.py."""

from __future__ import annotations

import json
import os
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.cli import cli
from anchorwatch.connectors.settings import IngestSettings
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.settings import ServiceSettings, describe_fields
from tools import deploy_checks as dc

# The settings object each anchorwatch process in the stack loads.
SERVICE_SETTINGS: dict[str, type[ServiceSettings]] = {
    "kafka-init": ServiceSettings,  # docker/init_topics.py
    "job-submitter": JobSettings,  # anchorwatch job submit
    "ingest": IngestSettings,  # anchorwatch ingest serve
    "alerting": AlertingSettings,  # anchorwatch alerting serve
}
# Variables of other programs, and who reads them.
FOREIGN_VARIABLES: dict[str, re.Pattern[str]] = {
    # apache/kafka: KAFKA_* become server.properties; CLUSTER_ID formats the storage.
    "kafka": re.compile(r"^(KAFKA_[A-Z0-9_]+|CLUSTER_ID)$"),
    # The official Flink image's entrypoint.
    "jobmanager": re.compile(r"^FLINK_PROPERTIES$"),
    "taskmanager": re.compile(r"^FLINK_PROPERTIES$"),
    # docker/submit-job.sh (checked below to read each of them).
    "job-submitter": re.compile(r"^(JOBMANAGER|RESUME_FROM_CHECKPOINT|CHECKPOINT_ROOT)$"),
    "grafana": re.compile(r"^GF_[A-Z0-9_]+$"),
}
LOCAL_IMAGES = {"anchorwatch", "anchorwatch-flink"}
PYPROJECT = tomllib.loads((dc.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The repository's own pom, not untrusted input.
POM = ET.parse(dc.ROOT / "anchorwatch" / "stack" / "pom.xml").getroot()  # noqa: S314
MAVEN_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return dc.compose()


@pytest.fixture(scope="module")
def services(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = stack["services"]
    return found


def pom_property(name: str, pom: ET.Element = POM) -> str:
    element = pom.find(f"m:properties/m:{name}", MAVEN_NS)
    assert element is not None
    assert element.text
    return element.text


def settings_variables(cls: type[ServiceSettings]) -> set[str]:
    return {env for env, _ in describe_fields(cls)}


def test_compose_file_validates_against_the_compose_specification() -> None:
    schema = json.loads(dc.COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema)
    # As written (what `docker compose config` reads) and after interpolation with the
    # defaults and with every documented override (what it runs).
    overrides = [
        (f"{path.name} {label}", document)
        for path in dc.COMPOSE_OVERRIDES
        for label, document in (("as written", dc.raw_compose(path)), ("", dc.compose({}, path)))
    ]
    for label, document in (
        ("as written", dc.raw_compose()),
        ("defaults", dc.compose()),
        (".env.example", dc.compose(example_env())),
        ("with the overrides", dc.with_overrides(example_env())),
        *overrides,
    ):
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
        assert not errors, f"{label}: " + "; ".join(
            f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]
        )


def test_the_schema_check_rejects_what_compose_rejects() -> None:
    schema = json.loads(dc.COMPOSE_SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    broken = dc.compose()
    broken["services"]["ingest"]["depends_on"]["kafka-init"]["condition"] = "service_ready"
    broken["services"]["kafka"]["restart"] = ["always"]
    broken["volumes"]["kafka-data"] = {"drivr": "local"}
    messages = [e.message for e in validator.iter_errors(broken)]
    assert len(messages) >= 3, messages


def example_env() -> dict[str, str]:
    """Every assignment in .env.example, uncommented (the overrides it documents). Where a
    variable is shown twice (Slack bot or webhook) the first wins."""
    env: dict[str, str] = {}
    for line in dc.ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$", line)
        if match:
            env.setdefault(match.group(1), match.group(2))
    return env


def test_every_anchorwatch_variable_is_a_setting_that_service_reads(
    services: dict[str, dict[str, Any]],
) -> None:
    problems = []
    for name, service in services.items():
        env = dc.environment(service)
        ours = {k for k in env if k.startswith("ANCHORWATCH_")}
        if name in SERVICE_SETTINGS:
            unknown = ours - settings_variables(SERVICE_SETTINGS[name])
            problems += [f"{name}: {k} is not a setting of {SERVICE_SETTINGS[name].__name__}"
                         for k in sorted(unknown)]  # fmt: skip
        elif ours:
            problems.append(f"{name}: sets {sorted(ours)} but runs no anchorwatch settings")
        foreign = FOREIGN_VARIABLES.get(name)
        for key in sorted(set(env) - ours):
            if foreign is None or not foreign.match(key):
                problems.append(f"{name}: {key} is read by nothing known to this test")
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_misspelt_setting(services: dict[str, dict[str, Any]]) -> None:
    known = settings_variables(AlertingSettings)
    assert "ANCHORWATCH_ALERTING__METRICS_PORT" in known
    assert "ANCHORWATCH_ALERTING__METRIC_PORT" not in known
    # A setting of another service is not one this service reads.
    assert "ANCHORWATCH_INGEST__PORT" not in known


def test_compose_variables_are_listed_by_anchorwatch_settings(
    services: dict[str, dict[str, Any]],
) -> None:
    """`anchorwatch settings` (the documented list of every setting) knows them all."""
    result = CliRunner().invoke(cli, ["settings"])
    assert result.exit_code == 0, result.output
    listed = set(re.findall(r"^(ANCHORWATCH_[A-Z0-9_]+)$", result.output, re.MULTILINE))
    used = {k for s in services.values() for k in dc.environment(s) if k.startswith("ANCHORWATCH_")}
    missing = sorted(used - listed)
    assert not missing, (
        f"set in docker-compose.yml but not printed by `anchorwatch settings`: {missing} "
        "(is the service's settings class in anchorwatch.cli.settings_cmd.all_settings()?)"
    )


def test_submitter_reads_the_variables_it_is_given(services: dict[str, dict[str, Any]]) -> None:
    script = (dc.ROOT / "docker" / "submit-job.sh").read_text(encoding="utf-8")
    for key in dc.environment(services["job-submitter"]):
        if not key.startswith("ANCHORWATCH_"):
            assert f"${{{key}" in script, f"docker/submit-job.sh does not read {key}"


def test_every_image_is_pinned_and_every_build_context_exists() -> None:
    services = dc.raw_compose()["services"]
    built: dict[str, Path] = {}
    for name, service in services.items():
        if "build" in service:
            build = service["build"]
            context = dc.ROOT / build["context"]
            assert context.is_dir(), f"{name}: build context {context} does not exist"
            dockerfile = context / build["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
            # One image name, one Dockerfile.
            assert built.setdefault(service["image"], dockerfile) == dockerfile, name
    for name, service in dc.compose()["services"].items():
        image = service.get("image")
        assert image, f"{name}: no image"
        repository, _, tag = image.rpartition(":")
        assert repository, f"{name}: {image} names no repository"
        assert re.fullmatch(r"v?\d+(\.\d+)+", tag), f"{name}: {image} is not an exact version"
        if repository in LOCAL_IMAGES:
            # Compose would try to pull an image a service does not build itself.
            assert "build" in services[name], f"{name}: {image} is not built by this service"
            assert built[services[name]["image"]] == dockerfile_of(services[name])


def dockerfile_of(service: dict[str, Any]) -> Path:
    build = service["build"]
    return dc.ROOT / str(build["context"]) / str(build["dockerfile"])


def test_images_match_the_pinned_versions() -> None:
    services = dc.compose()["services"]
    assert services["kafka"]["image"] == f"apache/kafka:{pom_property('kafka.version')}"
    flink_pin = next(
        d for d in PYPROJECT["project"]["dependencies"] if d.startswith("apache-flink")
    )
    flink_version = flink_pin.split("==")[1]
    dockerfile = (dc.ROOT / "docker" / "flink.Dockerfile").read_text(encoding="utf-8")
    assert f"ARG FLINK_IMAGE=flink:{flink_version}-scala_2.12-java17" in dockerfile
    # The jobs' jar is compiled against, and shades the connector for, that same Flink.
    jobs_pom = ET.parse(dc.ROOT / "jobs" / "jvm" / "pom.xml").getroot()  # noqa: S314
    assert pom_property("flink.version", jobs_pom) == flink_version
    assert pom_property("flink.kafka.connector.version", jobs_pom).endswith(
        "-" + ".".join(flink_version.split(".")[:2])
    )
    assert "/jvm/flink/anchorwatch-flink-jobs.jar /opt/flink/lib/" in dockerfile


def test_published_ports_are_unique() -> None:
    for env in ({}, example_env()):
        # The internals' override included: with it, still one service per host port.
        seen: dict[tuple[str, int], str] = {}
        for name, service in dc.with_overrides(env)["services"].items():
            for port in dc.port_mappings(service):
                assert port.host_ip == "127.0.0.1" or env, f"{name}: {port} not on loopback"
                key = (port.host_ip, port.published)
                assert key not in seen, f"{name} and {seen[key]} both publish {key}"
                seen[key] = name
    # With every default, each service's port differs from every other's.
    every = dc.with_overrides()["services"].values()
    published = [p.published for s in every for p in dc.port_mappings(s)]
    assert len(published) == len(set(published)) >= 9


def test_service_ports_agree_with_settings_and_scrape_targets(
    services: dict[str, dict[str, Any]],
) -> None:
    ingest = dc.environment(services["ingest"])
    alerting = dc.environment(services["alerting"])
    assert ingest["ANCHORWATCH_INGEST__HOST"] == alerting["ANCHORWATCH_ALERTING__METRICS_HOST"]
    assert ingest["ANCHORWATCH_INGEST__HOST"] == "0.0.0.0"
    ingest_port = int(ingest["ANCHORWATCH_INGEST__PORT"] or 0)
    alerting_port = int(alerting["ANCHORWATCH_ALERTING__METRICS_PORT"] or 0)
    assert [p.target for p in dc.port_mappings(services["ingest"])] == [ingest_port]
    for name, port in (("ingest", ingest_port), ("alerting", alerting_port)):
        assert f"{port}/" in json.dumps(services[name]["healthcheck"]["test"])
    prometheus = (dc.PROMETHEUS_DIR / "prometheus.yml").read_text(encoding="utf-8")
    assert f'"ingest:{ingest_port}"' in prometheus
    assert f'"alerting:{alerting_port}"' in prometheus
    flink_conf = flink_image_config()
    reporter_port = flink_conf["metrics.reporter.prom.port"]
    assert f'"jobmanager:{reporter_port}"' in prometheus
    assert f"port: {reporter_port}" in prometheus


def flink_image_config() -> dict[str, str]:
    """The options docker/flink.Dockerfile appends to the image's config.yaml."""
    dockerfile = (dc.ROOT / "docker" / "flink.Dockerfile").read_text(encoding="utf-8")
    block = re.search(
        r"RUN printf '%s\\n' \\\n(.*?)>> /opt/flink/conf/config.yaml", dockerfile, re.S
    )
    assert block, "the config.yaml block of docker/flink.Dockerfile moved"
    lines = re.findall(r"'([^']+)'", block.group(1))
    return dc.flink_properties("\n".join(lines))


def test_flink_settings_are_flink_options(services: dict[str, dict[str, Any]]) -> None:
    options = dict(flink_image_config())
    for name in ("jobmanager", "taskmanager"):
        options.update(
            dc.flink_properties(dc.environment(services[name])["FLINK_PROPERTIES"] or "")
        )
    unknown = sorted(k for k in options if not dc.is_flink_option(k))
    assert not unknown, f"not options of this Flink release: {unknown}"
    assert not dc.is_flink_option("execution.checkpointing.externalised-checkpoint-retention")
    # The checkpoints land where the shared volume is, and the submitter looks there.
    assert options["execution.checkpointing.dir"] == "file:///var/lib/flink/checkpoints"
    submitter = dc.environment(services["job-submitter"])
    assert submitter["ANCHORWATCH_JOB__CHECKPOINT_DIR"] == options["execution.checkpointing.dir"]
    assert options["python.executable"] == "/opt/venv/bin/python"


def test_start_order_waits_for_health_and_one_shot_jobs(
    services: dict[str, dict[str, Any]],
) -> None:
    one_shot = {n for n, s in services.items() if s.get("restart") == "no"}
    assert one_shot == {"secrets-init", "kafka-init", "job-submitter"}
    for name, service in services.items():
        if name not in one_shot:
            assert service.get("restart") == "unless-stopped", f"{name}: no restart policy"
        for dependency, spec in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"
            if condition == "service_completed_successfully":
                assert dependency in one_shot, f"{dependency} never completes"
    # Topics exist before anything produces or consumes; the job waits for the cluster.
    for name in ("ingest", "alerting", "job-submitter"):
        assert services[name]["depends_on"]["kafka-init"]["condition"] == (
            "service_completed_successfully"
        )
    assert services["kafka-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["job-submitter"]["depends_on"]["jobmanager"]["condition"] == "service_healthy"
    order = start_order(services)
    assert order.index("kafka") < order.index("kafka-init") < order.index("job-submitter")


def start_order(services: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Services in an order that satisfies depends_on (raises on a cycle)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        assert name not in visiting, f"depends_on cycle through {name}"
        visiting.add(name)
        for dependency in services[name].get("depends_on") or {}:
            visit(dependency)
        visiting.discard(name)
        order.append(name)

    for name in services:
        visit(name)
    return order


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    # The TaskManager has no endpoint of its own; the JobManager's REST API reports it.
    exempt = {"secrets-init", "kafka-init", "job-submitter", "taskmanager"}
    missing = sorted(n for n, s in services.items() if n not in exempt and "healthcheck" not in s)
    assert not missing, f"no healthcheck: {missing}"


def test_state_lives_in_named_volumes(stack: dict[str, Any]) -> None:
    services = stack["services"]
    declared = set(stack["volumes"])

    def mounts(name: str) -> dict[str, str]:
        out = {}
        for volume in services[name].get("volumes") or []:
            source, target = str(volume).split(":")[:2]
            out[target] = source
        return out

    used = {m for s in services for m in mounts(s).values() if not m.startswith(".")}
    assert used == declared, f"declared {sorted(declared)}, used {sorted(used)}"
    kafka_env = dc.environment(services["kafka"])
    assert mounts("kafka")[kafka_env["KAFKA_LOG_DIRS"] or ""] == "kafka-data"
    assert mounts("jobmanager")["/var/lib/flink"] == mounts("taskmanager")["/var/lib/flink"]
    assert mounts("jobmanager")["/var/lib/flink"] == "flink-state"
    state_dir = Path(dc.environment(services["alerting"])["ANCHORWATCH_ALERTING__STATE_DIR"] or "")
    assert mounts("alerting")[str(state_dir.parent)] == "alerting-state"
    # Bind mounts of the repository's own files exist.
    for name, _service in services.items():
        for source in mounts(name).values():
            if source.startswith("."):
                assert (dc.ROOT / source).exists(), f"{name}: {source} does not exist"


def test_secrets_come_from_the_environment_and_env_is_ignored() -> None:
    for path in (dc.COMPOSE_FILE, *dc.COMPOSE_OVERRIDES):
        assert dc.secret_default_problems(dc.raw_compose(path)) == [], path.name
    ignored = (dc.ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert ".env" in ignored


def test_secret_files_are_declared_and_named_by_variables(stack: dict[str, Any]) -> None:
    """Compose secrets come from files: a variable names the file (a path in .env, never the
    value), and the default file holds no credential (the local Slack's webhook URL)."""
    declared = stack.get("secrets") or {}
    used = {s for service in stack["services"].values() for s in service.get("secrets") or []}
    assert used == set(declared), f"declared {sorted(declared)}, used {sorted(used)}"
    for name, spec in dc.raw_compose()["secrets"].items():
        assert re.fullmatch(r"\$\{[A-Z0-9_]+_FILE:-\./[^}]+\}", spec["file"]), name
        default = dc.ROOT / declared[name]["file"]
        assert default.is_file(), f"{name}: {default} does not exist"
        assert default.is_relative_to(dc.ROOT / "deploy"), name


# Compose's own variables (read by `docker compose`, not interpolated into the file).
COMPOSE_VARIABLES = {"COMPOSE_FILE"}


def test_env_example_documents_every_variable_compose_reads() -> None:
    documented = set(example_env()) - COMPOSE_VARIABLES
    referenced = set().union(
        *(
            dc.referenced_variables(path.read_text(encoding="utf-8"))
            for path in (dc.COMPOSE_FILE, *dc.COMPOSE_OVERRIDES)
        )
    )
    # Pass-through settings (no value in the file) are read from .env too.
    passthrough = {
        k
        for s in dc.raw_compose()["services"].values()
        for k, v in dc.environment(s).items()
        if v is None
    }
    missing = sorted((referenced | passthrough) - documented)
    assert not missing, f"not documented in .env.example: {missing}"
    every_setting = set().union(*(settings_variables(c) for c in SERVICE_SETTINGS.values()))
    unknown = sorted(
        k for k in documented if k.startswith("ANCHORWATCH_") and k not in every_setting
    )
    assert not unknown, f".env.example documents settings nobody reads: {unknown}"
    unused = sorted(documented - referenced - passthrough)
    assert not unused, f".env.example documents variables docker-compose.yml never reads: {unused}"


def test_without_env_the_alerting_service_uses_the_local_slack_and_jira(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("ANCHORWATCH_")]:
        monkeypatch.delenv(key)
    env = {k: v for k, v in dc.environment(services["alerting"]).items() if v is not None}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = AlertingSettings.load()
    assert settings.slack.mode == "bot"
    assert settings.slack.api_url == "http://local-slack:8089/api/"
    assert settings.jira.enabled
    assert settings.jira.url == "http://local-jira:8090"
    assert settings.alerting.metrics_port == 9465
    local_slack = " ".join(services["local-slack"]["command"])
    local_jira = " ".join(services["local-jira"]["command"])
    assert "--port 8089" in local_slack
    assert "--host 0.0.0.0" in local_slack
    assert "--port 8090" in local_jira
    assert "--host 0.0.0.0" in local_jira
    # Ingest and the submitter load their settings from the compose defaults, too.
    for name, cls in (("ingest", IngestSettings), ("job-submitter", JobSettings)):
        for key in [k for k in os.environ if k.startswith("ANCHORWATCH_")]:
            monkeypatch.delenv(key)
        for key, raw_value in dc.environment(services[name]).items():
            if raw_value is not None and key.startswith("ANCHORWATCH_"):
                monkeypatch.setenv(key, raw_value)
        cls.load()


def test_interpolation_follows_compose() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert dc.interpolate("${SET:-d}/${EMPTY:-d}/${EMPTY-d}/${UNSET-d}/$$SET/$SET", env) == (
        "x/d//d/$SET/x"
    )
    assert dc.interpolate("${UNSET:-a{b}c}", env) == "a{b}c"
    assert dc.interpolate("${SET:+alt}${UNSET:+alt}", env) == "alt"
    with pytest.raises(dc.InterpolationError):
        dc.interpolate("${UNSET:?needed}", env)
