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


def records_out(rest_url: str, job_id: str, vertex: str) -> int:
    """Records the job vertex whose name contains ``vertex`` has written so far, to all its
    outputs (side outputs included), all subtasks; refreshed as ``records_in``."""
    job = requests.get(f"{rest_url.rstrip('/')}/jobs/{job_id}", timeout=10).json()
    (found,) = [v for v in job["vertices"] if vertex in v["name"]]
    return int(found["metrics"]["write-records"])


def latest_checkpoint_ms(rest_url: str, job_id: str) -> int | None:
    """When the job's latest completed checkpoint was triggered (epoch ms), if there is one."""
    url = f"{rest_url.rstrip('/')}/jobs/{job_id}/checkpoints"
    completed = requests.get(url, timeout=10).json()["latest"]["completed"]
    return int(completed["trigger_timestamp"]) if completed else None
