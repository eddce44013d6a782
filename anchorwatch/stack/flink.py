"""A Flink standalone session cluster started with the pyflink package's own scripts.

The cluster gets its own configuration directory under the stack's state directory (ports,
bounded memory, pid and log directories), so it never touches the package's ``conf/`` and
``down`` knows exactly which JobManager and TaskManager it started.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from anchorwatch.stack.processes import (
    StackError,
    is_alive,
    stop_pid,
    tail,
    wait_until,
)

log = logging.getLogger(__name__)

# Main classes of the two daemons, used to recognise our pids.
JOBMANAGER_CLASS = "StandaloneSessionClusterEntrypoint"
TASKMANAGER_CLASS = "TaskManagerRunner"


def flink_home() -> Path:
    """The Flink distribution inside the installed pyflink package."""
    import pyflink

    return Path(pyflink.__file__).parent


@dataclass(frozen=True)
class FlinkCluster:
    state_dir: Path  # <stack state>/flink
    host: str
    rest_port: int
    rpc_port: int
    slots: int
    jobmanager_memory: str
    taskmanager_memory: str

    @property
    def rest_url(self) -> str:
        return f"http://{self.host}:{self.rest_port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.rest_port}"

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pids"

    def _pid_files(self) -> dict[str, list[Path]]:
        return {
            JOBMANAGER_CLASS: sorted(self.pid_dir.glob("flink-*-standalonesession.pid")),
            TASKMANAGER_CLASS: sorted(self.pid_dir.glob("flink-*-taskexecutor.pid")),
        }

    def pids(self) -> dict[str, list[int]]:
        """Live pids per daemon class (Flink's pid files hold one pid per line)."""
        out: dict[str, list[int]] = {}
        for marker, files in self._pid_files().items():
            live = []
            for f in files:
                for line in f.read_text().split():
                    if line.isdigit() and is_alive(int(line), marker):
                        live.append(int(line))
            out[marker] = live
        return out

    def config(self) -> dict[str, Any]:
        base = yaml.safe_load((flink_home() / "conf" / "config.yaml").read_text()) or {}
        h = self.host
        overrides: dict[str, Any] = {
            "jobmanager.bind-host": h,
            "jobmanager.rpc.address": h,
            "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.memory.process.size": self.jobmanager_memory,
            "taskmanager.bind-host": h,
            "taskmanager.host": h,
            "taskmanager.numberOfTaskSlots": self.slots,
            "taskmanager.memory.process.size": self.taskmanager_memory,
            "rest.address": h,
            "rest.bind-address": h,
            "rest.port": self.rest_port,
            "parallelism.default": 1,
            "env.pid.dir": str(self.pid_dir),
            "env.log.dir": str(self.log_dir),
            "state.checkpoints.dir": f"file://{self.state_dir / 'checkpoints'}",
            "state.savepoints.dir": f"file://{self.state_dir / 'savepoints'}",
        }
        # The package's file nests keys; flatten ours in by replacing the nested sections.
        for key in ("jobmanager", "taskmanager", "rest", "parallelism"):
            base.pop(key, None)
        base.update(overrides)
        return base

    def start(self, *, timeout_s: float) -> None:
        home = flink_home()
        if self.conf_dir.exists():
            shutil.rmtree(self.conf_dir)
        shutil.copytree(home / "conf", self.conf_dir)
        (self.conf_dir / "config.yaml").write_text(yaml.safe_dump(self.config(), sort_keys=True))
        (self.conf_dir / "masters").write_text(f"{self.host}:{self.rest_port}\n")
        (self.conf_dir / "workers").write_text(f"{self.host}\n")
        for d in (self.log_dir, self.pid_dir):
            d.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["bash", str(home / "bin" / "start-cluster.sh")],
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"start-cluster.sh failed:\n{result.stdout}{result.stderr}")
        log.info("flink starting", extra={"rest": self.rest_url})
        self.wait_ready(timeout_s=timeout_s)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            FLINK_CONF_DIR=str(self.conf_dir),
            FLINK_LOG_DIR=str(self.log_dir),
            FLINK_PID_DIR=str(self.pid_dir),
        )
        return env

    def overview(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.rest_url}/overview", timeout=2) as resp:  # noqa: S310
                data: dict[str, Any] = json.load(resp)
                return data
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_ready(self, *, timeout_s: float) -> None:
        """Block until the REST API reports a registered TaskManager with free slots."""

        def ready() -> bool:
            pids = self.pids()
            if not pids[JOBMANAGER_CLASS] or not pids[TASKMANAGER_CLASS]:
                # The scripts daemonise asynchronously; give them a moment before judging.
                return False
            info = self.overview()
            return bool(info and info.get("taskmanagers", 0) >= 1 and info.get("slots-total", 0))

        if not wait_until(ready, timeout_s=timeout_s, interval_s=0.5):
            logs = sorted(self.log_dir.glob("*.log"))
            detail = "\n".join(f"--- {p}\n{tail(p, 15)}" for p in logs)
            raise StackError(f"Flink did not become ready on {self.rest_url}:\n{detail}")

    def stop(self) -> bool:
        """Stop the daemons we started: the scripts first (graceful), then any leftover pid."""
        before = self.pids()
        if not any(before.values()):
            self._clear_pid_files()
            return False
        subprocess.run(
            ["bash", str(flink_home() / "bin" / "stop-cluster.sh")],
            env=self._env(),
            capture_output=True,
            check=False,
        )
        for marker, pids in before.items():
            for pid in pids:
                stop_pid(pid, marker, grace_s=20)
        self._clear_pid_files()
        return True

    def _clear_pid_files(self) -> None:
        for files in self._pid_files().values():
            for f in files:
                f.unlink(missing_ok=True)
