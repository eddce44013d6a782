"""The one status classifier and the one retry policy (fake clock: no real waiting)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import partial

import pytest
from prometheus_client import CollectorRegistry

from anchorwatch.alerting.notify import (
    ManualClock,
    NotifyMetrics,
    Ok,
    OneAttempt,
    Permanent,
    PermanentError,
    Retryable,
    RetryableError,
    RetryPolicy,
    classify,
    failure,
    parse_retry_after,
)


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"),
    [
        (200, None, Ok()),
        (201, None, Ok()),
        (204, None, Ok()),
        (None, None, Retryable("boom")),
        (429, "7", Retryable("HTTP 429: boom", 7.0)),
        (429, None, Retryable("HTTP 429: boom", None)),
        (500, None, Retryable("HTTP 500: boom")),
        (502, "2.5", Retryable("HTTP 502: boom", 2.5)),
        (503, "garbage", Retryable("HTTP 503: boom", None)),
        (504, None, Retryable("HTTP 504: boom")),
        (400, None, Permanent("HTTP 400: boom")),
        (401, None, Permanent("HTTP 401: boom")),
        (403, None, Permanent("HTTP 403: boom")),
        (404, None, Permanent("HTTP 404: boom")),
        (408, None, Permanent("HTTP 408: boom")),
        (410, None, Permanent("HTTP 410: boom")),
        (302, None, Permanent("HTTP 302: boom")),
    ],
)
def test_classifier(status: int | None, retry_after: str | None, expected: object) -> None:
    assert classify(status, "boom", retry_after) == expected


def test_failure_turns_an_ok_status_with_an_error_body_into_permanent() -> None:
    assert failure(classify(200), "ok:false") == Permanent("ok:false")
    assert failure(classify(503, "x"), "unused") == Retryable("HTTP 503: x")


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 5, 14, 0, tzinfo=UTC).timestamp()
    date = format_datetime(datetime(2026, 1, 5, 14, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after(date, now=lambda: now) == 30.0
    assert parse_retry_after(" 12 ") == 12.0
    assert parse_retry_after(3) == 3.0
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after("99999999") == 3600.0  # capped: a broken header can't park us
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
    assert parse_retry_after(None) is None


def _flaky(outcomes: list[Exception | str]) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def op() -> str:
        calls.append(1)
        item = outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return calls, op


def test_retries_honour_retry_after_exactly_never_sooner() -> None:
    clock = ManualClock()
    policy = RetryPolicy(max_attempts=5, sleep=clock.sleep, clock=clock, rand=lambda: 0.0)
    limited = RetryableError("slack", "chat.postMessage", Retryable("HTTP 429", 7.0))
    calls, op = _flaky([limited, limited, "posted"])
    assert policy.call(op, service="slack", operation="chat.postMessage") == "posted"
    assert len(calls) == 3
    assert clock.sleeps == [7.0, 7.0]
    # With jitter the wait only grows: up to +10% of Retry-After, never below it.
    jittery = RetryPolicy(sleep=clock.sleep, clock=clock, rand=lambda: 1.0)
    assert jittery.delay(1, 7.0) == pytest.approx(7.7)
    assert jittery.delay(3, 7.0) >= 7.0


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    low = RetryPolicy(base_delay_s=1, max_delay_s=20, jitter=0.5, rand=lambda: 1.0)
    high = RetryPolicy(base_delay_s=1, max_delay_s=20, jitter=0.5, rand=lambda: 0.0)
    assert [high.delay(n, None) for n in range(1, 7)] == [1, 2, 4, 8, 16, 20]
    assert [low.delay(n, None) for n in range(1, 7)] == [0.5, 1, 2, 4, 8, 10]


def test_gives_up_after_max_attempts_with_the_last_retry_after() -> None:
    clock = ManualClock()
    policy = RetryPolicy(max_attempts=3, sleep=clock.sleep, clock=clock, rand=lambda: 0.0)
    error = RetryableError("jira", "create", Retryable("HTTP 503", 2.0))
    calls, op = _flaky([error, error, error, "never"])
    with pytest.raises(RetryableError) as raised:
        policy.call(op, service="jira", operation="create")
    assert len(calls) == 3
    assert raised.value.attempts == 3
    assert raised.value.retry_after_s == 2.0  # an outbox can schedule the next try with it


def test_elapsed_budget_stops_before_a_wait_that_would_exceed_it() -> None:
    clock = ManualClock()
    policy = RetryPolicy(
        max_attempts=100, max_elapsed_s=60, sleep=clock.sleep, clock=clock, rand=lambda: 0.0
    )
    error = RetryableError("slack", "chat.update", Retryable("HTTP 429", 25.0))
    calls, op = _flaky([error] * 10)
    with pytest.raises(RetryableError):
        policy.call(op, service="slack", operation="chat.update")
    assert clock.sleeps == [25.0, 25.0]  # a third wait would end at 75 s > 60 s
    assert len(calls) == 3


def test_permanent_failures_are_not_retried() -> None:
    clock = ManualClock()
    policy = RetryPolicy(sleep=clock.sleep, clock=clock)
    error = PermanentError("slack", "chat.postMessage", Permanent("ok:false channel_not_found"))
    calls, op = _flaky([error, "never"])
    with pytest.raises(PermanentError, match="channel_not_found"):
        policy.call(op, service="slack", operation="chat.postMessage")
    assert len(calls) == 1
    assert clock.sleeps == []


def test_metrics_count_attempts_waits_and_give_ups() -> None:
    registry = CollectorRegistry()
    clock = ManualClock()
    policy = RetryPolicy(
        max_attempts=2, sleep=clock.sleep, clock=clock, rand=lambda: 0.0,
        metrics=NotifyMetrics(registry),
    )  # fmt: skip
    error = RetryableError("jira", "search", Retryable("HTTP 429", 3.0))
    _, op = _flaky([error, "ok"])
    policy.call(op, service="jira", operation="search")
    _, op = _flaky([error, error])
    with pytest.raises(RetryableError):
        policy.call(op, service="jira", operation="search")

    value = partial(_value, registry)

    assert value("anchorwatch_alerting_notify_attempts_total", service="jira", outcome="ok") == 1
    assert (
        value("anchorwatch_alerting_notify_attempts_total", service="jira", outcome="retryable")
        == 3
    )
    assert value("anchorwatch_alerting_notify_gave_up_total", service="jira") == 1
    assert value("anchorwatch_alerting_notify_retry_wait_seconds_total", service="jira") == 6.0
    assert value("anchorwatch_alerting_notify_seconds_count", service="jira") == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"jitter": 1.5}, {"base_delay_s": 10, "max_delay_s": 1}],
)
def test_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_one_attempt_calls_once_and_counts_it() -> None:
    """The service's caller: no retry, no wait (its drainer retries), every call counted."""
    registry = CollectorRegistry()
    caller = OneAttempt(NotifyMetrics(registry))
    error = RetryableError("slack", "chat.postMessage", Retryable("HTTP 503"))
    calls, op = _flaky([error, "ok"])
    with pytest.raises(RetryableError):
        caller.call(op, service="slack", operation="chat.postMessage")
    assert len(calls) == 1
    assert caller.call(op, service="slack", operation="chat.postMessage") == "ok"

    value = partial(_value, registry)

    assert value("anchorwatch_alerting_notify_attempts_total", service="slack", outcome="ok") == 1
    assert (
        value("anchorwatch_alerting_notify_attempts_total", service="slack", outcome="retryable")
        == 1
    )
    assert value("anchorwatch_alerting_notify_gave_up_total", service="slack") == 0
    assert value("anchorwatch_alerting_notify_seconds_count", service="slack") == 2


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0
