"""Refits in the running alerting service, against a real Kafka: the history read back from
the verdicts topic at start (with the incidents the state holds), due types fitted by
themselves and published to the compacted baselines topic, live verdicts refitted too."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from anchorwatch.alerting.service import AlertingService
from anchorwatch.contracts import Baseline, Verdict, decode_baseline
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baseline
from tests.support.alerting import verdict
from tests.support.alerting_kafka import (
    delivered_everything,
    load_settings,
    produce,
    service_config,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLEAN = [0.30, 0.34, 0.31, 0.38, 0.33, 0.36, 0.32, 0.35, 0.37, 0.39, 0.30, 0.31]
MIN_WINDOWS = 10


def published(job: JobSettings) -> dict[str, list[Baseline]]:
    out: dict[str, list[Baseline]] = {}
    for m in read_topic(job.kafka, job.topics.baselines):
        if m.value is not None:
            b = decode_baseline(m.value)
            out.setdefault(b.doc_type, []).append(b)
    return out


def refit_of(windows: list[Verdict], policy: PolicyConfig, like: Baseline) -> Baseline:
    """The fit of exactly these windows, dated like the published one."""
    ws = [v.window for v in windows]
    return fit_baseline(
        like.doc_type,
        ws,
        policy,
        fitted_at_ms=like.fitted_at_ms,
        history_start_ms=ws[0].window_start_ms,
        history_end_ms=ws[-1].window_end_ms,
    ).baseline


def test_refits_run_by_themselves_and_leave_incident_windows_out(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    steady = [verdict("steady", i, m) for i, m in enumerate(CLEAN)]
    # Ten clean windows, then four above the static rule's threshold: an incident opens
    # and stays open.
    drifting = [verdict("drifting", i, m) for i, m in enumerate(CLEAN[:10])]
    drifting += [verdict("drifting", 10 + i, 0.88) for i in range(4)]
    produced = produce(job_settings, steady + drifting)

    # First run without refits: the incident is decided and stored.
    first = service_config(job_settings, state, None, None, refit=False)
    service = AlertingService(load_settings(first)).start()
    try:
        wait_until(lambda: delivered_everything(state, produced), 60, "the verdicts decided")
        assert service.engine is not None
        assert [r.doc_type for r in service.engine.open_incidents()] == ["drifting"]
    finally:
        service.stop()
    assert published(job_settings) == {}

    # A restart with refits: the history comes back from the verdicts topic and the state.
    config = service_config(
        job_settings,
        state,
        None,
        None,
        refit_interval_s=1,
        refit_min_windows=MIN_WINDOWS,
    )
    config["policy"] = {"min_windows": MIN_WINDOWS}
    settings = load_settings(config)
    service = AlertingService(settings).start()
    try:
        wait_until(
            lambda: {"steady", "drifting"} <= set(published(job_settings)),
            60,
            "refitted baselines of both types",
        )
        # A type the service meets only now is refitted from its live verdicts.
        fresh = [verdict("fresh", 100 + i, m) for i, m in enumerate(CLEAN)]
        produce(job_settings, fresh)
        wait_until(lambda: "fresh" in published(job_settings), 60, "a baseline for fresh")
        metrics = requests.get(f"{service.endpoint_url}/metrics", timeout=5).text
    finally:
        service.stop()

    baselines = published(job_settings)
    (steady_fit,) = baselines["steady"]
    assert steady_fit.status == "fitted"
    assert steady_fit == refit_of(steady, settings.policy, steady_fit)
    (drifting_fit,) = baselines["drifting"]
    assert drifting_fit.window_count == 10  # the incident's four windows left out
    assert drifting_fit == refit_of(drifting[:10], settings.policy, drifting_fit)
    fresh_fit = baselines["fresh"][0]
    n = fresh_fit.window_count
    assert MIN_WINDOWS <= n <= len(fresh)
    assert fresh_fit == refit_of(fresh[:n], settings.policy, fresh_fit)
    assert 'anchorwatch_alerting_baseline_refits_total{outcome="published"}' in metrics
    line = next(
        x
        for x in metrics.splitlines()
        if x.startswith("anchorwatch_alerting_baseline_refits_total") and 'outcome="published"' in x
    )
    assert float(line.rsplit(" ", 1)[1]) >= 3
