"""The watchdog's eyes on Kafka (``watchdog.py`` decides from what they see): per check, the
end offset of every partition of the drift job's input topic (one admin request), the drift
job group's committed offsets (one more), and the keys of the newest ``tail_records``
records that arrived on each partition since the previous check, read by a consumer of its
own that assigns the partitions and seeks to ``end - tail_records`` (keys only are kept: the
doc types, as ``connectors/publisher.py`` keys the records). It never joins a group and
never commits: the job's group is only read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.kafkaio import client_config

log = logging.getLogger(__name__)

#: The longest one request, or the tail reading, may take: a check finishes within a few
#: of these even with the brokers gone, so a stop of the service is not held up.
REQUEST_TIMEOUT_S: Final = 3.0


@dataclass(frozen=True)
class Sample:
    """What one check saw (``watchdog.Observation`` without the engine's side)."""

    arrivals: dict[str, int]  # doc type -> partition, of records new since the last check
    ends: dict[int, int]
    committed: dict[int, int] | None  # None: the job group commits nothing (yet), or no group
    records_read: int


class ProbeError(Exception):
    """Kafka could not answer this check (the next one tries again)."""


class InputProbe:
    def __init__(self, settings: AlertingSettings) -> None:
        self.topic = settings.topics.drift_input
        w = settings.watchdog
        self._tail = w.tail_records
        self._group = w.job_group_id or None
        self._admin = AdminClient(client_config(settings.kafka))
        # The job group's commits are read by a client of that group that never joins it
        # (an offset fetch, as a lag exporter does), not by the admin API's group-offsets
        # call: confluent-kafka crashes the process on it for a group that does not exist
        # (confluentinc/confluent-kafka-python#1982).
        self._job_group = (
            Consumer(
                client_config(
                    settings.kafka,
                    **{
                        "group.id": self._group,
                        "enable.auto.commit": False,
                        "enable.auto.offset.store": False,
                    },
                )
            )
            if self._group is not None
            else None
        )
        self._consumer = Consumer(
            client_config(
                settings.kafka,
                **{
                    # Required by librdkafka; never joined (partitions are assigned) and
                    # never committed to.
                    "group.id": f"{settings.alerting.group_id}-watchdog",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    # The tail fell off the log (retention): read from its start instead.
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 50,
                },
            )
        )
        self._last_ends: dict[int, int] | None = None

    def sample(self) -> Sample | None:
        """One check; None when there is nothing to watch (the topic does not exist).
        ProbeError when Kafka does not answer."""
        try:
            partitions = self._partitions()
            if not partitions:
                return None
            ends = self._ends(partitions)
            committed = self._committed(partitions)
            arrivals: dict[str, int] = {}
            read = 0
            if self._last_ends is not None:
                arrivals, read = self._read_tail(ends, self._last_ends)
        except KafkaException as exc:
            raise ProbeError(str(exc)) from None
        finally:
            self._admin.poll(0)  # serves its log lines (the admin client has no poll loop)
        # Partitions new since the last check start being read at the next one.
        self._last_ends = ends
        return Sample(arrivals, ends, committed, read)

    def _partitions(self) -> list[int]:
        info = self._consumer.list_topics(self.topic, timeout=REQUEST_TIMEOUT_S).topics.get(
            self.topic
        )
        if info is None or info.error is not None:
            return []
        return sorted(info.partitions)

    def _ends(self, partitions: list[int]) -> dict[int, int]:
        futures = self._admin.list_offsets(
            {TopicPartition(self.topic, p): OffsetSpec.latest() for p in partitions},  # type: ignore[no-untyped-call]
            request_timeout=REQUEST_TIMEOUT_S,
        )
        return {
            tp.partition: int(f.result(timeout=REQUEST_TIMEOUT_S + 1).offset)
            for tp, f in futures.items()
        }

    def _committed(self, partitions: list[int]) -> dict[int, int] | None:
        if self._job_group is None:
            return None
        found = self._job_group.committed(
            [TopicPartition(self.topic, p) for p in partitions], timeout=REQUEST_TIMEOUT_S
        )
        # A negative offset: nothing committed for that partition (the job did not yet).
        out = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
        return out or None

    def _read_tail(
        self, ends: dict[int, int], before: dict[int, int]
    ) -> tuple[dict[str, int], int]:
        """The doc types of the newest records since ``before``, at most ``tail`` a partition."""
        starts = {
            p: max(before[p], end - self._tail)
            for p, end in ends.items()
            if p in before and end > before[p]
        }
        if not starts:
            return {}, 0
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        left = set(starts)
        arrivals: dict[str, int] = {}
        read = 0
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        try:
            while left and time.monotonic() < deadline:
                for m in self._consumer.consume(1000, timeout=0.1):
                    if m.error() is not None:
                        continue
                    p, offset = m.partition(), m.offset()
                    read += 1
                    key = m.key()
                    if key and p is not None:
                        arrivals[key.decode("utf-8", "replace")] = p
                    if p is not None and offset is not None and offset >= ends[p] - 1:
                        left.discard(p)
        finally:
            self._consumer.unassign()
        if left:
            log.warning(
                "watchdog read part of the tail only",
                extra={"topic": self.topic, "partitions": sorted(left)[:20]},
            )
        return arrivals, read

    def close(self) -> None:
        self._consumer.close()
        if self._job_group is not None:
            self._job_group.close()
