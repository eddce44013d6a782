"""The run's drift job on the Flink session cluster: its settings (the run's topics, the
demo's event-time knobs), its submission (`job submit`, in the background while the services
start), its cancellation, and the baselines fitted on the windows it made of the history.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from anchorwatch.baseline_publish import publish_baselines
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import slice as flow
from anchorwatch.demo.journey_processes import wait_for
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.baseline_fit import windows_from_topic
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.policy.fitting import fit_baselines


def run_settings(
    base: JobSettings, *, run_id: str, bootstrap: str, watermark_delay_ms: int
) -> JobSettings:
    """The job's settings for one run: run-scoped topics on the stack's Kafka, a fresh
    consumer group reading from the start, and the replay's event-time settings."""
    job = base.job.model_copy(
        update={
            "watermark_delay_ms": watermark_delay_ms,
            # Every partition is fed on the same replay clock, so one quiet for a few
            # seconds holds nothing back that could still arrive behind the others.
            "idle_timeout_s": 5,
            "late_report_s": 2,
            "startup_mode": "earliest-offset",
            "group_id": f"anchorwatch-demo-{run_id}",
        }
    )
    return base.model_copy(
        update={
            "topics": flow.run_scoped_topics(base.topics, run_id),
            "job": job,
            "kafka": base.kafka.model_copy(update={"bootstrap_servers": bootstrap}),
        }
    )


class Submission:
    """The drift job submitted to the session cluster from a background thread (fetching
    the artifacts and uploading the jar take a while); ``job_id()`` waits for it."""

    def __init__(self, flink_address: str, settings: JobSettings) -> None:
        self.flink_address = flink_address
        self.settings = settings
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._submit, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def job_id(self) -> str:
        """The submitted job's id; raises what the submission raised."""
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return str(self._out["job_id"])

    def _submit(self) -> None:
        try:
            jar = flow.fetch_artifacts(self.settings).flink_jobs_jar()
            self._out["job_id"] = cluster.submit(
                self.flink_address,
                jar,
                env={drift_job.SETTINGS_ENV: self.settings.model_dump_json()},
                parallelism=self.settings.job.parallelism,
            )
        except Exception as exc:  # reported by the thread waiting for the id
            self._out["error"] = exc


def wait_running(flink_address: str, job_id: str, timeout_s: float) -> None:
    rest = cluster.FlinkRest(flink_address)
    wait_for(lambda: rest.state(job_id) == "RUNNING", timeout_s, "the job")


def cancel(flink_address: str, job_id: str) -> None:
    with contextlib.suppress(Exception):
        cluster.FlinkRest(flink_address).cancel(job_id)


def fit_history_baselines(s: JobSettings, live_start_ms: int, timeout_s: float) -> str:
    """Wait for the job's windows of the history, fit each type on them and publish the
    baselines to the compacted topic (the job and the alerting service read them)."""
    # The watermark stays watermark_delay behind the newest event: the history's last
    # windows close once live traffic moves it on.
    cut = live_start_ms - s.job.watermark_delay_ms - s.job.window_size_s * 1000
    cut -= cut % jp.MINUTE_MS
    history: list[Any] = []

    def ready() -> bool:
        # The job fires every type's windows on the same watermark: one window that
        # ends after the cut means all windows up to it are out.
        nonlocal history
        history = windows_from_topic(s.kafka, s.topics.verdicts)
        return bool(history) and max(w.window_end_ms for w in history) > cut

    wait_for(ready, timeout_s, "the history's windows", every=1.0)
    windows = [w for w in history if w.window_end_ms <= cut]
    now = int(time.time() * 1000)
    fits = fit_baselines(windows, s.policy, fitted_at_ms=now, history_end_ms=cut)
    publish_baselines(s.kafka, s.topics.baselines, [f.baseline for f in fits.values()])
    fitted = sum(f.baseline.status == "fitted" for f in fits.values())
    return f"{fitted} of {len(fits)} types, {len(windows)} windows"
