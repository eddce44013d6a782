"""The outbox drainer's test bench, for the tests of its outcomes, its rates and its sender
thread: a real state file (``World``), a manual clock, and in-process senders standing for
the remote side, one entry per call (``OneByOne``) or in batches (``Batches``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.integrations.base import Delivered
from anchorwatch.alerting.notify import (
    ManualClock,
    NotifyError,
    Permanent,
    PermanentError,
    Retryable,
    RetryableError,
    RetryPolicy,
)
from anchorwatch.alerting.outbox import Drainer
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import BatchWrite, OutboxEntry, Store
from tests.support.alerting_store import entry, row

START_S = 1_000.0
#: No jitter: the backoff is exactly 1, 2, 4 ... s, or the server's Retry-After.
RETRY = RetryPolicy(base_delay_s=1.0, max_delay_s=60.0, jitter=0.0)

Answer = Delivered | NotifyError | Exception


def retryable(message: str = "503", retry_after_s: float | None = None) -> RetryableError:
    return RetryableError("remote", "post", Retryable(message, retry_after_s))


def permanent(message: str = "channel_not_found") -> PermanentError:
    return PermanentError("remote", "post", Permanent(message))


@dataclass
class OneByOne:
    """A sender taking one entry per call; ``answers`` per incident, in order (then sent)."""

    integration: str = "slack"
    answers: dict[str, list[Answer]] = field(default_factory=dict)
    found: dict[str, Delivered] = field(default_factory=dict)  # what reconcile finds
    sent: list[tuple[str, int]] = field(default_factory=list)
    reconciled: list[str] = field(default_factory=list)
    interrupted: int = 0
    on_send: Callable[[], None] = lambda: None
    #: The rate key (Slack: the channel) of an incident's entries: its id up to the first
    #: "-" when ``keyed`` ("a-1" -> "a"), else none (one for all, as Jira).
    keyed: bool = False

    def bind(self, store: Store) -> None:
        pass

    def rate_key(self, e: OutboxEntry) -> str | None:
        return e.incident_id.split("-")[0] if self.keyed else None

    def close(self) -> None:
        pass

    def interrupt(self) -> None:
        self.interrupted += 1

    def reconcile(self, e: OutboxEntry) -> Delivered | None:
        self.reconciled.append(e.incident_id)
        return self.found.get(e.incident_id)

    def send(self, e: OutboxEntry) -> Delivered:
        self.sent.append((e.incident_id, e.seq))
        self.on_send()
        queue = self.answers.get(e.incident_id, [])
        answer = queue.pop(0) if queue else Delivered("sent", {"slack_ts": f"{e.seq}.0"})
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class Batches:
    """A sender taking entries in batches; ``answers`` per incident, in order (then sent)."""

    integration: str = "events"
    answers: dict[str, list[Delivered | NotifyError]] = field(default_factory=dict)
    batches: list[list[str]] = field(default_factory=list)

    def bind(self, store: Store) -> None:
        pass

    def close(self) -> None:
        pass

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]:
        self.batches.append([e.incident_id for e in entries])
        out: dict[int, Delivered | NotifyError] = {}
        for e in entries:
            queue = self.answers.get(e.incident_id, [])
            out[e.id] = queue.pop(0) if queue else Delivered("sent")
        return out


@dataclass
class World:
    tmp_path: Path
    clock: ManualClock = field(default_factory=lambda: ManualClock(START_S))
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.store = Store(self.tmp_path)
        self.metrics = ServiceMetrics(self.registry)

    def add(self, integration: str, *incidents: str, seqs: int = 1) -> None:
        """Each incident with entries 1..seqs for ``integration``, due now, consumed 2 s ago."""
        consumed_ms = self.clock.ms() - 2_000
        self.store.commit_batch(
            BatchWrite(
                now_ms=self.clock.ms(),
                incidents=[row(i) for i in incidents],
                outbox=[
                    entry(i, s, integration, consumed_ms=consumed_ms)
                    for i in incidents
                    for s in range(1, seqs + 1)
                ],
            ),
            keep_verdict_ids=0,
        )

    def drainer(self, sender: Any, **kwargs: Any) -> Drainer:
        return Drainer(
            sender, Store(self.tmp_path), RETRY, self.metrics, clock=self.clock, **kwargs
        )

    def rows(self) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r["incident_id"], r["seq"]): r for r in self.store.outbox_rows()}

    def count(self, integration: str, outcome: str) -> float | None:
        return self.registry.get_sample_value(
            "anchorwatch_alerting_notifications_total",
            {"integration": integration, "outcome": outcome},
        )

    def now_ms(self) -> int:
        return self.clock.ms()
