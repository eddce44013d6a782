"""`anchorwatch baseline fit` on the real broker and the Flink mini-cluster: snapshot history
from the topic and from NDJSON files -> Flink batch windows -> baselines on the compacted
topic, equal to a fit on windows computed independently in Python."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner, Result

from anchorwatch.backtest import aggregate_windows
from anchorwatch.baseline_publish import publish_baselines
from anchorwatch.cli.baseline import baseline
from anchorwatch.contracts import Baseline, SnapshotEvent, Verdict, encode, verdict_id
from anchorwatch.demo import slice as flow
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs.baseline_fit import read_baselines
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import fit_baselines
from tests.support.kafka import ordered_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = 1_764_403_200_000  # the generator's default start
MIN = 60_000
# Twelve minutes of history: enough windows for a fit once the policy asks for few.
POLICY = PolicyConfig(min_windows=5)


def config_file(tmp_path: Path, settings: JobSettings) -> Path:
    t = settings.topics
    path = tmp_path / "anchorwatch.toml"
    path.write_text(
        f"""
[kafka]
bootstrap_servers = "{settings.kafka.bootstrap_servers}"

[topics]
snapshots = "{t.snapshots}"
verdicts = "{t.verdicts}"
windows = "{t.windows}"
baselines = "{t.baselines}"
dead_letter = "{t.dead_letter}"
drift_events = "{t.drift_events}"

[policy]
min_windows = {POLICY.min_windows}
""",
        encoding="utf-8",
    )
    return path


def run(config: Path, *args: str) -> Result:
    @click.group()
    def root() -> None:
        pass

    root.add_command(baseline)
    return CliRunner().invoke(root, list(args), obj={"config": config})


def expected(
    events: list[SnapshotEvent], since: int | None = None, until: int | None = None
) -> dict[str, Baseline]:
    windows = [
        w
        for w in aggregate_windows(events)
        if (since is None or w.window_start_ms >= since)
        and (until is None or w.window_start_ms < until)
    ]
    fits = fit_baselines(
        windows, POLICY, fitted_at_ms=T0, history_start_ms=since, history_end_ms=until
    )
    return {t: f.baseline for t, f in fits.items()}


def assert_same_fit(got: dict[str, Baseline], want: dict[str, Baseline], output: str = "") -> None:
    """``output``: the CLI's, with its per-type fit notes, shown when a figure differs."""
    assert set(got) == set(want)
    for doc_type, b in want.items():
        g = got[doc_type]
        assert (g.status, g.window_count, g.min_requests) == (
            b.status,
            b.window_count,
            b.min_requests,
        ), doc_type
        assert (g.history_start_ms, g.history_end_ms) == (b.history_start_ms, b.history_end_ms)
        for name in ("center", "spread", "p95", "p99", "typical_request_count", "threshold"):
            assert getattr(g, name) == pytest.approx(getattr(b, name), abs=1e-9), (
                doc_type,
                name,
                output,
            )


def test_fit_from_the_snapshots_topic_to_the_compacted_topic(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    traffic = generate(
        TrafficConfig(seed=17, minutes=12, doc_types=4, malformed_rate=0.02, incidents=1)
    )
    stats, accepted = flow.publish_traffic(job_settings, traffic)
    assert stats.rejected > 0  # malformed records went to the dead-letter topic, not the fit
    config = config_file(tmp_path, job_settings)
    out = tmp_path / "baselines.ndjson"

    result = run(config, "baseline", "fit", "--out", str(out))
    assert result.exit_code == 0, result.output
    published = read_baselines(job_settings.kafka, job_settings.topics.baselines)
    assert_same_fit(published, expected(accepted), result.output)
    assert all(b.status == "fitted" for b in published.values())
    # The file for review holds exactly what was published.
    in_file = [Baseline.model_validate_json(line) for line in out.read_bytes().splitlines()]
    assert {b.doc_type: b for b in in_file} == published

    shown = run(config, "baseline", "show")
    assert shown.exit_code == 0, shown.output
    assert all(doc_type in shown.output for doc_type in published)
    doc_type = sorted(published)[0]
    one = run(config, "baseline", "show", doc_type, "--json")
    assert one.exit_code == 0, one.output
    assert Baseline.model_validate_json(one.output.strip()) == published[doc_type]

    # The topic is compacted and keyed by doc type: a refit replaces a type's baseline.
    refit = published[doc_type].model_copy(update={"version": "b-refit", "fitted_at_ms": T0 + 1})
    publish_baselines(job_settings.kafka, job_settings.topics.baselines, [refit])
    current = read_baselines(job_settings.kafka, job_settings.topics.baselines)
    assert current[doc_type].version == "b-refit"
    assert len(current) == len(published)


def test_fit_from_ndjson_files_within_a_time_range(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    traffic = generate(TrafficConfig(seed=23, minutes=12, doc_types=3, incidents=1))
    events = [r.event for r in traffic.records() if r.event is not None]
    history = tmp_path / "history.ndjson"
    junk = [
        b"<html>502 Bad Gateway</html>",
        b'{"event_id": "x", "doc_type": "nda"}',
        orjson.dumps({**orjson.loads(encode(events[0])), "mean_drift": 1.5}),
        orjson.dumps({**orjson.loads(encode(events[1])), "doc_type": ""}),
    ]
    lines = [encode(e) for e in events]
    history.write_bytes(b"\n".join(lines[:50] + junk + lines[50:]) + b"\n")
    out = tmp_path / "baselines.ndjson"
    since, until = T0 + 2 * MIN, T0 + 10 * MIN

    result = run(
        config_file(tmp_path, job_settings), "baseline", "fit",
        "--snapshots-file", str(history), "--since", str(since),
        "--until", "2025-11-29T08:10:00Z", "--no-publish", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    got = {
        b.doc_type: b
        for b in (Baseline.model_validate_json(line) for line in out.read_bytes().splitlines())
    }
    assert_same_fit(got, expected(events, since, until), result.output)
    assert all(b.window_count <= 8 for b in got.values())
    # --no-publish: nothing went to the topic.
    assert read_baselines(job_settings.kafka, job_settings.topics.baselines) == {}


def test_windows_already_on_the_verdicts_topic_fit_and_backtest_without_flink(
    job_settings: JobSettings, tmp_path: Path
) -> None:
    traffic = generate(TrafficConfig(seed=3, minutes=100, doc_types=3, incidents=2))
    events = [r.event for r in traffic.records() if r.event is not None]
    windows = aggregate_windows(events)
    producer = ordered_producer(job_settings.kafka.bootstrap_servers)
    for w in windows:
        verdict = Verdict(
            verdict_id=verdict_id(w.doc_type, w.window_start_ms, "1"),
            job_version="1",
            window=w,
            rule="static",
            threshold=0.85,
            critical_threshold=0.9,
            min_requests=6,
            breach_level="none",
        )
        producer.produce(job_settings.topics.verdicts, encode(verdict), w.doc_type.encode())
    producer.produce(job_settings.topics.verdicts, b"not a verdict", b"x")
    assert producer.flush(30) == 0
    config = config_file(tmp_path, job_settings)

    out = tmp_path / "baselines.ndjson"
    fit = run(
        config, "baseline", "fit", "--from-topic", "verdicts", "--no-publish", "--out", str(out)
    )
    assert fit.exit_code == 0, fit.output
    got = {
        b.doc_type: b
        for b in (Baseline.model_validate_json(line) for line in out.read_bytes().splitlines())
    }
    assert_same_fit(got, expected(events), fit.output)

    # An hour of history per type: the policy's min_windows (60) for a fitted baseline.
    replay = run(config, "baseline", "backtest", "--from-topic", "verdicts", "--fit-minutes", "60")
    assert replay.exit_code == 0, replay.output
    assert "replayed" in replay.output
    incidents = [orjson.loads(x) for x in replay.stdout.splitlines() if x.startswith("{")]
    # This seed ramps purchase_contract up by 0.4 from minute 75 to 78: after the fit, found.
    [late_ramp] = [i for i in traffic.incidents if i.start_ms >= T0 + 60 * MIN]
    assert (late_ramp.doc_type, late_ramp.kind) == ("purchase_contract", "ramp")
    found = [i for i in incidents if i["doc_type"] == late_ramp.doc_type]
    assert found
    assert late_ramp.start_ms <= found[0]["first_breach_ms"] < late_ramp.end_ms
