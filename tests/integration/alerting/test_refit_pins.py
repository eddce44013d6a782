"""A pin against a real Kafka: `anchorwatch baseline pin` publishes the type's baseline marked
pinned to the compacted topic, the running alerting service takes it and its refits never
overwrite it (counted as pinned), `baseline show` marks it, and `--unpin` lets it go."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from click.testing import CliRunner, Result

from anchorwatch.alerting.service import AlertingService
from anchorwatch.baseline_publish import publish_baselines
from anchorwatch.cli import cli
from anchorwatch.contracts import Baseline, decode_baseline
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from tests.support.alerting import T0, verdict
from tests.support.alerting_kafka import load_settings, produce, service_config
from tests.support.policy import baseline
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLEAN = [0.30, 0.34, 0.31, 0.38, 0.33, 0.36, 0.32, 0.35, 0.37, 0.39, 0.30, 0.31]


def published(job: JobSettings) -> dict[str, list[Baseline]]:
    out: dict[str, list[Baseline]] = {}
    for m in read_topic(job.kafka, job.topics.baselines):
        if m.value is not None:
            b = decode_baseline(m.value)
            out.setdefault(b.doc_type, []).append(b)
    return out


def anchorwatch(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args])


def pinned_refits(url: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("anchorwatch_alerting_baseline_refits_total") and "pinned" in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_pin_published_by_the_command_is_never_refitted(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    t = job_settings.topics
    config = tmp_path / "anchorwatch.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{job_settings.kafka.bootstrap_servers}"\n\n'
        f'[topics]\nbaselines = "{t.baselines}"\nverdicts = "{t.verdicts}"\n',
        encoding="utf-8",
    )
    # A fitted baseline for the type, then its owner's pin on top of it.
    fitted = baseline("vendor", t0=T0 - 3_600_000, history_end_ms=T0)
    publish_baselines(job_settings.kafka, t.baselines, [fitted])
    pin = anchorwatch(
        config, "baseline", "pin", "--doc-type", "vendor", "--threshold", "0.7",
        "--reason", "vendor runs high", "--author", "ana",
    )  # fmt: skip
    assert pin.exit_code == 0, pin.output
    (_, pinned) = published(job_settings)["vendor"]
    assert pinned.pin is not None
    assert (pinned.pin.threshold, pinned.pin.author) == (0.7, "ana")
    assert (pinned.threshold, pinned.center) == (fitted.threshold, fitted.center)

    produce(
        job_settings,
        [verdict(d, i, m) for i, m in enumerate(CLEAN) for d in ("steady", "vendor")],
    )
    settings_config = service_config(
        job_settings, tmp_path / "state", None, None, refit_interval_s=1, refit_min_windows=10
    )
    settings_config["policy"] = {"min_windows": 10}
    service = AlertingService(load_settings(settings_config)).start()
    try:
        wait_until(lambda: "steady" in published(job_settings), 60, "steady refitted")
        wait_until(lambda: pinned_refits(service.endpoint_url) >= 1, 60, "the pinned type skipped")
        assert service.engine is not None
        assert service.engine.tracker.baseline("vendor") == pinned
    finally:
        service.stop()
    assert published(job_settings)["vendor"] == [fitted, pinned]  # no refit on top of it

    shown = anchorwatch(config, "baseline", "show", "vendor")
    assert shown.exit_code == 0, shown.output
    assert "pinned vendor: threshold 0.700 (fitted 0.350), critical 0.800; by ana at" in (
        shown.output
    )
    unpin = anchorwatch(config, "baseline", "pin", "--doc-type", "vendor", "--unpin")
    assert unpin.exit_code == 0, unpin.output
    latest = published(job_settings)["vendor"][-1]
    assert latest.pin is None
    assert latest.threshold == fitted.threshold
