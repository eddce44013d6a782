"""Watching a running Flink job through Flink's REST API (the embedded mini-cluster's or a
session cluster's), so that tests wait for what the job did instead of sleeping: how many
records an operator has received, and when a checkpoint completed."""

from __future__ import annotations

from typing import Any

import requests


def minicluster_rest_url(table_result: Any) -> str:
    """The REST address of the embedded mini-cluster running ``table_result``'s job.

    PyFlink does not expose it; the Java job client holds the mini-cluster in a private
    field, read here through reflection."""
    client = table_result.get_job_client()._j_job_client
    field = client.getClass().getDeclaredField("miniCluster")
    field.setAccessible(True)
    return str(field.get(client).getRestAddress().get().toString())


def job_id_of(table_result: Any) -> str:
    return str(table_result.get_job_client().get_job_id())


def records_in(rest_url: str, job_id: str, vertex: str) -> int:
    """Records the job vertex whose name contains ``vertex`` has read so far, all subtasks.

    Flink refreshes these figures at most every 10 s (metrics.fetcher.update-interval), so
    a poll may see them late, never early."""
    job = requests.get(f"{rest_url.rstrip('/')}/jobs/{job_id}", timeout=10).json()
    (found,) = [v for v in job["vertices"] if vertex in v["name"]]
    return int(found["metrics"]["read-records"])


def operator_count(rest_url: str, job_id: str, vertex: str, counter: str) -> int:
    """An operator's counter (e.g. ``snapshotsRouted``) in the job vertex whose name contains
    ``vertex``, summed over its subtasks; 0 before Flink first reports it. Refreshed as
    ``records_in``."""
    base = rest_url.rstrip("/")
    job = requests.get(f"{base}/jobs/{job_id}", timeout=10).json()
    (found,) = [v for v in job["vertices"] if vertex in v["name"]]
    url = f"{base}/jobs/{job_id}/vertices/{found['id']}/subtasks/metrics"
    names = [m["id"] for m in requests.get(url, timeout=10).json()
             if m["id"].endswith(f".{counter}")]  # fmt: skip
    if not names:
        return 0
    values = requests.get(url, params={"get": ",".join(names), "agg": "sum"}, timeout=10).json()
    return int(sum(float(v["sum"]) for v in values))


def latest_checkpoint_ms(rest_url: str, job_id: str) -> int | None:
    """When the job's latest completed checkpoint was triggered (epoch ms), if there is one."""
    url = f"{rest_url.rstrip('/')}/jobs/{job_id}/checkpoints"
    completed = requests.get(url, timeout=10).json()["latest"]["completed"]
    return int(completed["trigger_timestamp"]) if completed else None
