"""Repeated warnings and errors are written once per interval with a count of the repeats
dropped; other lines pass. librdkafka's own lines (routed through Python logging) are
limited like ours: a consumer polling an unreachable broker writes a few lines, not one per
failed connection."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer

from anchorwatch.alerting.log_limit import RepeatLimiter, install
from anchorwatch.kafkaio import client_config
from anchorwatch.settings import KafkaSettings
from anchorwatch.stack.processes import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _logger(name: str, limiter: RepeatLimiter) -> tuple[logging.Logger, Capture]:
    capture = Capture()
    capture.addFilter(limiter)
    logger = logging.getLogger(name)
    logger.handlers[:] = [capture]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, capture


def test_one_line_per_distinct_error_per_interval_with_the_repeats_counted() -> None:
    clock = Clock()
    logger, capture = _logger("test.limit.a", RepeatLimiter(60, clock=clock))
    for i in range(500):
        # The same failure with varying figures (a port, a delay, a client number).
        logger.error(f"FAIL [consumer-{i % 3}] connect to 127.0.0.1:{9000 + i} after {i}ms")
        logger.warning("kafka consumer error", extra={"error": f"_TRANSPORT after {i}ms"})
        logger.warning("kafka consumer error", extra={"error": "_ALL_BROKERS_DOWN"})
        logger.info("notification", extra={"seq": i})  # below WARNING: every one
        clock.now += 0.05
    infos = [r for r in capture.records if r.levelno == logging.INFO]
    others = [r for r in capture.records if r.levelno > logging.INFO]
    assert len(infos) == 500
    assert len(others) == 3  # 25 s of one failure: three distinct lines, once each
    assert all(getattr(r, "repeats_suppressed", None) is None for r in others)
    clock.now += 60
    logger.error("FAIL [consumer-1] connect to 127.0.0.1:9999 after 1ms")
    again = capture.records[-1]
    assert again.repeats_suppressed == 499  # type: ignore[attr-defined]


def test_what_is_still_held_is_written_at_the_end() -> None:
    clock = Clock()
    limiter = RepeatLimiter(60, clock=clock)
    logger, capture = _logger("test.limit.b", limiter)
    for _ in range(10):
        logger.warning("offset commit to kafka failed")
    logger.warning("once only")
    held = limiter.flush()
    assert [(r.getMessage(), r.repeats_suppressed) for r in held] == [  # type: ignore[attr-defined]
        ("offset commit to kafka failed", 9)
    ]
    assert limiter.flush() == []
    logger.warning("offset commit to kafka failed")  # forgotten: a new first line
    assert len(capture.records) == 3


def test_distinct_lines_are_bounded_in_memory() -> None:
    clock = Clock()
    limiter = RepeatLimiter(60, clock=clock, max_keys=10)
    logger, capture = _logger("test.limit.c", limiter)
    for word in ("alpha", "beta", "gamma", "delta", "epsilon") * 5:
        for suffix in "abcdefgh":
            logger.warning(f"{word}-{suffix}")
    assert len(limiter._seen) <= 10
    assert len(capture.records) >= 40  # each distinct line at least once


def test_librdkafka_lines_of_an_unreachable_broker_are_limited() -> None:
    root = logging.getLogger()
    capture = Capture()
    saved = root.handlers[:], root.level
    root.handlers[:] = [capture]
    root.setLevel(logging.INFO)
    done = install(interval_s=60)
    kafka = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    consumers = [
        Consumer(
            client_config(
                kafka,
                **{"group.id": f"g{i}", "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50},
            )
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.05)
        for c in consumers:
            c.close()
    finally:
        done()
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    from_kafka = [r for r in capture.records if r.name == "librdkafka"]
    suppressed = sum(getattr(r, "repeats_suppressed", 0) for r in from_kafka)
    # Two consumers reconnecting every 10-50 ms for 3 s: well over a hundred failures,
    # written as a handful of lines, with the rest counted on the last.
    assert len(from_kafka) <= 8, [r.getMessage() for r in from_kafka]
    assert suppressed >= 50
