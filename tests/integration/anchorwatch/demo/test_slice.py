"""Generated traffic -> real Kafka -> the drift job on the Flink mini-cluster -> verdicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import orjson
import pytest

from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import SnapshotSummary, decode, encode
from anchorwatch.contracts.avro import decode_summary
from anchorwatch.contracts.models import DeadLetter
from anchorwatch.demo import slice as flow
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic
from anchorwatch.stack.stack import Stack
from tests.support.ingest import summaries_written
from tests.support.kafka import ordered_producer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(params=["snapshots", "summaries"])
def settings(request: pytest.FixtureRequest, job_settings: JobSettings) -> Iterator[JobSettings]:
    """The run's topics; with "summaries", the summaries topic is written and the job reads
    it instead of the snapshots."""
    if request.param == "snapshots":
        yield job_settings
        return
    with summaries_written(job_settings) as with_summaries:
        yield with_summaries


def test_windows_match_an_independent_computation_exactly(
    stack: Stack, settings: JobSettings
) -> None:
    job_settings = settings
    traffic = generate(
        TrafficConfig(
            seed=11,
            minutes=6,
            doc_types=5,
            malformed_rate=0.03,
            disorder_ms=4_000,
            incidents=1,
            fault_incidents=1,
            background_fault_rate=0.02,
        )
    )
    records = list(traffic.records())
    malformed = [r for r in records if r.event is None]
    assert malformed, "the stream should carry malformed records"

    stats, accepted = flow.publish_traffic(job_settings, traffic)
    assert stats.accepted == len(records) - len(malformed) == len(accepted)
    assert stats.rejected == len(malformed)

    # Every malformed record is in the dead-letter topic, with its raw bytes and a reason.
    letters = [
        decode(DeadLetter, m.value or b"")
        for m in read_topic(job_settings.kafka, job_settings.topics.dead_letter)
    ]
    assert sorted(dl.raw for dl in letters) == sorted(
        r.raw.decode("utf-8", errors="replace") for r in malformed
    )
    assert all(dl.reason and dl.field and dl.source == "generator" for dl in letters)

    # Accepted events are keyed by doc type, so one type stays on one partition.
    partitions: dict[bytes, set[int]] = {}
    for m in read_topic(job_settings.kafka, job_settings.topics.snapshots):
        assert m.key is not None
        assert orjson.loads(m.value or b"")["doc_type"] == m.key.decode()
        partitions.setdefault(m.key, set()).add(m.partition)
    assert all(len(p) == 1 for p in partitions.values())
    if job_settings.topics.summaries:
        # One summary per accepted event, in its binary form, on the same partition (the
        # same key).
        full = {orjson.loads(m.value or b"")["event_id"]: m
                for m in read_topic(job_settings.kafka, job_settings.topics.snapshots)}  # fmt: skip
        summaries = list(read_topic(job_settings.kafka, job_settings.topics.summaries))
        assert len(summaries) == len(full) == len(accepted)
        for m in summaries:
            original = full[decode_summary(m.value or b"").event_id]
            assert m.value == summary_of(original.value or b"")
            assert (m.key, m.partition) == (original.key, original.partition)
        # One more event on the summaries topic alone, in the contract's JSON form (as a
        # producer of its own may write it): the windows count it only if the job reads the
        # summaries, in either form, not the snapshots.
        extra = accepted[0].model_copy(update={"event_id": "summary-only", "anchors": []})
        producer = ordered_producer(job_settings.kafka.bootstrap_servers)
        producer.produce(job_settings.topics.summaries, encode(SnapshotSummary.of(extra)),
                         extra.doc_type.encode())  # fmt: skip
        assert producer.flush(10) == 0
        accepted.append(extra)

    flow.run_drift_job(job_settings, flow.fetch_artifacts(job_settings).flink_jobs_jar(), accepted)
    windows = [v.window for v in flow.read_verdicts(job_settings)]
    expected = flow.reference_windows(accepted, 60_000)
    result = flow.compare(expected, windows, flow.anchor_holders(accepted, 60_000))
    assert result.ok, result
    # The breakdown too: per kind, the worst anchors, per model, latency.
    assert result.without_breakdown == []
    assert result.matched == len(expected) == len(windows)
    assert sum(w.request_count for w in windows) == len(accepted)
    # Exact figures for one known window, recomputed by hand from the accepted events.
    doc_type, start = min(expected)
    in_window = [
        e for e in accepted if e.doc_type == doc_type and start <= e.event_time_ms < start + 60_000
    ]
    got = next(w for w in windows if (w.doc_type, w.window_start_ms) == (doc_type, start))
    assert got.request_count == len(in_window)
    assert got.mean_drift == pytest.approx(
        sum(e.mean_drift for e in in_window) / len(in_window), abs=1e-12
    )
    assert Counter(w.doc_type for w in windows).keys() == {p.name for p in traffic.profiles}
