"""What the deployment's static checks (tests/unit/deploy/) and the dashboard
renderer share: reading the compose file the way Compose does, what it publishes and the
secrets it must not hold (docs/security.md), the settings each service reads, the metric
names the code exports, the Flink options Flink knows, the PromQL in the rules and the
dashboard.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
#: Files merged over docker-compose.yml on demand (`docker compose -f A -f B`).
COMPOSE_OVERRIDES = (ROOT / "deploy" / "compose" / "publish-internals.yml",)
SECRETS_SCRIPT = ROOT / "deploy" / "secrets" / "init-secrets.sh"
COMPOSE_SCHEMA = ROOT / "deploy" / "schemas" / "compose-spec.json"
ENV_EXAMPLE = ROOT / ".env.example"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES_DIR = PROMETHEUS_DIR / "rules"
RULE_TESTS_DIR = PROMETHEUS_DIR / "tests"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "anchorwatch.json"
ALERTMANAGER_DIR = ROOT / "deploy" / "alertmanager"
ALERTMANAGER_CONFIG = ALERTMANAGER_DIR / "alertmanager.yml"
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))

PROMTOOL_MISSING = (
    "promtool is not installed; it validates and unit-tests the Prometheus rules. "
    "Install it with `apt-get install prometheus` (Debian) or put Prometheus' promtool on PATH."
)
AMTOOL_MISSING = (
    "amtool is not installed; it validates the Alertmanager configuration and its routes. "
    "Install it with `apt-get install prometheus-alertmanager` (Debian: amtool and the "
    "prometheus-alertmanager binary) or put Alertmanager's amtool on PATH."
)


# --------------------------------------------------------------------------- compose


class InterpolationError(ValueError):
    pass


def _closing_brace(text: str, start: int) -> int:
    """Index of the ``}`` closing the ``${`` whose body starts at ``start`` (nested braces
    in a default value, e.g. ``{doc_type}``, are balanced as Compose balances them)."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise InterpolationError(f"unterminated ${{ in {text!r}")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable syntax: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
    ``${VAR-default}``, ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}``, ``${VAR+alt}``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("${", i):
            end = _closing_brace(text, i + 2)
            body = text[i + 2 : end]
            name = _NAME.match(body)
            if not name:
                raise InterpolationError(f"bad variable reference ${{{body}}}")
            rest = body[name.end() :]
            value = env.get(name.group())
            set_nonempty = bool(value)
            if rest == "":
                out.append(value or "")
                i = end + 1
                continue
            if rest.startswith(":-"):
                out.append(value if value else interpolate(rest[2:], env))
            elif rest.startswith("-"):
                out.append(value if value is not None else interpolate(rest[1:], env))
            elif rest.startswith((":?", "?")):
                ok = set_nonempty if rest.startswith(":") else value is not None
                if not ok:
                    raise InterpolationError(f"{name.group()}: {rest.lstrip(':?')}")
                out.append(value or "")
            elif rest.startswith(":+"):
                out.append(interpolate(rest[2:], env) if set_nonempty else "")
            elif rest.startswith("+"):
                out.append(interpolate(rest[1:], env) if value is not None else "")
            else:
                raise InterpolationError(f"bad variable reference ${{{body}}}")
            i = end + 1
            continue
        name = _NAME.match(text, i + 1)
        if not name:
            raise InterpolationError(f"a lone $ in {text!r}: write $$")
        out.append(env.get(name.group(), ""))
        i = name.end()
    return "".join(out)


def interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def referenced_variables(text: str) -> set[str]:
    """Names of the variables a compose file interpolates (``$$`` escapes excluded)."""
    names: set[str] = set()
    for match in re.finditer(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)", text.replace("$$", "")):
        names.add(match.group(1))
    return names


def raw_compose(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def compose(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file after interpolation with ``env`` (default: nothing set, so every
    default applies: what `docker compose up` does without a .env)."""
    interpolated = interpolate_tree(raw_compose(path), env or {})
    assert isinstance(interpolated, dict)
    return interpolated


def with_overrides(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml with every file of ``COMPOSE_OVERRIDES`` merged over it, as
    Compose merges them (the overrides here add ports only: appended)."""
    merged = compose(env)
    for path in COMPOSE_OVERRIDES:
        for name, service in compose(env, path)["services"].items():
            target = merged["services"][name]
            for key, value in service.items():
                if key == "ports":
                    target["ports"] = [*(target.get("ports") or []), *value]
                else:
                    target[key] = value
    return merged


def environment(service: Mapping[str, Any]) -> dict[str, str | None]:
    """A service's environment as a mapping (list form ``KEY=VALUE`` / ``KEY`` included)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        out: dict[str, str | None] = {}
        for item in env:
            key, sep, value = str(item).partition("=")
            out[key] = value if sep else None
        return out
    return {k: (None if v is None else str(v)) for k, v in env.items()}


@dataclass(frozen=True)
class PortMapping:
    host_ip: str
    published: int
    target: int


def port_mappings(service: Mapping[str, Any]) -> list[PortMapping]:
    """Published ports, short syntax ``[IP:]HOST:CONTAINER`` or long syntax."""
    found = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            found.append(
                PortMapping(
                    str(entry.get("host_ip", "")), int(entry["published"]), int(entry["target"])
                )
            )
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) == 3:
            found.append(PortMapping(parts[0], int(parts[1]), int(parts[2])))
        elif len(parts) == 2:
            found.append(PortMapping("", int(parts[0]), int(parts[1])))
        else:
            raise ValueError(f"port {entry!r} publishes no fixed host port")
    return found


# --------------------------------------------------------------------------- exposure


LOOPBACK = "127.0.0.1"
#: What docker-compose.yml alone publishes: the ingest service, the local Slack and Jira
#: pages, and Grafana (it asks for a login; Slack messages and Jira tickets link to it).
PUBLISHED_BY_DEFAULT = frozenset({"ingest", "local-slack", "local-jira", "grafana"})
#: Variables whose values are credentials.
SECRET_NAME = re.compile(
    r"(TOKEN|PASSWORD|SECRET|KEY|WEBHOOK_URL|CREDENTIALS?|CLIENT_PROPERTIES|JAVA_PROPERTIES)$"
)
#: The only literal defaults a credential-named variable may have: what the alerting service
#: presents to the bundled local Slack and Jira, which accept any non-empty token.
LOCAL_PLACEHOLDERS = {
    ("alerting", "ANCHORWATCH_SLACK__BOT_TOKEN"): "xoxb-local",
    ("alerting", "ANCHORWATCH_JIRA__API_TOKEN"): "local-token",
}


def _host_ip_expression(entry: Any) -> str:
    """The host address of a published port as written: the long syntax's host_ip, or the
    short syntax's first part (a ``${...}`` expression, nested defaults included)."""
    if isinstance(entry, dict):
        return str(entry.get("host_ip", ""))
    text = str(entry)
    if text.startswith("${"):
        return text[: _closing_brace(text, 2) + 1]
    parts = text.split("/")[0].split(":")
    return parts[0] if len(parts) == 3 else ""


def exposure_problems(raw: Mapping[str, Any], *, default_file: bool) -> list[str]:
    """Breaches of the exposure rules in one compose file as written: every published port
    binds to a variable that defaults to 127.0.0.1 (and follows it when set); with
    ``default_file`` (docker-compose.yml itself), only ``PUBLISHED_BY_DEFAULT`` publish."""
    problems = []
    for name, service in (raw.get("services") or {}).items():
        entries = service.get("ports") or []
        if entries and default_file and name not in PUBLISHED_BY_DEFAULT:
            problems.append(f"{name}: published by default (only {sorted(PUBLISHED_BY_DEFAULT)})")
        for entry in entries:
            expression = _host_ip_expression(entry)
            variable = _NAME.match(expression[2:]) if expression.startswith("${") else None
            if variable is None:
                problems.append(f"{name}: {entry!r} binds to no variable (${{BIND_ADDRESS:-...}})")
                continue
            default = interpolate(expression, {})
            chosen = interpolate(expression, {variable.group(): "192.0.2.1"})
            if default != LOOPBACK or chosen != "192.0.2.1":
                problems.append(
                    f"{name}: {entry!r} binds to {default!r} by default (must be {LOOPBACK}, "
                    f"and follow ${variable.group()} when set)"
                )
    return problems


def secret_default_problems(raw: Mapping[str, Any]) -> list[str]:
    """Credential-named variables written into a compose file: each must be passed through
    (no value), or be a ``${VAR}`` with no default, or a required ``${VAR:?...}``; the only
    literal defaults are ``LOCAL_PLACEHOLDERS``."""
    problems = []
    for name, service in (raw.get("services") or {}).items():
        for key, value in environment(service).items():
            if not SECRET_NAME.search(key) or value is None:
                continue
            if not value.startswith("${") or _closing_brace(value, 2) != len(value) - 1:
                problems.append(f"{name}: {key} is written into the file; take it from .env")
                continue
            try:
                default = interpolate(value, {})
            except InterpolationError:
                continue  # required: Compose refuses to start without it
            if default and default != LOCAL_PLACEHOLDERS.get((name, key)):
                problems.append(f"{name}: {key} defaults to the literal {default!r}")
    return problems


def grafana_problems(stack: Mapping[str, Any]) -> list[str]:
    """Grafana as the stack runs it by default: no admin password in the environment (from
    a file only), anonymous access off."""
    env = environment(stack["services"]["grafana"])
    problems = []
    if env.get("GF_SECURITY_ADMIN_PASSWORD") is not None:
        problems.append("grafana: GF_SECURITY_ADMIN_PASSWORD is set; use ..._PASSWORD__FILE")
    if not env.get("GF_SECURITY_ADMIN_PASSWORD__FILE"):
        problems.append("grafana: no GF_SECURITY_ADMIN_PASSWORD__FILE (generated password)")
    if (env.get("GF_AUTH_ANONYMOUS_ENABLED") or "").lower() != "false":
        problems.append(
            f"grafana: anonymous access is {env.get('GF_AUTH_ANONYMOUS_ENABLED')!r} by default"
        )
    return problems


def flink_properties(text: str) -> dict[str, str]:
    """``key: value`` lines of a FLINK_PROPERTIES value or a Flink config fragment."""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"not a `key: value` line: {line!r}")
        props[key.strip()] = value.strip()
    return props


# --------------------------------------------------------------------------- Flink


@cache
def flink_option_keys() -> frozenset[str]:
    """Every configuration key string in the Flink distribution of the installed pyflink
    (the same release the image's Flink is): the option classes of flink-dist and of
    flink-python hold each key as a constant."""
    from anchorwatch.stack.flink import flink_home

    home = flink_home()
    jars = [*home.glob("lib/flink-dist-*.jar"), *home.glob("opt/flink-python-*.jar")]
    keys: set[str] = set()
    pattern = re.compile(rb"[a-z][a-zA-Z0-9-]*(?:\.[a-zA-Z0-9-]+)+")
    for jar in jars:
        with zipfile.ZipFile(jar) as zf:
            for name in zf.namelist():
                if name.endswith("Options.class") and name.startswith("org/apache/flink/"):
                    keys.update(m.decode() for m in pattern.findall(zf.read(name)))
    return frozenset(keys)


# Reporter options are per reporter name: metrics.reporter.<name>.<option>.
_REPORTER_OPTION = re.compile(
    r"^metrics\.reporter\.[a-zA-Z0-9_]+\.(factory\.class|port|interval|filter\.[a-z]+"
    r"|scope\.delimiter|scope\.variables\.(excludes|additional)|filterLabelValueCharacters)$"
)


def is_flink_option(key: str) -> bool:
    return key in flink_option_keys() or bool(_REPORTER_OPTION.match(key))


# --------------------------------------------------------------------------- metrics


def exported_metric_names() -> set[str]:
    """Series names the anchorwatch services expose: each metric declared in the code,
    with the suffixes prometheus_client adds (counters are declared with ``_total``)."""
    names: set[str] = set()
    declared = re.compile(r"\"(anchorwatch_[a-z0-9_]+)\"")
    for directory in ("connectors", "alerting", "anchorwatch", "jobs"):
        for path in (ROOT / directory).glob("*.py"):
            for name in declared.findall(path.read_text(encoding="utf-8")):
                names.add(name)
                names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


# Flink metrics the rules and the dashboard use, as Flink 2.2.1's Prometheus reporter
# exported them from a session cluster running the drift job (JobManager and TaskManager
# scrapes, read when these rules were written). Flink registers them only at run time, so
# no static source lists them; docs/operate.md says how to look at a live cluster's.
FLINK_METRICS = frozenset(
    {
        "flink_jobmanager_job_uptime",
        "flink_jobmanager_job_numRestarts",
        "flink_jobmanager_job_numberOfFailedCheckpoints",
        "flink_jobmanager_job_lastCheckpointDuration",
        "flink_taskmanager_job_task_operator_numRecordsOut",
        "flink_taskmanager_job_task_operator_KafkaSourceReader_KafkaConsumer_records_lag_max",
    }
)

# Metrics the dashboard may show before the code exports them: none now. Kept so a new
# panel can name a metric ahead of its code, visibly.
PENDING_ALERTING_METRICS: frozenset[str] = frozenset()

_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRINGS = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers of our namespaces outside strings
    (label values such as operator_name=~"Source:..." are strings)."""
    without_strings = _STRINGS.sub('""', expr)
    return {
        m
        for m in _IDENT.findall(without_strings)
        if m.startswith(("anchorwatch_", "flink_")) or m in ("up", "ALERTS")
    }


def rule_expressions() -> Iterator[tuple[str, str]]:
    """(alert name, expression) of every rule."""
    for path in sorted(RULES_DIR.glob("*.yml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                yield rule.get("alert") or rule["record"], rule["expr"]


def alert_rules() -> Iterator[dict[str, Any]]:
    """Every alerting rule (recording rules left out), as written."""
    for path in sorted(RULES_DIR.glob("*.yml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            yield from (rule for rule in group["rules"] if "alert" in rule)


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def dashboard_panels(board: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every panel that shows data (rows excluded, collapsed rows' panels included)."""
    panels: list[dict[str, Any]] = []
    for panel in (board or dashboard())["panels"]:
        if panel["type"] == "row":
            panels.extend(panel.get("panels") or [])
        else:
            panels.append(panel)
    return panels


# Grafana's variables, replaced by what Grafana would send Prometheus.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$doc_type": ".*",
}


def concrete_promql(expr: str) -> str:
    for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(variable, value)
    return expr


def dashboard_queries(board: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, variables replaced."""
    return [
        (panel["title"], concrete_promql(target["expr"]))
        for panel in dashboard_panels(board)
        for target in panel.get("targets", [])
    ]


def promtool() -> str | None:
    return shutil.which("promtool")


def amtool() -> str | None:
    return shutil.which("amtool")


def alertmanager_binary() -> str | None:
    """Alertmanager itself: ``alertmanager`` upstream, ``prometheus-alertmanager`` in Debian."""
    return shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")


def check_promql(exprs: Iterable[str], tmp_dir: Path) -> subprocess.CompletedProcess[str]:
    """Parse expressions with promtool by making each a recording rule."""
    tool = promtool()
    if tool is None:
        raise FileNotFoundError(PROMTOOL_MISSING)
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"anchorwatch:dashboard_query_{i}", "expr": e}
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_dir / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return subprocess.run(
        [tool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
