"""The journey's processes and waits: the service processes of one run (``Services``), their
settings as environment variables, the ports they listen on, and waiting for a part of the
pipeline to answer (``wait_for``, ``answers``), with ``JourneyError`` when it does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

from anchorwatch.errors import AnchorwatchError
from anchorwatch.stack.processes import port_in_use


class JourneyError(AnchorwatchError):
    """A part of the pipeline did not come up or did not answer in time."""


class Services:
    """The service processes of one run: started in their own sessions (so they can
    outlive the command with --keep), logs and pids under the run's directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._commands: dict[str, tuple[list[str], Mapping[str, str]]] = {}

    def start(self, name: str, argv: list[str], env: Mapping[str, str]) -> int:
        self._commands[name] = (list(argv), dict(env))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # A process that ran a local Flink job carries PyFlink's worker flags.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")}
        with (self.run_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "anchorwatch", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**inherited, **env},
            )
        (self.run_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.procs[name] = proc
        return proc.pid

    def kill(self, name: str) -> None:
        """A fault: SIGKILL of ``name``, waited for."""
        proc = self.procs[name]
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)

    def restart(self, name: str) -> int:
        """``name`` again, as it was started (its supervisor's restart)."""
        argv, env = self._commands[name]
        return self.start(name, argv, env)

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def check(self, name: str) -> None:
        code = self.procs[name].poll()
        if code is not None:
            log = (self.run_dir / f"{name}.log").read_text(errors="replace")[-3000:]
            raise JourneyError(f"{name} exited with status {code}; its log ends:\n{log}")

    def wait_ready(self, name: str, url: str, timeout_s: float, what: str) -> None:
        """Wait until ``url`` answers 200, failing early when ``name`` has exited."""

        def ready() -> bool:
            if answers(url):
                return True
            self.check(name)
            return False

        wait_for(ready, timeout_s, what)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def env_of(config: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Settings as ANCHORWATCH_<SECTION>__<FIELD> variables."""
    out = {}
    for section, fields in config.items():
        for name, value in fields.items():
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, (list, tuple, dict)):
                text = json.dumps(value)  # complex fields are JSON in the environment
            else:
                text = str(value)
            out[f"ANCHORWATCH_{section.upper()}__{name.upper()}"] = text
    return out


def pick_port(preferred: int) -> int:
    from anchorwatch.stack.processes import free_port

    return preferred if preferred and not port_in_use("127.0.0.1", preferred) else free_port()


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise JourneyError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False
