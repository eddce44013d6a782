"""The ingest service's Kafka adapter: produce a request's records, resolve when Kafka has
acknowledged every one of them, and refuse (``Unavailable`` -> 503) instead of buffering
without bound.

confluent-kafka calls delivery reports on the thread that polls the producer. That is the
event loop's own thread here (a task polls every millisecond while records are in flight):
a separate poll thread would have to take the GIL back for every single report while the
loop parses JSON, and under load each report then waits out the interpreter's switch
interval (figures: docs/benchmarks.md, "Ingest: design figures"). The reports are counted
per request, and the request's future resolves after its last one. Every record gets a report
within ``message.timeout.ms`` (``ingest.ack_timeout_s``), so a request always learns the
fate of each of its records: acknowledged, or failed (and then the client retries).

Records go to librdkafka in rounds: the records of every request that arrives while a round
is in flight wait here, and go together once its last report is in. The idempotent producer
keeps one request in flight per partition, and records queued behind it past ``linger.ms``
make librdkafka's broker thread poll without sleeping until the answer comes: on a busy
host that takes the CPU the broker needs to answer, and deliveries time out. Rounds cost
something at low concurrency, where a request may wait for the round before it; both sides
are measured in docs/benchmarks.md ("Ingest: design figures").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from anchorwatch.connectors.metrics import IngestMetrics
from anchorwatch.connectors.publisher import (
    MAX_MESSAGE_SETTING,
    check_record_limit,
    contract_max_bytes,
    dead_letter_value,
)
from anchorwatch.connectors.records import Rejected
from anchorwatch.connectors.settings import IngestOptions
from anchorwatch.connectors.validation import Accepted
from anchorwatch.errors import AnchorwatchError
from anchorwatch.kafkaio import check_access, client_config, producer_max_bytes, record_limit
from anchorwatch.settings import KafkaSettings, TopicSettings
from anchorwatch.stack.topics import topic_message_bytes

log = logging.getLogger(__name__)

_ERRORS_KEPT: Final = 3
# One record for librdkafka's produce_batch: key, value (and "_error" once refused).
_Message = dict[str, Any]
# Records Kafka acknowledged in requests that failed as a whole, kept so that the client's
# retry of such a request does not write them twice (see AckingProducer.send).
_WRITTEN_TTL_S: Final = 600.0
_WRITTEN_MAX: Final = 1_000_000
# Rounds in flight per producer. A second one queues behind the first in librdkafka, which
# is what rounds avoid (with two, deliveries timed out again: docs/benchmarks.md).
_ROUNDS: Final = 1


class Unavailable(AnchorwatchError):
    """Kafka cannot take these records now; nothing of them was produced. Retry later."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause  # kafka_down | queue_full | shutting_down


@dataclass
class Delivery:
    """What Kafka said about one request's records."""

    records: int
    failed: int  # not acknowledged: the client must retry the request
    errors: list[str] = field(default_factory=list)  # the first few reasons
    already_written: int = 0  # events skipped: acknowledged before, in a request that failed

    @property
    def ok(self) -> bool:
        return self.failed == 0


class _Round:
    """Records produced and not yet reported, of the round in flight."""

    __slots__ = ("left", "on_done")

    def __init__(self, on_done: Callable[[], None]) -> None:
        self.left = 0
        self.on_done = on_done


class _Acks:
    """Delivery reports of one request (all on the event loop's thread)."""

    __slots__ = ("acked", "errors", "expected", "failed", "failed_values", "future", "round")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.round: _Round | None = None  # set when its records are produced
        self.future: asyncio.Future[None] = loop.create_future()
        self.expected: int | None = None
        self.acked = 0
        self.failed = 0
        self.failed_values: set[bytes] = set()
        self.errors: list[str] = []

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed += 1
            self.failed_values.add(msg.value() or b"")
            if len(self.errors) < _ERRORS_KEPT:
                self.errors.append(str(err))
        self.acked += 1
        if self.acked == self.expected:
            self._done()
        round_ = self.round
        assert round_ is not None  # reports come only for produced records
        round_.left -= 1
        if not round_.left:
            round_.on_done()

    def seal(self, produced: int) -> None:
        self.expected = produced
        if self.acked == produced:
            self._done()

    def _done(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class Acknowledged:
    """Events Kafka acknowledged in requests that failed as a whole, by event id and a digest
    of the record (another event reusing an id is not a retry), so that the client's retry
    of such a request skips exact copies of them. Each is kept ``ttl_s`` (from when it was
    acknowledged), and at most ``max_events`` (the oldest go first). Pure: the clock
    (monotonic seconds) is the caller's."""

    def __init__(self, ttl_s: float = _WRITTEN_TTL_S, max_events: int = _WRITTEN_MAX) -> None:
        self._ttl_s = ttl_s
        self._max_events = max_events
        # (event id, digest) -> when acknowledged; insertion order is time order.
        self._at: dict[tuple[str, bytes], float] = {}

    def __len__(self) -> int:
        return len(self._at)

    def remember(self, produced: list[Accepted], unwritten: set[bytes], now: float) -> None:
        """``produced``: a failed request's events; ``unwritten``: the values of those
        Kafka did not acknowledge (or that were never produced)."""
        for a in produced:
            if a.value not in unwritten:
                key = (a.event_id, _digest(a.value))
                self._at.pop(key, None)  # re-inserted: keeps the dict in time order
                self._at[key] = now
        while len(self._at) > self._max_events:
            del self._at[next(iter(self._at))]

    def unwritten(self, accepted: list[Accepted], now: float) -> list[Accepted]:
        """``accepted`` without the exact copies of events acknowledged within ``ttl_s``."""
        horizon = now - self._ttl_s
        while self._at and next(iter(self._at.values())) < horizon:
            del self._at[next(iter(self._at))]
        if not self._at:
            return accepted
        return [a for a in accepted if (a.event_id, _digest(a.value)) not in self._at]


class AckingProducer:
    def __init__(
        self,
        kafka: KafkaSettings,
        topics: TopicSettings,
        options: IngestOptions,
        metrics: IngestMetrics,
        *,
        source: str,
    ) -> None:
        self._kafka = kafka
        self._topics = topics
        self._options = options
        self._metrics = metrics
        check_record_limit(topics)  # the contract's largest event fits, or no start
        self._limit = record_limit(topics)
        self._topics_checked = False
        self._source = source
        self._inflight_records = 0
        self._inflight_bytes = 0
        self._closing = False
        self._fatal: str | None = None
        self._up = False
        self._poller: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._written = Acknowledged()
        # Requests whose records wait for the next round: (acks, events, their summaries,
        # dead letters).
        self._waiting: list[tuple[_Acks, list[_Message], list[_Message], list[_Message]]] = []
        self._rounds = 0  # rounds in flight
        message_timeout_ms = int(options.ack_timeout_s * 1000)
        self._producer = Producer(
            client_config(
                kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": options.linger_ms,
                    "compression.type": options.compression,
                    "message.timeout.ms": message_timeout_ms,
                    # The largest record: at most the topics' max.message.bytes (checked
                    # at start); dead letters are cut to fit.
                    "message.max.bytes": producer_max_bytes(topics),
                    # Admission control (below) keeps the queue under the configured limits;
                    # librdkafka's own bounds are a backstop above them.
                    "queue.buffering.max.messages": min(
                        2 * options.max_inflight_records, 2**31 - 1
                    ),
                    "queue.buffering.max.kbytes": min(
                        2 * options.max_inflight_bytes // 1024, 2**31 - 1
                    ),
                    # A broker that comes back is found again within a second or so.
                    "reconnect.backoff.max.ms": 1000,
                    "statistics.interval.ms": 1000,
                    "stats_cb": self._on_stats,
                    "error_cb": self._on_error,
                },
            )
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, timeout_s: float = 10) -> None:
        """Check the topics exist (when Kafka answers) and start polling. Kafka being down is
        not fatal here: the service starts unready and recovers when it comes back."""
        loop = asyncio.get_running_loop()
        # Wrong credentials or an untrusted CA stop the start here, naming the setting.
        await loop.run_in_executor(None, check_access, self._kafka, timeout_s)
        try:
            missing = await loop.run_in_executor(None, self._missing_topics, timeout_s)
            if not missing:
                await loop.run_in_executor(None, self._check_topic_sizes, timeout_s)
        except KafkaException as exc:
            log.warning("Kafka does not answer yet; starting unready", extra={"error": str(exc)})
        else:
            if missing:
                raise AnchorwatchError(
                    f"topic(s) {', '.join(missing)} do not exist: create them "
                    "(`anchorwatch stack up` does)"
                )
            self._set_up(True)
        self._poller = asyncio.create_task(self._poll_loop(), name="kafka-poll")

    def _check_topic_sizes(self, timeout_s: float) -> None:
        """Raise, naming the topic, when Kafka would refuse records this service may write:
        the chain is contract maximum <= message.max.bytes <= each topic's max.message.bytes."""
        names = self._written_topics()
        admin = AdminClient(client_config(self._kafka))
        want = self._topics.max_message_bytes
        for name, size in topic_message_bytes(admin, names, timeout_s).items():
            if size < want:
                raise AnchorwatchError(
                    f"topic {name} takes records of up to {size} bytes (max.message.bytes), "
                    f"below {MAX_MESSAGE_SETTING} = {want}: Kafka would refuse events the "
                    f"contract allows (up to {contract_max_bytes()} bytes). Raise it: "
                    f"kafka-configs.sh --alter --entity-type topics --entity-name {name} "
                    f"--add-config max.message.bytes={want} (`anchorwatch stack up` does)"
                )
        self._topics_checked = True

    def _check_later(self) -> None:
        # Kafka was down at start: check the topics once it answers; until they pass, the
        # service stays unready and answers 503 (the operator's fault, not the client's).
        try:
            self._check_topic_sizes(10)
        except AnchorwatchError as exc:
            self._fatal = str(exc)
            self._metrics.kafka_up.set(0)
            log.error("ingest topics refuse records the contract allows", extra={"error": str(exc)})
        except KafkaException as exc:
            self._topics_checked = False  # again when Kafka next comes back
            log.warning("could not check the topics yet", extra={"error": str(exc)})

    def _written_topics(self) -> list[str]:
        t = self._topics
        return [t.snapshots, *([t.summaries] if t.summaries else []), t.dead_letter]

    def _missing_topics(self, timeout_s: float) -> list[str]:
        missing = []
        for topic in self._written_topics():
            # A topic created a moment ago may not be in every broker's metadata yet.
            for attempt in range(6):
                info = self._producer.list_topics(topic, timeout=timeout_s).topics.get(topic)
                unknown = info is None or (
                    info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                )
                if not unknown:
                    break
                if attempt < 5:
                    time.sleep(0.5)
            else:
                missing.append(topic)
        return missing

    def close(self, timeout_s: float = 30) -> int:
        """Refuse new records, stop polling, flush what is queued (blocking: called once the
        server has stopped). Returns the number of records left undelivered."""
        self._closing = True
        if self._poller is not None:
            self._poller.cancel()
        left = self._producer.flush(timeout_s)
        if left:
            log.error("records not delivered at shutdown", extra={"records": left})
        return left

    @property
    def ready(self) -> bool:
        return self._up and not self._closing and self._fatal is None

    @property
    def inflight_records(self) -> int:
        return self._inflight_records

    # ------------------------------------------------------------------ producing

    async def send(
        self, accepted: list[Accepted], rejected: list[Rejected], *, source: str | None = None
    ) -> Delivery:
        """Produce the events (keyed by doc type) and the dead letters; return once Kafka has
        answered for each. Raises Unavailable, having produced nothing, when it cannot.

        When some records of a request fail, the client retries all of them. The events
        Kafka did acknowledge in that request are remembered by id and content (ten minutes,
        in this process), and the retry skips exact copies of them, so it does not write them
        twice; another event reusing one of those ids is written (the cache sees one
        process's failed requests only: it cannot judge ids, and a silent skip would lose
        the event). What remains
        possible is a duplicate of a record whose acknowledgement was lost (Kafka wrote it,
        the producer timed out), or a retry that reaches another worker process: consumers
        deduplicate by event_id."""
        if self._closing:
            raise Unavailable("shutting_down", "the service is shutting down")
        if self._fatal is not None:
            raise Unavailable("kafka_down", f"the Kafka producer failed: {self._fatal}")
        if not self._up:
            raise Unavailable("kafka_down", "Kafka is unreachable")
        fresh = self._written.unwritten(accepted, time.monotonic())
        skipped = len(accepted) - len(fresh)
        accepted = fresh
        events: list[_Message] = [{"key": a.doc_type.encode(), "value": a.value} for a in accepted]
        # Each event's summary, in the same order (none when the topic is not set).
        summaries: list[_Message] = (
            [{"key": a.doc_type.encode(), "value": a.summary_record()} for a in accepted]
            if self._topics.summaries
            else []
        )
        letters: list[_Message] = []
        if rejected:
            now = int(time.time() * 1000)
            limit, source = self._limit, source or self._source  # the gateway's, if known
            letters = [
                {"value": dead_letter_value(r.raw, r.error, source, now, limit)} for r in rejected
            ]
        count = len(events) + len(summaries) + len(letters)
        size = sum([len(m["value"]) for batch in (events, summaries, letters) for m in batch])
        o = self._options
        if self._inflight_records and (
            self._inflight_records + count > o.max_inflight_records
            or self._inflight_bytes + size > o.max_inflight_bytes
        ):
            raise Unavailable(
                "queue_full",
                f"the producer queue is full ({self._inflight_records} records, "
                f"{self._inflight_bytes} bytes awaiting Kafka's acknowledgement)",
            )
        if not count:
            return Delivery(0, 0, [], skipped)
        acks = _Acks(asyncio.get_running_loop())
        self._inflight(count, size)
        self._wake.set()
        started = time.perf_counter()
        entry = (acks, events, summaries, letters)
        self._waiting.append(entry)
        try:
            self._start_round()
            # Every produced record gets a report within message.timeout.ms, and a round
            # starts once the one before it is reported; the margin only guards against a
            # polling task that died.
            await asyncio.wait_for(asyncio.shield(acks.future), o.ack_timeout_s * 3 + 5)
            failed = acks.failed + count - (acks.expected or 0)
            if failed:
                lost = acks.failed_values | {
                    m["value"] for batch in (events, summaries) for m in batch if "_error" in m
                }
                # An event counts as written only with its summary: the retry writes both.
                unwritten = {m["value"] for m in events if m["value"] in lost}
                if summaries:
                    unwritten |= {
                        e["value"]
                        for e, m in zip(events, summaries, strict=True)
                        if m["value"] in lost
                    }
                self._written.remember(accepted, unwritten, time.monotonic())
        except TimeoutError:
            acks.errors.append("no delivery report in time")
            failed = count - (acks.acked - acks.failed)
        finally:
            if entry in self._waiting:
                # Timed out or cancelled before its round: never produced, nothing written.
                self._waiting.remove(entry)
            self._inflight(-count, -size)
        self._metrics.produce.observe(time.perf_counter() - started)
        if failed:
            log.warning(
                "records not acknowledged by Kafka",
                extra={"records": count, "failed": failed, "errors": acks.errors},
            )
        return Delivery(count, failed, list(acks.errors), skipped)

    def _round_done(self) -> None:
        # Called from a delivery report: produce from the event loop, not inside poll().
        # Closing, the last reports come from flush(), maybe with no loop running: what still
        # waits then belongs to requests that were cancelled.
        self._rounds -= 1
        if self._waiting and not self._closing:
            asyncio.get_running_loop().call_soon(self._start_round)

    def _start_round(self) -> None:
        """Produce the records of every waiting request: one produce_batch per request and
        topic (librdkafka queues a list in one call, where a produce() per record costs more:
        docs/benchmarks.md)."""
        if self._rounds >= _ROUNDS or not self._waiting or self._closing:
            return
        waiting, self._waiting = self._waiting, []
        round_ = _Round(self._round_done)
        for acks, events, summaries, letters in waiting:
            acks.round = round_
            produced = 0
            batches = [
                (self._topics.snapshots, events),
                (self._topics.summaries, summaries),
                (self._topics.dead_letter, letters),
            ]
            for i, (topic, messages) in enumerate(batches):
                if not messages:
                    continue
                try:
                    # Past librdkafka's own bounds (above ours), it marks the records it did
                    # not queue with "_error" instead of raising.
                    queued = self._producer.produce_batch(
                        topic, messages, on_delivery=acks.on_delivery
                    )
                except Exception as exc:  # this request's remaining records are not produced
                    log.exception("produce failed")
                    for _, rest in batches[i:]:
                        for m in rest:
                            m["_error"] = str(exc)
                    acks.errors.append(f"not produced: {exc}")
                    break
                produced += queued
                if queued < len(messages):
                    acks.errors.extend(
                        f"not produced: {m['_error']}" for m in messages if "_error" in m
                    )
            del acks.errors[_ERRORS_KEPT:]
            round_.left += produced
            acks.seal(produced)
        if round_.left:
            self._rounds += 1
            self._metrics.round_records.observe(round_.left)

    def _inflight(self, records: int, size: int) -> None:
        self._inflight_records += records
        self._inflight_bytes += size
        self._metrics.inflight_bytes.set(self._inflight_bytes)

    # ------------------------------------------------------------------ polling

    async def _poll_loop(self) -> None:
        poll, gauge = self._producer.poll, self._metrics.queue_depth
        gauge_at = 0.0
        while True:
            try:
                poll(0)
            except Exception:  # a callback raised: keep serving the others' reports
                log.exception("error while serving Kafka producer callbacks")
            now = time.monotonic()
            if now - gauge_at > 0.1:
                gauge.set(len(self._producer))
                gauge_at = now
            if self._inflight_records:
                await asyncio.sleep(0.001)  # reports come back within milliseconds
            else:
                # Idle: only the statistics (broker up or down) need serving, until send()
                # wakes the loop.
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.05)

    def _on_stats(self, stats_json: str) -> None:
        stats: dict[str, Any] = orjson.loads(stats_json)
        brokers = stats.get("brokers", {}).values()
        self._set_up(any(b.get("state") == "UP" for b in brokers))

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = str(err)
            log.error("fatal Kafka producer error", extra={"error": str(err)})
        elif err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._set_up(False)
        else:
            log.warning("Kafka producer error", extra={"error": str(err)})

    def _set_up(self, up: bool) -> None:
        if up != self._up:
            log.info("Kafka is reachable" if up else "Kafka is unreachable")
            if up and not self._topics_checked:
                with contextlib.suppress(RuntimeError):  # no loop: flushing at close
                    asyncio.get_running_loop().run_in_executor(None, self._check_later)
                    self._topics_checked = True  # one check at a time
        self._up = up
        self._metrics.kafka_up.set(1 if up and self._fatal is None else 0)


def _digest(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16).digest()
