"""`anchorwatch demo` as a user runs it: the installed command in a subprocess, its exit
status and what it prints, on its own Kafka + Flink session cluster.

Two runs share one stack, started by the first (each costs minutes of two cores):

- a run that must fail: a policy too slow for any incident (it opens one only after 30
  breaching windows in a row), on short traffic; it must miss every labelled incident
  and exit 1. It starts its own local Slack and Jira;
- the default run, with "real" Slack and Jira settings in the environment: a Slack and a
  Jira this test starts as separate processes (they speak the real wire protocols and
  demand the credentials), so the demo must not start its own and every thread and
  ticket lands in them, while no secret is printed.

Both run with ``--keep``: every address printed must answer after the command has
exited; then everything is stopped the way the demo says to, and no process is left
(checked by pid and by session).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from anchorwatch.demo.journey_plan import INCIDENTS
from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import Stack, StackSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ANCHORWATCH = str(Path(sys.executable).with_name("anchorwatch"))
LABELS = len(INCIDENTS)
#: A run's longest wall time here before it counts as hung (the demo's own target: 4 min).
RUN_TIMEOUT_S = 420


@dataclass
class Command:
    """One finished command: exit status, stdout lines with the second each arrived at
    (from the start), stderr."""

    argv: list[str]
    returncode: int
    lines: list[tuple[float, str]]
    stderr: str
    seconds: float

    @property
    def stdout(self) -> str:
        return "\n".join(text for _, text in self.lines)

    @property
    def log(self) -> str:
        """What a failed assertion shows."""
        return (
            f"$ {' '.join(self.argv)}  -> {self.returncode}\n{self.stdout}\n{self.stderr[-3000:]}"
        )

    def at(self, pattern: str) -> list[tuple[float, re.Match[str]]]:
        return [(t, m) for t, line in self.lines if (m := re.search(pattern, line))]

    def kept(self) -> dict[str, str]:
        """The addresses printed under 'left running'."""
        out: dict[str, str] = {}
        lines = [text for _, text in self.lines]
        start = next((i for i, t in enumerate(lines) if t.startswith("left running")), None)
        assert start is not None, self.log
        for text in lines[start + 1 :]:
            name, _, address = text.strip().partition(" ")
            out[name] = address.strip()
        return out

    def run_dir(self) -> Path:
        (match,) = [m for _, m in self.at(r"kill the pids in (\S+)/\*\.pid")]
        return Path(match.group(1))


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> Command:
    """Run a command as a user would, noting when each line of its output appears."""
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    with (cwd / f"stderr-{len(list(cwd.glob('stderr-*')))}.txt").open("w+") as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd, bufsize=1
        )

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append((time.monotonic() - t0, line.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        reader.join(timeout=10)
        err.seek(0)
        return Command(argv, code, lines, err.read(), time.monotonic() - t0)


def answers(url: str) -> requests.Response | None:
    try:
        r = requests.get(url, timeout=5)
    except requests.RequestException:
        return None
    return r if r.status_code == 200 else None


def _get(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


# --------------------------------------------------------------------------- the setting


@dataclass
class Setting:
    """A user's machine for these runs: where things go, the stack's ports (free ones, so
    a developer's own stack is untouched) and every process to stop at the end."""

    root: Path
    env: dict[str, str]
    stack_settings: dict[str, Any]
    runs: list[Command] = field(default_factory=list)
    own: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def stack(self) -> Stack:
        return Stack(StackSettings.load(stack=self.stack_settings))

    def pids(self) -> dict[str, int]:
        """Every process of the runs that should be running: the stack's, the services'
        from the pid files the demo points to, the test's own Slack and Jira."""
        s = self.stack()
        out = {}
        if (kafka := s.kafka.pid()) is not None:
            out["kafka"] = kafka
        for marker, pids in s.flink.pids().items():
            for pid in pids:
                out[f"flink {marker.rsplit('.', 1)[-1]} {pid}"] = pid
        for command in self.runs:
            for f in command.run_dir().glob("*.pid"):
                out[f"{command.run_dir().name}/{f.stem}"] = int(f.read_text())
        for name, proc in self.own.items():
            out[name] = proc.pid
        return out


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def left_over(root: Path, sessions: set[int]) -> list[str]:
    """Processes still in one of ``sessions`` or naming ``root`` on their command line."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            line = " ".join(p.info["cmdline"] or [])
            if os.getsid(p.pid) in sessions or str(root) in line:
                out.append(f"{p.pid}: {line[:200]}")
    return out


def kill_everything(setting: Setting) -> None:
    """The safety net: whatever is still up after the tests goes, by pid, even when a run
    failed before printing where its pid files are (every pid file under the runs' state
    directory counts) and even when the stack cannot be asked."""
    pids: list[int] = [proc.pid for proc in setting.own.values()]
    for f in (setting.root / "runs").glob("**/*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(f.read_text().split()[0]))
    with contextlib.suppress(Exception):
        pids.extend(setting.pids().values())
    with contextlib.suppress(Exception):
        setting.stack().down()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for proc in setting.own.values():
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    # Under CI's state directory when set (CI stops whatever names it), else a temp dir.
    base = os.environ.get("ANCHORWATCH_TEST_STATE_DIR")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="demo-", dir=base))
    else:
        root = tmp_path_factory.mktemp("demo")
    stack = {
        "state_dir": str(root / "stack"),
        "kafka_port": free_port(),
        "controller_port": free_port(),
        "flink_rest_port": free_port(),
        "flink_rpc_port": free_port(),
    }
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANCHORWATCH_", "PYFLINK_")) or k == "ANCHORWATCH_TEST_STATE_DIR"
    }
    env.update({f"ANCHORWATCH_STACK__{k.upper()}": str(v) for k, v in stack.items()})
    s = Setting(root, env, stack)
    try:
        yield s
    finally:
        kill_everything(s)


def demo(setting: Setting, *args: str, env: dict[str, str] | None = None) -> Command:
    command = run(
        [ANCHORWATCH, "demo", "--keep", "--state-dir", str(setting.root / "runs"), *args],
        {**setting.env, **(env or {})},
        setting.root,
        RUN_TIMEOUT_S,
    )
    setting.runs.append(command)
    return command


def kept_urls(command: Command) -> dict[str, str]:
    """The URL of each address printed as left running (the ingest line shows its Kong
    endpoint, POST only, and its metrics: the metrics)."""
    urls = {}
    for name, text in command.kept().items():
        if name == "postgres":  # the alerting state's database: no HTTP
            continue
        (url,) = re.findall(r"http://[^\s)]+", text.split("(metrics", 1)[-1])
        urls[name] = url
    return urls


def check_kept_addresses(command: Command, names: set[str]) -> dict[str, str]:
    """Every address the demo printed as left running answers now, after it exited."""
    urls = kept_urls(command)
    assert set(urls) == names, command.log
    for name, url in urls.items():
        assert answers(url) is not None, f"{name}: {url} does not answer\n{command.log}"
    assert "anchorwatch_alerting" in requests.get(urls["alerting"], timeout=5).text
    assert "anchorwatch_ingest" in requests.get(urls["ingest"], timeout=5).text
    overview = requests.get(f"{urls['flink'].rstrip('/')}/jobs/overview", timeout=5).json()
    assert "RUNNING" in [j["state"] for j in overview["jobs"]], overview
    return urls


# --------------------------------------------------------------------------- run 1: fails


@pytest.fixture(scope="module")
def failing(setting: Setting) -> Command:
    """Short traffic judged by a policy too slow for any labelled incident."""
    return demo(
        setting,
        "--history-minutes",
        "60",
        "--live-minutes",
        "25",
        "--speed",
        "60",
        # Incidents open only after 30 breaching windows in a row; none lasts 10.
        env={
            "ANCHORWATCH_POLICY__RULES": '[{"name": "drift", "open_after": 30, '
            '"open_after_critical": 30}]'
        },
    )


def test_a_run_that_misses_its_incidents_exits_1_and_says_which(failing: Command) -> None:
    c = failing
    assert c.returncode == 1, c.log
    assert "Traceback" not in c.stderr, c.log
    assert c.at(r"^\[0/6\] kafka at "), c.log
    assert c.at(r"^\[6/6\] done in \d+s"), c.log
    assert c.at(r"^  ALERT ") == [], c.log
    assert c.at(rf"^incidents: {LABELS} labelled, 0 alerted"), c.log
    missed = c.at(r"^  (\w+)\s+(\S+)\s+MISSED$")
    assert [m.group(1) for _, m in missed] == [kind for _, kind, *_ in INCIDENTS], c.log
    # The rest of the pipeline did its part: the failure is the policy's alone.
    ((_, windows),) = c.at(r"^windows: (\d+) verdicts from Flink, (\d+) exact .* 0 wrong")
    assert int(windows.group(1)) == int(windows.group(2)) > 0, c.log


def test_kept_run_leaves_local_slack_jira_flink_and_metrics_answering(failing: Command) -> None:
    urls = check_kept_addresses(
        failing, {"slack", "jira", "pagerduty", "flink", "alerting", "ingest"}
    )
    # The demo's own local Slack, Jira and PagerDuty: started by it, their pages served.
    pids = {f.stem for f in failing.run_dir().glob("*.pid")}
    # Two alerting instances (a leader and a standby) on the run's own PostgreSQL.
    assert pids == {
        "ingest", "alerting", "alerting-2", "postgres", "local-slack", "local-jira",
        "local-pagerduty",
    }, pids  # fmt: skip
    assert failing.kept()["postgres"].startswith("postgresql://anchorwatch@127.0.0.1:")
    # Too short for the operator drills: the run says so and goes on without them.
    assert failing.at(r"^operator features skipped: live_minutes: at least \d+"), failing.log
    assert "(local Slack)" in failing.kept()["slack"]
    assert "(local Jira)" in failing.kept()["jira"]
    for name in ("slack", "jira"):
        assert "<html" in requests.get(urls[name], timeout=5).text.lower()
    # Nothing was alerted, so nothing was posted.
    assert _get(f"{urls['slack'].rstrip('/')}/_local/messages")["messages"] == []
    assert _get(f"{urls['jira'].rstrip('/')}/_local/issues")["issues"] == []


# --------------------------------------------------------------------------- run 2: real


@dataclass
class Integrations:
    slack_url: str
    jira_url: str
    env: dict[str, str]
    secrets: list[str]


@pytest.fixture(scope="module")
def integrations(setting: Setting) -> Integrations:
    """A Slack and a Jira of the user's, as separate processes demanding credentials; the
    demo is pointed at them only through the settings' environment."""
    token, api_token, user = f"xoxb-{secrets.token_hex(12)}", secrets.token_hex(16), "bot@ex.com"
    slack_port, jira_port = free_port(), free_port()
    argv = {
        "slack": ["local-slack", "--port", str(slack_port), "--token", token],
        "jira": ["local-jira", "--port", str(jira_port), "--user", user, "--token", api_token],
    }
    for name, args in argv.items():
        with (setting.root / f"own-{name}.log").open("ab") as log:
            setting.own[name] = subprocess.Popen(
                [ANCHORWATCH, "alerting", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=setting.env,
                start_new_session=True,
            )
    slack, jira = f"http://127.0.0.1:{slack_port}", f"http://127.0.0.1:{jira_port}"
    deadline = time.monotonic() + 30
    while not (answers(f"{slack}/_local/messages") and answers(f"{jira}/_local/issues")):
        assert time.monotonic() < deadline, "the test's own Slack and Jira did not come up"
        time.sleep(0.2)
    env = {
        "ANCHORWATCH_SLACK__MODE": "bot",
        "ANCHORWATCH_SLACK__API_URL": f"{slack}/api/",
        "ANCHORWATCH_SLACK__BOT_TOKEN": token,
        "ANCHORWATCH_JIRA__ENABLED": "true",
        "ANCHORWATCH_JIRA__URL": jira,
        "ANCHORWATCH_JIRA__USER": user,
        "ANCHORWATCH_JIRA__API_TOKEN": api_token,
    }
    return Integrations(slack, jira, env, [token, api_token])


@pytest.fixture(scope="module")
def real(setting: Setting, integrations: Integrations) -> Command:
    """The default demo, posting to the configured Slack and Jira (on the stack the other
    run left running, when it ran first)."""
    return demo(setting, env=integrations.env)


def test_the_demo_prints_each_incident_as_it_happens_and_passes(
    real: Command, integrations: Integrations
) -> None:
    c, slack, jira = real, integrations.slack_url, integrations.jira_url
    assert c.returncode == 0, c.log
    assert "Traceback" not in c.stderr, c.log
    (done_at,) = [t for t, _ in c.at(r"^\[6/6\] done in \d+s")]

    alerts = c.at(
        r"^  ALERT    (\S+)\s+(warning|critical)\s+window \d\d:\d\d UTC  "
        rf"slack ({re.escape(slack)}/archives/(\S+)/p(\d+))  "
        rf"jira ({re.escape(jira)}/browse/([A-Z]+-\d+)) '(.+)'  "
        r"\((-?\d+\.\d)s after the window's end\)$"
    )
    resolved = c.at(r"^  RESOLVED (\S+)\s+after (\d+) more windows \((\w+)\)$")
    assert len(alerts) == len(resolved) == LABELS, c.log
    # As it happens: the first alert shows while live traffic still flows, long before the
    # end, and every incident's resolution after its alert.
    assert alerts[0][0] < done_at - 15, c.log
    alert_at = {m.group(1): t for t, m in alerts}
    assert len(alert_at) == LABELS, c.log
    for t, m in resolved:
        assert alert_at[m.group(1)] < t < done_at, c.log

    messages = _get(f"{slack}/_local/messages")["messages"]
    parents = {m["ts"]: m for m in messages if not m.get("thread_ts") and not m.get("subtype")}
    issues = {i["key"]: i for i in _get(f"{jira}/_local/issues")["issues"]}
    assert len(parents) == len(issues) == LABELS, (sorted(parents), sorted(issues))
    for _, m in alerts:
        doc, _, link, channel, digits, browse, key, summary, _ = m.groups()
        # The permalink is the thread's parent in the user's Slack, and opens on it.
        (parent,) = [p for ts, p in parents.items() if ts.replace(".", "") == digits]
        assert parent["channel"] == channel
        assert f"`{doc}`" in parent["text"]
        page = answers(link)
        assert page is not None, link
        assert f"class='thread focus' id='p{digits}'" in page.text
        # The Jira key and summary are the user's Jira's ticket, now resolved.
        assert re.fullmatch(rf"\[URGENT\] Drift Alert: {doc} - Score 0\.\d{{3}}", summary)
        assert issues[key]["fields"]["summary"].startswith(f"[URGENT] Drift Alert: {doc} ")
        assert issues[key]["fields"]["status"]["name"] == "Done"
        assert answers(browse) is not None, browse

    # The figures.
    ((_, ev),) = c.at(
        r"^events in: (\d+) accepted of (\d+) Kong entries; (\d+) rejected, (\d+) dead"
    )
    accepted, sent, rejected, letters = map(int, ev.groups())
    assert accepted + rejected == sent, c.log
    assert rejected == letters > 0, c.log
    ((_, w),) = c.at(
        r"^windows: (\d+) verdicts from Flink, (\d+) exact against an independent computation, "
        r"0 missing, 0 unexpected, 0 wrong; 0 late events$"
    )
    assert int(w.group(1)) == int(w.group(2)) > 0, c.log
    assert c.at(rf"^incidents: {LABELS} labelled, {LABELS} alerted, 0 unlabelled alerts$"), c.log
    assert len(c.at(r"^  \w+\s+\S+\s+alerted 1x, after [1-3] windows$")) == LABELS, c.log
    assert c.at(r"^window end to Slack message \(replay clock\): median \d+\.\ds"), c.log


def test_real_settings_post_there_and_the_demo_starts_no_slack_or_jira(
    real: Command, integrations: Integrations
) -> None:
    kept = real.kept()
    assert kept["slack"].rstrip("/") == integrations.slack_url, real.log
    assert kept["jira"] == integrations.jira_url, real.log
    assert "local" not in kept["slack"] + kept["jira"], real.log
    pids = {f.stem for f in real.run_dir().glob("*.pid")}
    assert pids == {"ingest", "alerting", "alerting-2", "postgres"}, pids
    check_kept_addresses(real, {"slack", "jira", "flink", "alerting", "ingest"})
    # Every call was authorised (the servers refuse a wrong or missing credential).
    slack_calls = _get(f"{integrations.slack_url}/_local/requests")["requests"]
    jira_calls = _get(f"{integrations.jira_url}/_local/requests")["requests"]
    assert slack_calls
    assert jira_calls
    assert [c for c in slack_calls if c["status"] != 200 or c["error"]] == []
    assert [c for c in jira_calls if c["status"] >= 400] == []
    assert {c["method"] for c in slack_calls} >= {"auth.test", "chat.postMessage", "chat.update"}


def test_no_secret_is_printed_or_logged(real: Command, integrations: Integrations) -> None:
    logs = {f.name: f.read_text(errors="replace") for f in real.run_dir().glob("*.log")}
    assert set(logs) == {"ingest.log", "alerting.log", "alerting-2.log"}
    # The alerting state's password too: in a file of the run's own (0600), nowhere else.
    state_password = (real.run_dir() / "state-password").read_text().strip()
    assert (real.run_dir() / "state-password").stat().st_mode & 0o777 == 0o600
    for secret in [*integrations.secrets, state_password]:
        assert secret not in real.stdout
        assert secret not in real.stderr
        for name, text in logs.items():
            assert secret not in text, name


# --------------------------------------------------------------------------- the end


def test_stopping_as_the_demo_says_leaves_no_process(
    setting: Setting, failing: Command, real: Command
) -> None:
    urls = [u for c in (failing, real) for u in kept_urls(c).values()]
    pids = setting.pids()
    assert {
        "kafka",
        f"{failing.run_dir().name}/alerting",
        f"{real.run_dir().name}/alerting",
    } <= set(pids), pids
    assert len([n for n in pids if n.startswith("flink")]) >= 2, pids
    assert all(alive(p) for p in pids.values()), pids
    # The sessions of the processes (not this test's own: a daemon may stay in it).
    sessions = {os.getsid(p) for p in pids.values()} - {os.getsid(0)}

    # "stop: kill the pids in <run>/*.pid, then anchorwatch stack down"
    services = {n: p for n, p in pids.items() if "/" in n}
    for pid in services.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in services.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {n: p for n, p in services.items() if alive(p)} == {}
    down = run([ANCHORWATCH, "stack", "down"], setting.env, setting.root, 180)
    assert down.returncode == 0, down.log
    for proc in setting.own.values():
        proc.terminate()
        proc.wait(timeout=15)

    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {n: p for n, p in pids.items() if alive(p)} == {}
    assert left_over(setting.root, sessions) == []
    assert [u for u in urls if answers(u)] == []
