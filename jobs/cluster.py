"""Submit the drift job to a Flink session cluster and manage it through the REST API.

Submission uses the Flink CLI shipped in the pyflink package (`bin/flink run -py`): it runs
the job's module locally to build the job graph and uploads it with the connector jar and
a zip of the anchorwatch package (so the cluster's Python workers can import it; their
Python still needs anchorwatch's dependencies installed). Settings travel in the
environment of the CLI process, where the module loads them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anchorwatch
from anchorwatch.errors import AnchorwatchError
from anchorwatch.jobs.settings import JobOptions
from anchorwatch.stack.flink import flink_home


class FlinkClusterError(AnchorwatchError):
    """The Flink cluster refused or failed a request; the message carries its answer."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    name: str
    state: str
    start_time_ms: int


class FlinkRest:
    """The few REST calls the CLI needs. ``address`` is host:port of the JobManager."""

    def __init__(self, address: str, timeout_s: float = 10) -> None:
        self.base = address if address.startswith("http") else f"http://{address}"
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - the operator's own cluster URL
            f"{self.base}{path}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:  # noqa: S310
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise FlinkClusterError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise FlinkClusterError(f"Flink REST API at {self.base} unreachable: {exc}") from None
        return json.loads(text) if text else None

    def jobs(self) -> list[JobInfo]:
        overview = self._call("GET", "/jobs/overview")
        return [
            JobInfo(j["jid"], j["name"], j["state"], j.get("start-time", 0))
            for j in overview.get("jobs", [])
        ]

    def state(self, job_id: str) -> str:
        return str(self._call("GET", f"/jobs/{job_id}")["state"])

    def running(self, job_id: str) -> bool:
        """True when the job and every one of its tasks run (a job restarting after a lost
        TaskManager reports RUNNING before its tasks are deployed again)."""
        job = self._call("GET", f"/jobs/{job_id}")
        vertices = job.get("vertices", [])
        return (
            job["state"] == "RUNNING"
            and bool(vertices)
            and all(v["status"] == "RUNNING" for v in vertices)
        )

    def task_managers_of(self, job_id: str) -> set[str]:
        """Resource ids of the TaskManagers the job's tasks are deployed on."""
        out = set()
        for vertex in self._call("GET", f"/jobs/{job_id}").get("vertices", []):
            detail = self._call("GET", f"/jobs/{job_id}/vertices/{vertex['id']}/taskmanagers")
            out |= {str(tm["taskmanager-id"]) for tm in detail.get("taskmanagers", [])}
        return out

    def cancel(self, job_id: str) -> None:
        self._call("PATCH", f"/jobs/{job_id}?mode=cancel")

    def savepoint(
        self, job_id: str, target_dir: str | None, *, stop: bool, timeout_s: float = 300
    ) -> str:
        """Trigger a savepoint (``stop``: stop the job with it) and wait for its location."""
        if stop:
            trigger = self._call(
                "POST", f"/jobs/{job_id}/stop", {"targetDirectory": target_dir, "drain": False}
            )
        else:
            trigger = self._call(
                "POST",
                f"/jobs/{job_id}/savepoints",
                {"target-directory": target_dir, "cancel-job": False},
            )
        request_id = trigger["request-id"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self._call("GET", f"/jobs/{job_id}/savepoints/{request_id}")
            if status["status"]["id"] == "COMPLETED":
                operation = status.get("operation", {})
                if "failure-cause" in operation:
                    cause = operation["failure-cause"].get("stack-trace", "")[:2000]
                    raise FlinkClusterError(f"savepoint failed: {cause}")
                return str(operation["location"])
            time.sleep(0.5)
        raise FlinkClusterError(f"savepoint of {job_id} not done within {timeout_s:.0f}s")


def package_zip(dest_dir: Path) -> Path:
    """A zip of the installed anchorwatch package (symlinked subpackages resolved)."""
    root = Path(anchorwatch.__file__).resolve().parent
    target = dest_dir / "anchorwatch.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if name.endswith((".py", ".json", ".xml")):
                    path = Path(dirpath) / name
                    zf.write(path, Path("anchorwatch") / path.relative_to(root))
    return target


_JOB_ID = re.compile(r"JobID ([0-9a-f]{32})")


def submit(
    jobmanager: str,
    connector_jar: Path,
    *,
    env: dict[str, str],
    savepoint: str | None = None,
    python: str | None = None,
    parallelism: int | None = None,
) -> str:
    """Submit the drift job detached; returns its job id."""
    python = python or sys.executable
    module = Path(anchorwatch.__file__).resolve().parent / "jobs" / "drift_job.py"
    with tempfile.TemporaryDirectory(prefix="anchorwatch-submit-") as tmp:
        cmd = [
            "bash", str(flink_home() / "bin" / "flink"), "run", "--detached",
            "--jobmanager", jobmanager,
            "--python", str(module.resolve()),
            "--pyFiles", str(package_zip(Path(tmp))),
            "--jarfile", str(connector_jar),
            "--pyExecutable", python,
            "--pyClientExecutable", python,
        ]  # fmt: skip
        if savepoint:
            cmd += ["--fromSavepoint", savepoint]
        if parallelism:
            cmd += ["--parallelism", str(parallelism)]
        # A process that ran a local Flink job carries PyFlink's worker flags; the CLI's
        # Python driver must not inherit them.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYFLINK_")}
        result = subprocess.run(
            cmd, env={**inherited, **env}, capture_output=True, text=True, check=False
        )
    found = _JOB_ID.search(result.stdout + result.stderr)
    if result.returncode != 0 or not found:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise FlinkClusterError(f"flink run failed (exit {result.returncode}):\n{tail}")
    return found.group(1)


class LocalMemoryError(AnchorwatchError):
    """The embedded mini-cluster already runs, so its memory can no longer be bounded."""


def bound_local_memory(options: JobOptions) -> list[str]:
    """Bound the memory of the embedded mini-cluster this process is about to start (`job
    run`, the benchmark): PyFlink starts its JVM once per process, with the options in
    JVM_ARGS, at the first Flink call. Returns the options set."""
    from pyflink import java_gateway

    args = options.local_jvm_args()
    # PyFlink keeps no public flag for a started gateway.
    if java_gateway._gateway is not None:
        if os.environ.get("JVM_ARGS", "").split() == args:
            return args
        raise LocalMemoryError("the mini-cluster's JVM already runs with other memory options")
    os.environ["JVM_ARGS"] = " ".join(args)
    return args
