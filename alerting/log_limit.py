"""Repeated warnings and errors, one line per distinct one per interval.

While Kafka is down every client reports every failed connection (librdkafka's own lines,
routed through Python logging by ``kafkaio.client_config``, and the consumers' error
callbacks): about 60 lines a second with nothing new in them. ``RepeatLimiter`` lets the
first line of each distinct warning or error through, drops its repeats for ``interval_s``,
and marks the next one it lets through with how many it dropped (``repeats_suppressed``);
``flush`` writes what is still counted when the service stops. Lines below WARNING (each
delivered notification, say) always pass.

Two lines are the same when their logger, level, message and ``error`` field are, digits
aside: librdkafka's "after 3ms", ports, client numbers and "5 identical error(s)" vary
from one line of the same failure to the next.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

DIGITS: Final = re.compile(r"\d+")
INTERVAL_S: Final = 60.0


@dataclass
class _Seen:
    let_through_at: float
    suppressed: int
    record: logging.LogRecord


def repeat_key(record: logging.LogRecord) -> tuple[str, int, str, str]:
    error = getattr(record, "error", "")
    return (
        record.name,
        record.levelno,
        DIGITS.sub("#", record.getMessage()),
        DIGITS.sub("#", str(error)),
    )


class RepeatLimiter(logging.Filter):
    """A handler filter (thread-safe: librdkafka's lines arrive on any polling thread)."""

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        *,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1000,
    ) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.level = level
        self._clock = clock
        self._max_keys = max_keys
        self._seen: dict[tuple[str, int, str, str], _Seen] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or getattr(record, "repeats_suppressed", None) is not None:
            return True
        key = repeat_key(record)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.let_through_at < self.interval_s:
                seen.suppressed += 1
                seen.record = record
                return False
            if seen is not None and seen.suppressed:
                record.repeats_suppressed = seen.suppressed
            if seen is None and len(self._seen) >= self._max_keys:
                self._forget(now)
            self._seen[key] = _Seen(now, 0, record)
        return True

    def _forget(self, now: float) -> None:
        """Room for a new key: drop the ones whose interval is over (a bound on memory
        when messages carry ever-new text)."""
        for key in [k for k, s in self._seen.items() if now - s.let_through_at >= self.interval_s]:
            del self._seen[key]
        if len(self._seen) >= self._max_keys:
            self._seen.clear()

    def flush(self) -> list[logging.LogRecord]:
        """The last record of each line still holding back repeats, marked with their
        count, and forgets them (write them to say what was dropped at the end)."""
        with self._lock:
            out = []
            for seen in self._seen.values():
                if seen.suppressed:
                    seen.record.repeats_suppressed = seen.suppressed
                    out.append(seen.record)
            self._seen.clear()
        return out


def install(interval_s: float = INTERVAL_S) -> Callable[[], None]:
    """Put a ``RepeatLimiter`` on every handler of the root logger. Returns what to call at
    the end: it writes the suppressed counts still held and takes the filters off."""
    limiter = RepeatLimiter(interval_s)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(limiter)

    def done() -> None:
        for record in limiter.flush():
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
        for handler in handlers:
            handler.removeFilter(limiter)

    return done
