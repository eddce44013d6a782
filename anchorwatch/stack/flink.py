"""A Flink standalone session cluster started with the pyflink package's own scripts.

The cluster gets its own configuration directory under the stack's state directory (ports,
bounded memory, pid, log and temporary directories), so it never touches the package's
``conf/`` and ``down`` knows exactly which JobManager, TaskManagers and Python workers it
started:

- the daemons by their pid files and main class (a recycled pid is not ours);
- the Python workers the TaskManagers start (``pyflink-udf-runner.sh`` and the interpreter
  it runs) by their environment: they inherit ``FLINK_CONF_DIR`` naming this cluster's
  configuration, which survives the TaskManager: a worker orphaned by a kill -9 of its
  TaskManager is found too, where the process tree no longer leads to it;
- their ``python-dist-*`` directories, in this cluster's temporary directory
  (``io.tmp.dirs``), not in the machine's ``/tmp``.

``ensure`` starts what is missing (the JobManager, or TaskManagers up to the configured
count), so a lost TaskManager is replaced by running ``stack up`` again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from anchorwatch.stack.processes import (
    StackError,
    cmdline,
    is_alive,
    parent_pids,
    processes_with_env,
    stop_pids,
    tail,
    wait_until,
)

log = logging.getLogger(__name__)

# Main classes of the two daemons, used to recognise our pids.
JOBMANAGER_CLASS = "StandaloneSessionClusterEntrypoint"
TASKMANAGER_CLASS = "TaskManagerRunner"
#: Each TaskManager is started with a resource id of its own, to match pid and registration.
RESOURCE_ID_PREFIX = "aw-tm-"
_RESOURCE_ID_OPTION = "taskmanager.resource-id="

# Recovery tuning (measured figures in docs/benchmarks.md):
# A TaskManager killed -9 is declared lost after `rpc-failure-threshold` (2) heartbeats
# fail; at the default 10 s interval that took up to 20 s before the job even restarted.
HEARTBEAT_INTERVAL_MS = 2_000
HEARTBEAT_TIMEOUT_MS = 20_000
# The default exponential backoff grows to a minute and resets only after an hour without
# failures, so repeated faults made each recovery slower (29 s at the fourth failover in
# five minutes); capped at 5 s and reset after 2 minutes of running.
RESTART_MAX_BACKOFF = "5 s"
RESTART_RESET_AFTER = "2 min"


def flink_home() -> Path:
    """The Flink distribution inside the installed pyflink package."""
    import pyflink

    return Path(pyflink.__file__).parent


@dataclass(frozen=True)
class TaskManager:
    pid: int
    resource_id: str


@dataclass(frozen=True)
class FlinkCluster:
    state_dir: Path  # <stack state>/flink
    host: str
    rest_port: int
    rpc_port: int
    slots: int
    jobmanager_memory: str
    taskmanager_memory: str
    taskmanagers: int = 1

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

    @property
    def tmp_dir(self) -> Path:
        """io.tmp.dirs of every daemon: the Python workers' python-dist-* land here."""
        return self.state_dir / "tmp"

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

    def task_managers(self) -> list[TaskManager]:
        """The live TaskManagers, each with the resource id it registers under."""
        out = []
        for pid in self.pids()[TASKMANAGER_CLASS]:
            words = cmdline(pid).split()
            rid = next((w.split("=", 1)[1] for w in words if w.startswith(_RESOURCE_ID_OPTION)), "")
            out.append(TaskManager(pid, rid))
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
            "io.tmp.dirs": str(self.tmp_dir),
            "state.checkpoints.dir": f"file://{self.state_dir / 'checkpoints'}",
            "state.savepoints.dir": f"file://{self.state_dir / 'savepoints'}",
            "heartbeat.interval": HEARTBEAT_INTERVAL_MS,
            "heartbeat.timeout": HEARTBEAT_TIMEOUT_MS,
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.max-backoff": RESTART_MAX_BACKOFF,
            "restart-strategy.exponential-delay.reset-backoff-threshold": RESTART_RESET_AFTER,
        }
        # The package's file nests keys; flatten ours in by replacing the nested sections.
        for key in ("jobmanager", "taskmanager", "rest", "parallelism"):
            base.pop(key, None)
        base.update(overrides)
        return base

    def _write_config(self) -> None:
        home = flink_home()
        if self.conf_dir.exists():
            shutil.rmtree(self.conf_dir)
        shutil.copytree(home / "conf", self.conf_dir)
        (self.conf_dir / "config.yaml").write_text(yaml.safe_dump(self.config(), sort_keys=True))
        (self.conf_dir / "masters").write_text(f"{self.host}:{self.rest_port}\n")
        (self.conf_dir / "workers").write_text(f"{self.host}\n")
        for d in (self.log_dir, self.pid_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)

    def start(self, *, timeout_s: float) -> None:
        """Start the whole cluster (nothing of it may be running)."""
        self.ensure(timeout_s=timeout_s)

    def ensure(self, *, timeout_s: float) -> dict[str, Any]:
        """Start whatever is missing: the JobManager, TaskManagers up to ``taskmanagers``;
        stop orphaned Python workers of dead TaskManagers and remove their python-dist
        directories. Waits until every TaskManager is registered. Returns what it did."""
        pids = self.pids()
        if not any(pids.values()):
            self._write_config()  # a running daemon keeps the configuration it read
        report: dict[str, Any] = {}
        orphans = self.orphaned_workers()
        if orphans:
            stop_pids(orphans, grace_s=5)
            report["orphaned python workers stopped"] = len(orphans)
        removed = self.remove_stale_python_dists()
        if removed:
            report["python-dist directories removed"] = len(removed)
        if not pids[JOBMANAGER_CLASS]:
            self._daemon("jobmanager.sh")
            report["jobmanager"] = "started"
        missing = self.taskmanagers - len(pids[TASKMANAGER_CLASS])
        for _ in range(missing):
            self._daemon("taskmanager.sh", "-D", f"{_RESOURCE_ID_OPTION}{new_resource_id()}")
        if missing > 0:
            report["taskmanagers started"] = missing
        if report:
            log.info("flink starting", extra={"rest": self.rest_url, **report})
        self.wait_ready(timeout_s=timeout_s)
        return report

    def _daemon(self, script: str, *args: str) -> None:
        result = subprocess.run(
            ["bash", str(flink_home() / "bin" / script), "start", *args],
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"{script} start failed:\n{result.stdout}{result.stderr}")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            FLINK_CONF_DIR=str(self.conf_dir),
            FLINK_LOG_DIR=str(self.log_dir),
            FLINK_PID_DIR=str(self.pid_dir),
        )
        return env

    def _rest(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"{self.rest_url}{path}", timeout=2) as resp:  # noqa: S310
                return json.load(resp)
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def overview(self) -> dict[str, Any] | None:
        data = self._rest("/overview")
        return data if isinstance(data, dict) else None

    def registered(self) -> set[str]:
        """Resource ids of the TaskManagers the JobManager lists (a killed one stays listed
        until its heartbeats fail)."""
        data = self._rest("/taskmanagers")
        if not isinstance(data, dict):
            return set()
        return {str(tm.get("id")) for tm in data.get("taskmanagers", [])}

    def wait_ready(self, *, timeout_s: float) -> None:
        """Block until the REST API answers and lists every live TaskManager (by its own
        resource id), with slots."""

        def ready() -> bool:
            pids = self.pids()
            if not pids[JOBMANAGER_CLASS] or len(pids[TASKMANAGER_CLASS]) < self.taskmanagers:
                # The scripts daemonise asynchronously; give them a moment before judging.
                return False
            info = self.overview()
            if not (info and info.get("slots-total", 0)):
                return False
            return {tm.resource_id for tm in self.task_managers()} <= self.registered()

        if not wait_until(ready, timeout_s=timeout_s, interval_s=0.5):
            logs = sorted(self.log_dir.glob("*.log"))
            detail = "\n".join(f"--- {p}\n{tail(p, 15)}" for p in logs)
            raise StackError(f"Flink did not become ready on {self.rest_url}:\n{detail}")

    # ---------------------------------------------------------------- Python workers

    def python_workers(self) -> list[int]:
        """Every process the cluster's daemons started, other than the daemons themselves
        (the Python workers, their runner scripts and log tee): found by the FLINK_CONF_DIR
        they inherit, so also when their TaskManager is gone."""
        daemons = {p for pids in self.pids().values() for p in pids}
        found = processes_with_env("FLINK_CONF_DIR", str(self.conf_dir))
        # Never this process or its ancestors: a shell that exported FLINK_CONF_DIR to use
        # Flink's CLI against this cluster must survive `stack down`.
        parents, ours = parent_pids(), {os.getpid()}
        pid = os.getpid()
        while (pid := parents.get(pid, 0)) > 1:
            ours.add(pid)
        return [p for p in found if p not in daemons and p not in ours]

    def orphaned_workers(self) -> list[int]:
        """Python workers whose TaskManager is no longer alive (killed -9)."""
        # In this order: the workers, then their parents, then the TaskManagers. A worker
        # a TaskManager starts meanwhile (a job being deployed) is then either not listed
        # or found with its parent, never taken for an orphan.
        workers = self.python_workers()
        parents = parent_pids()
        daemons = set(self.pids()[TASKMANAGER_CLASS])
        out = []
        for pid in workers:
            if pid not in parents:
                continue  # gone meanwhile
            ancestor, seen = parents.get(pid), set()
            while ancestor and ancestor not in daemons and ancestor not in seen and ancestor > 1:
                seen.add(ancestor)
                ancestor = parents.get(ancestor)
            if ancestor not in daemons:
                out.append(pid)
        return out

    def remove_stale_python_dists(self, *, min_age_s: float = 30) -> list[Path]:
        """Remove python-dist-* directories no live process of the cluster works in; a
        directory younger than ``min_age_s`` may belong to a worker being started."""
        if not self.tmp_dir.is_dir():
            return []
        in_use = set()
        for pid in self.python_workers():
            for text in (_environ_text(pid), _cwd(pid)):
                for d in self.tmp_dir.glob("python-dist-*"):
                    if str(d) in text:
                        in_use.add(d)
        now = time.time()
        removed = []
        for d in self.tmp_dir.glob("python-dist-*"):
            if d not in in_use and now - d.stat().st_mtime > min_age_s:
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
        return removed

    # ---------------------------------------------------------------- stopping

    def stop(self) -> bool:
        """Stop the daemons we started and every Python worker they started (a worker can
        outlive a killed TaskManager), then remove the temporary directory. True if
        anything was running."""
        before = self.pids()
        workers = self.python_workers()
        # TaskManagers first (their tasks stop and the workers with them), then the rest.
        stop_pids(before[TASKMANAGER_CLASS], grace_s=20, marker=TASKMANAGER_CLASS)
        stop_pids(before[JOBMANAGER_CLASS], grace_s=20, marker=JOBMANAGER_CLASS)
        stop_pids(sorted(set(workers) | set(self.python_workers())), grace_s=5)
        self._clear_pid_files()
        if self.tmp_dir.is_dir():
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
        return bool(any(before.values()) or workers)

    def kill_taskmanager(self, pid: int | None = None, sig: int = signal.SIGKILL) -> int:
        """A fault: send ``sig`` to one TaskManager (``pid``, else the first); its pid."""
        live = self.pids()[TASKMANAGER_CLASS]
        target = pid if pid is not None else (live[0] if live else None)
        if target is None or target not in live:
            raise StackError(f"no running TaskManager {pid or ''}".strip())
        os.kill(target, sig)
        return target

    def _clear_pid_files(self) -> None:
        for files in self._pid_files().values():
            for f in files:
                f.unlink(missing_ok=True)


def new_resource_id() -> str:
    return f"{RESOURCE_ID_PREFIX}{uuid.uuid4().hex[:8]}"


def _environ_text(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
