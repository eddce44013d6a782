"""A stand-in for ingest and the drift job as the watchdog sees them, on a real Kafka, shared
by tests/integration/alerting/test_watchdog.py and bench/watchdog.py: snapshots keyed by doc
type keep arriving on the job's input topic (as connectors/publisher.py writes them), and
while the "job" is alive it writes a verdict per type and closed window (one window after
the window ends, plus the watermark delay, at its next checkpoint) and commits its consumer
group's offsets at each checkpoint, as Flink's Kafka source does. ``kill`` stops the job
(verdicts and commits), not the snapshots; ``revive`` starts it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, Producer, TopicPartition

from anchorwatch.contracts import Verdict, WindowAggregate, encode
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import client_config
from anchorwatch.policy.window import judge_window, verdict_for


def window_verdict(doc_type: str, start_ms: int, window_ms: int) -> Verdict:
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start_ms,
        window_end_ms=start_ms + window_ms,
        request_count=50,
        mean_drift=0.5,
        p95_drift=0.54,
    )
    return verdict_for(window, judge_window(window, None), "watchdog-feed")


class FeedAndJob:
    def __init__(
        self,
        job: JobSettings,
        doc_types: Sequence[str],
        *,
        group_id: str,
        snapshots_per_s: float = 20.0,
        window_s: float = 60.0,
        watermark_delay_s: float = 10.0,
        checkpoint_s: float = 30.0,
    ) -> None:
        self._job = job
        self.doc_types = list(doc_types)
        self.group_id = group_id
        self._rate = snapshots_per_s
        self._window_ms = int(window_s * 1000)
        self._delay_ms = int(watermark_delay_s * 1000)
        self._checkpoint_s = checkpoint_s
        self._producer = Producer(client_config(job.kafka, **{"linger.ms": 5}))
        self._committer = Consumer(
            client_config(job.kafka, **{"group.id": group_id, "enable.auto.commit": False})
        )
        self._alive = threading.Event()
        self._alive.set()
        self._stop = threading.Event()
        self.verdicts = 0
        self.killed_at: float | None = None
        self._checkpointed = time.monotonic()
        # The first window the job judges: the one it starts in.
        now_ms = int(time.time() * 1000)
        self._next_start_ms = now_ms // self._window_ms * self._window_ms
        self._thread = threading.Thread(target=self._run, name="watchdog-feed", daemon=True)

    def start(self) -> FeedAndJob:
        self._thread.start()
        return self

    def kill(self) -> None:
        self._alive.clear()
        self.killed_at = time.monotonic()

    @property
    def since_last_checkpoint_s(self) -> float:
        """From the job's last checkpoint to its kill."""
        return (self.killed_at or time.monotonic()) - self._checkpointed

    def revive(self) -> None:
        self._alive.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.flush(10)
        self._committer.close()

    def _run(self) -> None:
        topic = self._job.topics.drift_input
        verdicts = self._job.topics.verdicts
        i = 0
        started = checkpoint = time.monotonic()
        while not self._stop.is_set():
            # As many snapshots as the rate asks for by now, in turn over the types.
            due = int((time.monotonic() - started) * self._rate)
            while i < due:
                doc_type = self.doc_types[i % len(self.doc_types)]
                try:
                    self._producer.produce(topic, b'{"stand-in": true}', doc_type.encode())
                except BufferError:
                    self._producer.poll(0.05)
                    continue
                i += 1
            self._producer.poll(0)
            if time.monotonic() - checkpoint >= self._checkpoint_s:
                checkpoint = time.monotonic()
                if self._alive.is_set():
                    self._checkpoint(topic, verdicts)
                    self._checkpointed = checkpoint
            self._stop.wait(0.02)

    def _checkpoint(self, topic: str, verdicts: str) -> None:
        """What a checkpoint makes visible: the windows closed by the watermark, and the
        group's offsets (the input's ends: it has read everything)."""
        now_ms = int(time.time() * 1000)
        while self._next_start_ms + self._window_ms + self._delay_ms <= now_ms:
            for doc_type in self.doc_types:
                v = window_verdict(doc_type, self._next_start_ms, self._window_ms)
                self._producer.produce(verdicts, encode(v), doc_type.encode())
                self.verdicts += 1
            self._next_start_ms += self._window_ms
        self._producer.flush(10)
        info = self._committer.list_topics(topic, timeout=10).topics[topic]
        ends = []
        for p in info.partitions:
            _, high = self._committer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends.append(TopicPartition(topic, p, high))
        self._committer.commit(offsets=ends, asynchronous=False)
