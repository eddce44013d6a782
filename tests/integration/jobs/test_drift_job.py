"""The drift job in event time against the real broker: exact windows and verdicts with
out-of-order, late and invalid records and idle partitions; baselines taking effect
mid-stream; submission to a real session cluster and a restart from a savepoint."""

from __future__ import annotations

import base64
import hashlib
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from anchorwatch.connectors.validation import summary_of
from anchorwatch.contracts import DeadLetter, SnapshotSummary, Verdict, decode, encode, verdict_id
from anchorwatch.contracts.avro import encode_summary
from anchorwatch.demo import slice as flow
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import producer_max_bytes, read_topic, record_limit
from anchorwatch.stack.stack import Stack
from tests.support.drift_job import (
    MIN,
    T0,
    baseline,
    event,
    has,
    minute,
    publish,
    publish_baseline,
    wait_for,
    windows_of,
)
from tests.support.flink import (
    job_id_of,
    latest_checkpoint_ms,
    minicluster_rest_url,
    operator_count,
    records_in,
)
from tests.support.kafka import ordered_producer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: A record that is not JSON and, as a dead letter, would not fit under the record limit:
#: JSON writes each of its characters as six bytes.
BIG = b"\x01" * 3_000_000

#: The source task that routes each record, as Flink names its job vertex.
ROUTE = "route snapshots"


def routed(rest_url: str, job_id: str) -> int:
    """Records the route has taken in (its batches go out later, so its output says less)."""
    return operator_count(rest_url, job_id, ROUTE, "snapshotsRouted")


@dataclass
class Running:
    """The drift job running unbounded on the embedded mini-cluster, with its settings."""

    settings: JobSettings
    result: Any

    def judge_received(
        self, records: int, what: str, timeout_s: float = 60, vertex: str = "judge windows"
    ) -> None:
        """Wait until the judging stage (or ``vertex``) has read ``records`` records in all
        (windows, late tallies, dead letters and baselines alike), failing with ``what``
        after a while."""
        rest, job = minicluster_rest_url(self.result), job_id_of(self.result)
        seen: list[int] = []

        def received() -> bool:
            seen.append(records_in(rest, job, vertex))
            return seen[-1] >= records

        try:
            wait_until(received, timeout_s, what, interval_s=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {vertex} read {seen[-1]} of {records} records") from None


#: What Flink's REST API names each `job.state_backend`.
STATE_BACKEND_CLASS = {"hashmap": "HashMapStateBackend", "rocksdb": "EmbeddedRocksDBStateBackend"}


@pytest.fixture
def streaming(job_settings: JobSettings) -> Iterator[Callable[..., Running]]:
    """Start the drift job unbounded on the mini-cluster; cancelled at the end of the test."""
    results = []

    def start(**job: Any) -> Running:
        settings = job_settings.model_copy(update={"job": job_settings.job.model_copy(update={
            "watermark_delay_ms": 5_000, "idle_timeout_s": 2, "late_report_s": 1,
            "checkpoint_interval_s": 5, "startup_mode": "earliest-offset", **job})})  # fmt: skip
        jar = flow.fetch_artifacts(settings).flink_jobs_jar()
        results.append(drift_job.run(settings, jar, bounded=False))
        return Running(settings, results[-1])

    yield start
    for result in results:
        result.get_job_client().cancel().result()


def test_exact_windows_with_disorder_late_invalid_and_idle_partitions(
    streaming: Callable[..., Running],
) -> None:
    job = streaming()
    settings = job.settings
    busy = [e for m in range(3) for e in minute("invoice", m, [0.2, 0.4, 0.6, 0.3], jitter=m)]
    opener = event("invoice", T0 + 3 * MIN + 6_000, 0.1, 99)  # moves the watermark to 3:01
    # "radiology" stops after minute 1; its partition goes idle, its windows must still close.
    quiet = minute("radiology", 0, [0.7, 0.9]) + minute("radiology", 1, [0.5])
    publish(settings, [*busy, *quiet, opener])
    producer = ordered_producer(
        settings.kafka.bootstrap_servers,
        **{"message.max.bytes": producer_max_bytes(settings.topics)},
    )
    too_long = orjson.loads(encode(event("invoice", T0 + 1_000, 0.5, 7)))
    bad: list[tuple[bytes | None, bytes | None]] = [
        (b"{not json", b"invoice"),
        # Larger than the Java producer's default request size (1 MB), and larger than fits
        # in a dead letter once JSON writes each control character as six bytes: both get
        # theirs.
        (b"<" * 1_500_000, b"invoice"),
        (BIG, b"invoice"),
        # From another producer of the topic: ids and doc types longer than the contract
        # allows.
        (orjson.dumps({**too_long, "event_id": "e" * 201}), None),
        (orjson.dumps({**too_long, "doc_type": "d" * 513}), None),
        # Valid JSON but not an object, bytes that are not UTF-8, and a tombstone (no value).
        (b"[1, 2]", b"invoice"),
        (b"\xff\xfe{", b"invoice"),
        (None, b"invoice"),
        (b'{"event_id": "x", "event_time_ms": "soon", "doc_type": "invoice"}', b"invoice"),
    ]
    for value, key in bad:
        producer.produce(settings.topics.snapshots, value, key)
    assert producer.flush(10) == 0
    first = wait_for(
        settings, lambda vs: has("invoice", 0, 1, 2)(vs) and has("radiology", 0, 1)(vs)
    )

    # The watermark has passed minute 2: these two are late, for windows already judged.
    late = [event("invoice", T0 + 10_000, 0.99, 1000), event("invoice", T0 + MIN + 10, 0.99, 1001)]
    publish(settings, late)
    # The late tally (every second, processing time) must reach the judge before window 3
    # closes: after the windows judged and a dead letter for each bad record, one more.
    job.judge_received(len(first) + len(bad) + 1, "the late tally to reach the judge")
    # After the watermark (3:01), still inside window 3, then a tick to close it.
    more = [event("invoice", T0 + 3 * MIN + 10_000 + i, 0.5, i) for i in (1, 2)]
    more.append(event("invoice", T0 + 5 * MIN, 0.1, 98))
    publish(settings, more)
    verdicts = wait_for(settings, has("invoice", 3))

    on_time = [*busy, *quiet, opener, *more[:-1]]
    expected = flow.reference_windows(on_time, MIN)
    closed = {k: w for k, w in expected.items() if k[1] <= T0 + 3 * MIN}
    # A top anchor tied between requests (equal events) may name any of them.
    result = flow.compare(closed, [v.window for v in verdicts], flow.anchor_holders(on_time, MIN))
    assert result.ok, result
    assert len(verdicts) == len(closed) == 6
    # Late events are counted, never silently dropped: in the first verdict after them.
    assert sum(v.window.late_count or 0 for v in verdicts) == len(late)
    assert windows_of(verdicts, "invoice")[T0 + 3 * MIN].window.late_count == len(late)
    assert all(v.window.late_count == 0 for v in first)
    # Deterministic ids: doc type, window start, job version.
    v0 = windows_of(verdicts, "radiology")[T0]
    assert v0.verdict_id == verdict_id("radiology", T0, drift_job.JOB_VERSION)
    assert (v0.rule, v0.threshold, v0.min_requests, v0.breach_level) == ("static", 0.85, 6, "none")

    letters = [decode(DeadLetter, m.value or b"")
               for m in read_topic(settings.kafka, settings.topics.dead_letter)]  # fmt: skip
    assert sorted((dl.field, dl.raw[:9]) for dl in letters) == [
        ("$", ""),
        ("$", "\x01" * 9),
        ("$", "<" * 9),
        ("$", "[1, 2]"),
        ("$", "{not json"),
        ("$", "\ufffd\ufffd{"),
        ("doc_type", '{"anchor_'),
        ("event_id", '{"anchor_'),
        ("event_time_ms", '{"anchor_'),
    ]
    (cut,) = (dl for dl in letters if dl.raw.startswith("\x01"))
    keep = len(cut.raw)
    assert 0 < keep < len(BIG)
    assert cut.reason == (
        f"$: not a JSON object [raw cut to its first {keep} of {len(BIG)} characters; "
        f"sha256 of all: {hashlib.sha256(BIG).hexdigest()}]"
    )
    assert len(encode(cut)) <= record_limit(settings.topics)
    assert [len(dl.raw) for dl in letters if dl.raw.startswith("<")] == [1_500_000]
    assert {dl.reason for dl in letters if dl.field == "$" and dl is not cut} == {
        "$: not a JSON object"
    }
    assert {dl.reason for dl in letters if dl.field in ("doc_type", "event_id")} == {
        "doc_type: longer than 512 characters",
        "event_id: longer than 200 characters",
    }
    assert all(dl.source.startswith(f"drift-job:{settings.topics.snapshots}/") for dl in letters)


def test_summaries_in_their_binary_form_count_as_their_json_and_a_broken_one_is_named(
    streaming: Callable[..., Running],
) -> None:
    """The connectors write each summary in Avro's single-object encoding; another producer
    may write the contract's JSON. One topic with both: every event counted once, the
    figures those of the plain computation. A record that starts with the binary marker but
    is not a whole snapshot-summary (v2, or v1) becomes a dead letter that says what is wrong
    and keeps its bytes; it never stops the job or sinks its neighbours."""
    job = streaming()
    settings = job.settings
    events = minute("invoice", 0, [0.1, 0.35, 0.8, 0.52], jitter=1)
    opener = event("invoice", T0 + MIN + 6_000, 0.1, 99)  # closes window 0
    good = summary_of(encode(events[0]))
    header, body = good[:10], good[10:]
    # Without a source, the union's branch follows the id, time, type, status and count.
    first = SnapshotSummary.of(events[0])
    sourceless = encode_summary({**first.model_dump(), "source": None})
    branch = (
        len(header)
        + sum(1 + len(text.encode()) for text in (first.event_id, first.doc_type, "active"))
        + sum(_varint_length(n) for n in (first.event_time_ms, first.anchor_count))
    )
    assert sourceless[branch] == 0
    broken = {
        "another schema": good[:2] + bytes(8) + body,
        "the record ends inside a number": good[:-3],
        "1 bytes after the record": good + b"\x00",
        "source: no union branch 2": sourceless[:branch] + b"\x04" + sourceless[branch + 1 :],
        "a string that is not UTF-8": header
        + b"\x04\xff\xfe"
        + body[1 + len(events[0].event_id) :],
    }
    producer = ordered_producer(settings.kafka.bootstrap_servers)
    for e in events[:2]:
        producer.produce(settings.topics.snapshots, summary_of(encode(e)), b"invoice")
    for raw in broken.values():
        producer.produce(settings.topics.snapshots, raw, b"invoice")
    for e in events[2:]:
        producer.produce(settings.topics.snapshots, encode(SnapshotSummary.of(e)), b"invoice")
    producer.produce(settings.topics.snapshots, summary_of(encode(opener)), b"invoice")
    assert producer.flush(10) == 0

    verdicts = wait_for(settings, has("invoice", 0))
    result = flow.compare(
        flow.reference_windows(events, MIN),
        [v.window for v in verdicts],
        flow.anchor_holders(events, MIN),
    )
    assert result.ok, result
    assert windows_of(verdicts, "invoice")[T0].window.request_count == len(events)
    wait_until(lambda: len(list(read_topic(settings.kafka, settings.topics.dead_letter)))
               >= len(broken), 60, "a dead letter for each broken record")  # fmt: skip
    letters = [decode(DeadLetter, m.value or b"")
               for m in read_topic(settings.kafka, settings.topics.dead_letter)]  # fmt: skip
    assert len(letters) == len(broken)
    for problem, raw in broken.items():
        (letter,) = [dl for dl in letters if problem in dl.raw]
        assert letter.field == "$"
        assert letter.raw.startswith("binary snapshot-summary unreadable: ")
        assert letter.raw.endswith(base64.b64encode(raw).decode())


def _varint_length(n: int) -> int:
    """Bytes of Avro's zig-zag varint of ``n``."""
    return max(1, (((n << 1) ^ (n >> 63)).bit_length() + 6) // 7)


@pytest.mark.parametrize("deduplicate", [True, False])
def test_a_retried_batch_is_counted_once(
    streaming: Callable[..., Running], deduplicate: bool
) -> None:
    job = streaming(deduplicate=deduplicate)
    settings = job.settings
    batch = [e for m in range(2) for e in minute("invoice", m, [0.2, 0.4, 0.6])]
    opener = event("invoice", T0 + 2 * MIN + 6_000, 0.1, 99)  # closes windows 0 and 1
    # A client retrying after partial failures: each minute's events again, then part of
    # them, each copy with the same event ids at other offsets. Every copy of a minute
    # comes before the next minute's events: a watermark emitted between two publishes
    # must not make a copy late (CI once saw window 0 fire before its last copies).
    m0, m1 = batch[:3], batch[3:]
    publish(settings, [*m0, *m0, *m0[:2]])
    publish(settings, [*m1, *m1])
    # Window 2 holds equal figures, whose variance from sums can round below zero.
    same = [event("invoice", T0 + 2 * MIN + 7_000 + i, 0.1, 90 + i) for i in range(2)]
    publish(settings, [opener, opener, *same])
    first = wait_for(settings, has("invoice", 0, 1))
    # A late event sent twice, and a window still open getting a duplicate.
    late = event("invoice", T0 + 10_000, 0.99, 1000)
    publish(settings, [late, late])
    # The late tally (every second, processing time) reaches the judge after windows 0, 1.
    job.judge_received(len(first) + 1, "the late tally to reach the judge")
    publish(settings, [opener, event("invoice", T0 + 4 * MIN, 0.1, 98)])
    verdicts = wait_for(settings, has("invoice", 2))

    windows = windows_of(verdicts, "invoice")
    if not deduplicate:
        # Without deduplication, every copy counts (what a retried batch did before).
        assert [windows[T0 + m * MIN].window.request_count for m in range(3)] == [8, 6, 5]
        return
    expected = flow.reference_windows([*batch, opener, *same], MIN)
    closed = {k: w for k, w in expected.items() if k[1] <= T0 + 2 * MIN}
    # A top anchor tied between requests (equal events) may name any of them.
    holders = flow.anchor_holders([*batch, opener, *same], MIN)
    result = flow.compare(closed, [v.window for v in verdicts], holders)
    assert result.ok, result
    assert len(verdicts) == len(closed) == 3
    assert sorted(v.window.request_count for v in first) == [3, 3]
    # The late event is tallied once too.
    assert windows[T0 + 2 * MIN].window.late_count == 1


@pytest.mark.parametrize("state_backend", ["hashmap", "rocksdb"])
def test_a_large_window_counts_each_id_once_wherever_its_copies_land(
    streaming: Callable[..., Running], state_backend: str
) -> None:
    """20,000 ids in one window (its id set grows from 16 slots eleven times), a copy of
    every tenth written under another key (so copies reach other partitions and arrive out
    of order): each id counted once, and every figure that of the plain computation, the
    p95 exactly Flink's PERCENTILE over drift rounded half up to 0.001. A checkpoint is
    taken while the window is open, so the window goes into the state backend and out of
    it again when it fires (on RocksDB through its serializer): it must come back whole."""
    job = streaming(state_backend=state_backend)
    settings = job.settings
    rng = random.Random(16)
    events = [event("bulk", T0 + 1_000 + i, rng.choice([0.0, 1.0, 0.4995, rng.random()]), i)
              for i in range(20_000)]  # fmt: skip
    publish(settings, events)
    producer = ordered_producer(settings.kafka.bootstrap_servers)
    for e in events[::10]:
        producer.produce(settings.topics.snapshots, encode(e), f"copy-{e.event_id}".encode())
    assert producer.flush(10) == 0
    rest, job_id = minicluster_rest_url(job.result), job_id_of(job.result)
    # Every record routed (the copies behind their partition's watermark as late), then a
    # checkpoint: its barrier follows them into the window figures.
    wait_until(lambda: routed(rest, job_id) >= 22_000, 120,
               "every record to pass the route", interval_s=1)  # fmt: skip
    routed_ms = time.time() * 1000
    wait_until(lambda: (latest_checkpoint_ms(rest, job_id) or 0) > routed_ms, 60,
               "a checkpoint of the open window", interval_s=1)  # fmt: skip
    publish(settings, [event("bulk", T0 + MIN + 6_000, 0.1, 99_999)])  # closes window 0

    verdicts = wait_for(settings, has("bulk", 0))
    used = requests.get(f"{rest}/jobs/{job_id}/checkpoints/config", timeout=10).json()
    assert used["state_backend"] == STATE_BACKEND_CLASS[state_backend]
    [window] = [v.window for v in verdicts if v.window.window_start_ms == T0]
    expected = flow.reference_windows(events, MIN)
    holders = flow.anchor_holders(events, MIN)
    assert flow.compare({("bulk", T0): expected[("bulk", T0)]}, [window], holders).ok
    assert window.request_count == 20_000
    rounded = [math.floor(e.mean_drift * 1000 + 0.5) / 1000 for e in events]
    assert window.p95_drift == pytest.approx(flow.percentile(rounded, 0.95), abs=1e-12)


def test_an_event_whose_window_fired_while_its_partition_was_idle_is_tallied_late(
    streaming: Callable[..., Running],
) -> None:
    """Two source tasks, one partition each. While partition 1 is idle, partition 0 moves
    the watermark past minute 1 and the windows fire. An event of minute 1 then arrives on
    partition 1: its own task's watermark is still behind it, so it passes as on time, but
    its window has fired. It must be tallied late, not dropped."""
    job = streaming(parallelism=2)
    settings = job.settings
    producer = ordered_producer(settings.kafka.bootstrap_servers)

    def send(partition: int, *events: Any) -> None:
        for e in events:
            producer.produce(settings.topics.snapshots, encode(e), partition=partition)
        assert producer.flush(10) == 0

    # The two tasks read partitions 0 and 1 (Kafka's source deals partitions out in turn).
    send(1, event("quiet", T0 + 20_000, 0.3, 1))
    send(0, event("busy", T0 + 10_000, 0.2, 1), event("busy", T0 + 2 * MIN + 10_000, 0.2, 2))
    # Partition 1 goes idle (2 s), so the watermark of partition 0 (2:05) closes minute 0.
    wait_for(settings, has("quiet", 0))
    send(1, event("quiet", T0 + MIN + 30_000, 0.9, 2))
    # The next window of "quiet" reports the late event. Its event must reach its task
    # before partition 0 moves the watermark on (the tasks fetch independently).
    send(1, event("quiet", T0 + 2 * MIN + 30_000, 0.3, 3))
    rest, job_id = minicluster_rest_url(job.result), job_id_of(job.result)
    wait_until(lambda: routed(rest, job_id) >= 5, 60,
               "the five records so far to pass the route", interval_s=1)  # fmt: skip
    send(0, event("busy", T0 + 3 * MIN + 10_000, 0.2, 3))
    verdicts = wait_for(settings, has("quiet", 2))
    quiet = windows_of(verdicts, "quiet")
    assert T0 + MIN not in quiet
    assert quiet[T0 + 2 * MIN].window.request_count == 1
    assert quiet[T0 + 2 * MIN].window.late_count == 1


def test_baselines_fallback_and_update_mid_stream(streaming: Callable[..., Running]) -> None:
    job = streaming()
    settings = job.settings
    doc = "purchase_contract"

    def step(m: int) -> list[Verdict]:
        publish(
            settings,
            [*minute(doc, m, [0.5, 0.5, 0.5]), event("tick", T0 + (m + 1) * MIN + 6000, 0.1, m)],
        )
        return wait_for(settings, has(doc, m))

    v = windows_of(step(0), doc)[T0]
    assert (v.rule, v.breach_level, v.baseline_version) == ("static", "none", None)

    publish_baseline(settings, baseline(doc, "b1", threshold=0.3, fitted_at=T0))
    # The baseline reaches the job's keyed state: the judge has read window 0 and it.
    job.judge_received(1 + 1, "baseline b1 to reach the judge")
    v = windows_of(step(1), doc)[T0 + MIN]
    assert (v.rule, v.baseline_version, v.threshold, v.breach_level) == (
        "baseline",
        "b1",
        0.3,
        "critical",
    )

    publish_baseline(settings, baseline(doc, "b2", threshold=0.45, fitted_at=T0 + 1))
    # An older baseline arriving late (replay, compaction) must not win over a newer one.
    publish_baseline(settings, baseline(doc, "b0", threshold=0.9, fitted_at=T0 - 1))
    # Windows 0 and 1 of the type and window 1 of "tick" (closed by step 1); the late tally
    # of step 1's first event (at 1:01, where step 0's tick had put the watermark); and the
    # three baselines.
    job.judge_received(3 + 1 + 3, "baselines b2 and b0 to reach the judge")
    v = windows_of(step(2), doc)[T0 + 2 * MIN]
    assert (v.baseline_version, v.breach_level) == ("b2", "warning")
    # Other types are untouched by this type's baseline.
    assert all(
        v.rule == "static" for v in flow.read_verdicts(settings) if v.window.doc_type == "tick"
    )


@pytest.mark.parametrize(("backend", "resumed_on"), [("hashmap", "hashmap"),
                                                     ("hashmap", "rocksdb")])  # fmt: skip
def test_submitted_to_session_cluster_and_restarted_from_savepoint(
    stack: Stack, job_settings: JobSettings, tmp_path: Path, backend: str, resumed_on: str
) -> None:
    """The open windows survive a stop with a savepoint and a resubmit, also when the
    resubmitted job keeps its state in the other backend (the canonical savepoint format)."""

    def on(state_backend: str) -> JobSettings:
        return job_settings.model_copy(update={"job": job_settings.job.model_copy(update={
            "watermark_delay_ms": 5_000, "idle_timeout_s": 2, "checkpoint_interval_s": 5,
            "startup_mode": "earliest-offset", "group_id": f"aw-{tmp_path.name}",
            "state_backend": state_backend})})  # fmt: skip

    def backend_of(job_id: str) -> str:
        used = requests.get(f"{rest.base}/jobs/{job_id}/checkpoints/config", timeout=10).json()
        return str(used["state_backend"])

    settings = on(backend)
    jar = flow.fetch_artifacts(settings).flink_jobs_jar()
    rest = cluster.FlinkRest(stack.flink.address)
    env = {drift_job.SETTINGS_ENV: settings.model_dump_json()}
    part1 = [e for m in range(3) for e in minute("nda", m, [0.1, 0.2, 0.3])]
    publish(settings, part1)
    job = cluster.submit(stack.flink.address, jar, env=env)
    # The watermark reaches 1:58: window 0 closes, windows 1 and 2 stay open in the state.
    first = wait_for(settings, has("nda", 0), timeout_s=180)
    assert backend_of(job) == STATE_BACKEND_CLASS[backend]
    assert len(first) == 1
    location = rest.savepoint(job, f"file://{tmp_path}/savepoints", stop=True)
    # The REST API serves a job's graph from a cache of a few seconds (read just above).
    wait_until(lambda: rest.state(job) == "FINISHED", 15, "the stopped job finished")

    part2 = [e for m in range(3, 5) for e in minute("nda", m, [0.6, 0.7])]
    publish(settings, [*part2, event("nda", T0 + 6 * MIN, 0.1, 7)])
    env = {drift_job.SETTINGS_ENV: on(resumed_on).model_dump_json()}
    resumed = cluster.submit(stack.flink.address, jar, env=env, savepoint=location)
    try:
        verdicts = wait_for(settings, has("nda", 0, 1, 2, 3, 4), timeout_s=180)
        assert backend_of(resumed) == STATE_BACKEND_CLASS[resumed_on]
    finally:
        rest.cancel(resumed)
    ids = [v.verdict_id for v in verdicts]
    assert len(ids) == len(set(ids)), "a verdict was emitted twice across the restart"
    expected = flow.reference_windows(part1 + part2, MIN)
    holders = flow.anchor_holders(part1 + part2, MIN)
    assert flow.compare(expected, [v.window for v in verdicts], holders).ok
    assert {j.job_id: j.state for j in rest.jobs()}[job] == "FINISHED"
