"""Drift events: ANCHOR_DRIFT_ALERT / _RESOLVED records on the drift-events topic, keyed by
doc type, from an idempotent producer, a batch at a time.

They need no reconciliation: their ids are deterministic and consumers deduplicate, so a
resend after a crash is harmless (the producer is idempotent within a session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from anchorwatch.alerting.integrations.base import BatchSender, Delivered, Integration
from anchorwatch.alerting.notify import NotifyError, Permanent, Retryable, error_for
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import OutboxEntry
from anchorwatch.kafkaio import client_config
from anchorwatch.settings import KafkaSettings


class EventsSender(BatchSender):
    """A stop (``interrupt``) cuts a batch short: what Kafka has not acknowledged stays
    unfinished in the outbox and is produced again at the next start (harmless: ids are
    deterministic)."""

    integration = "events"
    #: How long ``close`` waits for records still queued (their entries are sent again).
    CLOSE_WAIT_S = 2.0

    def __init__(self, kafka: KafkaSettings, topic: str, *, timeout_s: float = 30.0) -> None:
        self._topic = topic
        self._timeout_s = timeout_s
        self._interrupted = threading.Event()
        self._producer = Producer(
            client_config(
                kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": int(timeout_s * 1000),
                },
            )
        )

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]:
        results: dict[int, Delivered | NotifyError] = {}

        def done(entry_id: int) -> Callable[[KafkaError | None, Message], None]:
            def callback(err: KafkaError | None, _msg: Message) -> None:
                if err is None:
                    results[entry_id] = Delivered("sent")
                else:
                    outcome = Permanent(str(err)) if err.fatal() else Retryable(str(err))
                    results[entry_id] = error_for("events", "produce", outcome)

            return callback

        deadline = time.monotonic() + self._timeout_s + 5
        for entry in entries:
            value = orjson.dumps(entry.payload["event"])
            while not self._interrupted.is_set():
                try:
                    self._producer.produce(
                        self._topic, value, entry.doc_type.encode(), on_delivery=done(entry.id)
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
        # In short slices, so that a stop does not wait for Kafka's timeout.
        while self._producer.flush(0.2) > 0:
            if self._interrupted.is_set() or time.monotonic() > deadline:
                break
        for entry in entries:
            results.setdefault(
                entry.id, error_for("events", "produce", Retryable("not acknowledged in time"))
            )
        return results

    def interrupt(self) -> None:
        self._interrupted.set()

    def close(self) -> None:
        self._producer.flush(self.CLOSE_WAIT_S)


def describe(settings: AlertingSettings, entry: OutboxEntry) -> dict[str, Any]:
    return {"topic_key": entry.doc_type, "event": entry.payload["event"]}


EVENTS = Integration(
    name="events",
    # Every change that opens, re-opens or escalates an incident is an alert; progress is not.
    actions={"opened": "open", "reopened": "open", "updated": "open", "resolved": "resolve"},
    enabled=lambda settings: settings.alerting.drift_events,
    sender=lambda settings, caller: EventsSender(settings.kafka, settings.topics.drift_events),
    describe=describe,
    carries="event",
)
