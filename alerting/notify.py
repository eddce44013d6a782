"""What every integration shares: the outcome of one call, the one status classifier and the
one retry policy.

Integrations (Slack, Jira) turn their client library's results into an ``Outcome`` with
``classify`` and raise ``NotifyError`` for anything but ``Ok``; they never loop or sleep
themselves: every call goes through a ``Caller``.

Who retries: in the service, the outbox's drainer, alone (see ``outbox.Drainer``): its
notifiers get a ``OneAttempt`` caller, which makes each call once and counts it. The
``RetryPolicy`` gives the drainer its delays (exponential backoff with jitter, a server's
``Retry-After`` honoured, never retried sooner). ``RetryPolicy.call`` runs that schedule in
a loop, bounded by attempts and elapsed time, for callers that have no outbox (``alerting
send-test``); when it gives up on a retryable failure it raises ``RetryableError`` carrying
the last ``retry_after_s``. The clock and the sleep are injected so tests run minutes of
outage in milliseconds.

Ours, not tenacity's or slack-sdk's RetryHandlers: those retry inside the call, and a repeat
here must wait for the outbox to reconcile first (the clients' own retries are off); what the
drainer needs is the schedule alone (``delay``), and tenacity's waits have neither this jitter
nor ``Retry-After`` and its time budget reads its own clock, not the injected one.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from anchorwatch.errors import AnchorwatchError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A Retry-After beyond this is treated as this: a broken header must not park us for days.
MAX_RETRY_AFTER_S = 3600.0


@dataclass(frozen=True)
class Ok:
    """Delivered."""


@dataclass(frozen=True)
class Retryable:
    """Failed, may work later; ``retry_after_s`` is the server's wish when it said one."""

    message: str
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Permanent:
    """Failed, and the same request will fail again: the message says why (the server's words)."""

    message: str


Outcome = Ok | Retryable | Permanent


class NotifyError(AnchorwatchError):
    """A call to Slack or Jira did not succeed. ``outcome`` says whether trying again helps."""

    def __init__(self, service: str, operation: str, outcome: Retryable | Permanent) -> None:
        self.service = service
        self.operation = operation
        self.outcome = outcome
        self.attempts = 1
        super().__init__(f"{service} {operation}: {outcome.message}")

    @property
    def retryable(self) -> bool:
        return isinstance(self.outcome, Retryable)

    @property
    def retry_after_s(self) -> float | None:
        return self.outcome.retry_after_s if isinstance(self.outcome, Retryable) else None


class RetryableError(NotifyError):
    outcome: Retryable


class PermanentError(NotifyError):
    outcome: Permanent


def error_for(service: str, operation: str, outcome: Retryable | Permanent) -> NotifyError:
    if isinstance(outcome, Retryable):
        return RetryableError(service, operation, outcome)
    return PermanentError(service, operation, outcome)


def attempt(
    service: str,
    operation: str,
    fn: Callable[[], T],
    outcome_of: Callable[[Exception], Retryable | Permanent | None],
) -> T:
    """Run ``fn`` once. An exception ``outcome_of`` (the integration's classifier) knows
    becomes that outcome's NotifyError, which RetryPolicy retries or gives up on; any other
    exception is a bug and propagates."""
    try:
        return fn()
    except Exception as exc:
        outcome = outcome_of(exc)
        if outcome is None:
            raise
        raise error_for(service, operation, outcome) from exc


def parse_retry_after(
    value: str | float | None, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(text).timestamp() - now()
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def classify(
    status: int | None, message: str = "", retry_after: str | float | None = None
) -> Outcome:
    """THE status classifier. ``status`` None means the request got no HTTP answer
    (connection refused or reset, timeout): retry. 2xx ok; 429 and 5xx retry (honouring
    ``Retry-After``); every other status stops, with the server's message."""
    if status is None:
        return Retryable(message or "no response (connection error)")
    if 200 <= status < 300:
        return Ok()
    text = f"HTTP {status}" + (f": {message}" if message else "")
    if status == 429 or 500 <= status < 600:
        return Retryable(text, parse_retry_after(retry_after))
    return Permanent(text)


def failure(outcome: Outcome, message: str) -> Retryable | Permanent:
    """The outcome of a call known to have failed. A status the classifier calls ok (a
    ``200`` whose body says otherwise) is a permanent failure described by ``message``."""
    return Permanent(message) if isinstance(outcome, Ok) else outcome


class NotifyMetrics:
    """Counters for calls to Slack and Jira; register on the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter(
            "anchorwatch_alerting_notify_attempts_total",
            "Calls to an integration, by how each attempt ended.",
            ["service", "outcome"],  # outcome: ok, retryable, permanent
            registry=registry,
        )
        self.gave_up = Counter(
            "anchorwatch_alerting_notify_gave_up_total",
            "Calls abandoned after the retry budget (attempts or elapsed time) ran out.",
            ["service"],
            registry=registry,
        )
        self.retry_wait = Counter(
            "anchorwatch_alerting_notify_retry_wait_seconds_total",
            "Time spent waiting between attempts (backoff and Retry-After).",
            ["service"],
            registry=registry,
        )
        self.duration = Histogram(
            "anchorwatch_alerting_notify_seconds",
            "Duration of one call including its retries.",
            ["service"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry,
        )


class ManualClock:
    """A clock and a sleep that only move when told: for tests and replays, so minutes of
    backoff take no time. ``sleeps`` records every wait asked for."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def ms(self) -> int:
        return int(self.now * 1000)


class Caller(Protocol):
    """How a notifier makes one remote call: ``op`` raises NotifyError when it fails."""

    def call(self, op: Callable[[], T], *, service: str, operation: str) -> T: ...


@dataclass(frozen=True)
class OneAttempt:
    """Each call made once, counted: the service's caller (its drainer retries)."""

    metrics: NotifyMetrics | None = field(default=None, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def call(self, op: Callable[[], T], *, service: str, operation: str) -> T:
        started = self.clock()
        try:
            result = op()
        except NotifyError as error:
            _count(self.metrics, service, "retryable" if error.retryable else "permanent")
            raise
        finally:
            if self.metrics:
                self.metrics.duration.labels(service).observe(max(self.clock() - started, 0.0))
        _count(self.metrics, service, "ok")
        return result


def _count(metrics: NotifyMetrics | None, service: str, outcome: str) -> None:
    if metrics:
        metrics.attempts.labels(service, outcome).inc()


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy: ``delay`` is the schedule the drainer waits by; ``call`` runs
    ``op`` until it succeeds, fails permanently or the budget runs out (no outbox). Delays:
    ``Retry-After`` when the server gave one (plus up to ``jitter`` of it, never less), else
    ``base * 2**(n-1)`` capped at ``max_delay_s`` with the upper ``jitter`` fraction
    randomised."""

    max_attempts: int = 6
    max_elapsed_s: float = 300.0
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    jitter: float = 0.5
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    rand: Callable[[], float] = field(default=random.random, repr=False)
    metrics: NotifyMetrics | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter: must be within 0..1")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError("base_delay_s/max_delay_s: need 0 <= base <= max")

    def delay(self, attempt: int, retry_after_s: float | None) -> float:
        """How long to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after_s is not None:
            return retry_after_s * (1.0 + self.jitter * 0.2 * self.rand())
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return backoff * (1.0 - self.jitter * self.rand())

    def call(self, op: Callable[[], T], *, service: str, operation: str) -> T:
        started = self.clock()
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    result = op()
                except PermanentError as error:
                    error.attempts = attempt
                    self._count(service, "permanent")
                    raise
                except RetryableError as error:
                    error.attempts = attempt
                    self._count(service, "retryable")
                    wait = self.delay(attempt, error.retry_after_s)
                    elapsed = self.clock() - started
                    if attempt >= self.max_attempts or elapsed + wait > self.max_elapsed_s:
                        if self.metrics:
                            self.metrics.gave_up.labels(service).inc()
                        log.error(
                            "giving up",
                            extra={
                                "service": service,
                                "operation": operation,
                                "attempts": attempt,
                                "elapsed_s": round(elapsed, 3),
                                "error": error.outcome.message,
                                "retry_after_s": error.retry_after_s,
                            },
                        )
                        raise
                    log.warning(
                        "retrying",
                        extra={
                            "service": service,
                            "operation": operation,
                            "attempt": attempt,
                            "wait_s": round(wait, 3),
                            "error": error.outcome.message,
                        },
                    )
                    if self.metrics:
                        self.metrics.retry_wait.labels(service).inc(wait)
                    self.sleep(wait)
                    continue
                self._count(service, "ok")
                return result
        finally:
            if self.metrics:
                self.metrics.duration.labels(service).observe(max(self.clock() - started, 0.0))

    def _count(self, service: str, outcome: str) -> None:
        _count(self.metrics, service, outcome)
