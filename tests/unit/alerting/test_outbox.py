"""The outbox drainer on its own: a real state file, a manual clock and in-process senders
standing for the remote side (the Slack and Jira wire protocols are tested through the
drainer in test_service.py). What is pinned here: how each kind of result finishes an
entry, the integration's backoff and when it starts again from its base, the wait
``drain_once`` returns, where the crash points fall, the sender thread, and what the
structured log lines and metrics say."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
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
from anchorwatch.alerting.outbox import Drainer, TokenBucket
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import BatchWrite, OutboxEntry, Store
from tests.support.alerting_store import entry, row
from tests.support.waiting import wait_until

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


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# --------------------------------------------------------------------- batch senders


def test_a_batch_finishes_each_entry_by_its_own_result(world: World) -> None:
    world.add("events", "ok", "later", "never")
    sender = Batches(
        answers={"later": [retryable("503", retry_after_s=30)], "never": [permanent("bad")]}
    )
    drainer = world.drainer(sender)
    # The retryable entry pauses the integration by the server's Retry-After.
    assert drainer.drain_once() == pytest.approx(30.0)
    assert sender.batches == [["ok", "later", "never"]]
    rows = world.rows()
    assert (rows["ok", 1]["status"], rows["ok", 1]["outcome"]) == ("done", "sent")
    assert rows["ok", 1]["finished_ms"] == world.now_ms()
    assert rows["later", 1]["status"] == "attempting"
    assert rows["later", 1]["next_attempt_ms"] == world.now_ms() + 30_000
    assert rows["later", 1]["error"] == "remote post: 503"
    assert (rows["never", 1]["status"], rows["never", 1]["error"]) == ("failed", "remote post: bad")
    assert [world.count("events", o) for o in ("sent", "retry", "failed")] == [1, 1, 1]
    # Paused: nothing is sent before the retry is due, then it is.
    world.clock.now += 29.5
    assert drainer.drain_once() == 0.5
    assert len(sender.batches) == 1
    world.clock.now += 0.5
    assert drainer.drain_once() is None
    assert sender.batches[1:] == [["later"]]
    assert world.rows()["later", 1]["outcome"] == "sent"


def test_a_batch_backoff_grows_per_failed_batch_and_starts_again_after_a_clean_one(
    world: World,
) -> None:
    world.add("events", "a")
    sender = Batches(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    assert drainer.drain_once() == 1.0
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    world.clock.now += 2.0
    assert drainer.drain_once() is None  # delivered: the outage is over
    world.add("events", "b")
    sender.answers["b"] = [retryable()]
    assert drainer.drain_once() == 1.0  # a new outage starts from the base delay again


# --------------------------------------------------------------------- one entry at a time


def test_one_failure_pauses_the_round_and_the_backoff_starts_again_after_a_success(
    world: World,
) -> None:
    world.add("slack", "a", "b", "c")
    sender = OneByOne(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    # "a" fails: b and c are not tried while the integration is paused.
    assert drainer.drain_once() == 1.0
    assert sender.sent == [("a", 1)]
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    assert sender.sent == [("a", 1), ("a", 1)]
    world.clock.now += 2.0
    assert drainer.drain_once() is None
    assert sorted(sender.sent[2:]) == [("a", 1), ("b", 1), ("c", 1)]
    # The second try of "a" reconciled first (it may have landed), found nothing, sent.
    assert sender.reconciled == ["a", "a"]
    a = world.rows()["a", 1]
    # Three attempts; the first one's time is kept, the finish is the last one's.
    assert (a["attempts"], a["first_attempt_ms"]) == (3, int(START_S * 1000))
    assert a["finished_ms"] == world.now_ms() == int(START_S * 1000) + 3_000
    world.add("slack", "d")
    sender.answers["d"] = [retryable()]
    assert drainer.drain_once() == 1.0


def test_a_reconciled_entry_resets_the_backoff_and_is_not_sent_again(world: World) -> None:
    world.add("slack", "a")
    sender = OneByOne(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    assert drainer.drain_once() == 1.0
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    world.clock.now += 2.0
    sender.found["a"] = Delivered("reconciled", {"slack_ts": "9.9"})
    assert drainer.drain_once() is None
    assert sender.sent == [("a", 1), ("a", 1)]
    assert world.rows()["a", 1]["outcome"] == "reconciled"
    (listing,) = world.store.list_incidents(open_only=True, limit=5)
    assert listing.refs.slack_ts == "9.9"  # what reconciling found is kept
    world.add("slack", "b")
    sender.answers["b"] = [retryable()]
    assert drainer.drain_once() == 1.0


def test_an_unexpected_error_backs_off_and_keeps_its_type_and_text(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.add("slack", "a")
    sender = OneByOne(answers={"a": [KeyError("ts")]})
    drainer = world.drainer(sender)
    with caplog.at_level(logging.WARNING, logger="anchorwatch.alerting.outbox"):
        assert drainer.drain_once() == 1.0
    assert world.rows()["a", 1]["error"] == "KeyError: 'ts'"
    (failed,) = [r for r in caplog.records if r.getMessage() == "sending failed unexpectedly"]
    assert (failed.integration, failed.incident_id) == ("slack", "a")  # type: ignore[attr-defined]
    assert failed.exc_info is not None


def test_a_permanent_failure_ends_the_entry_and_the_next_one_goes(world: World) -> None:
    world.add("slack", "a", seqs=2)
    sender = OneByOne(answers={"a": [permanent()]})
    assert world.drainer(sender).drain_once() is None
    assert sender.sent == [("a", 1), ("a", 2)]
    rows = world.rows()
    assert (rows["a", 1]["status"], rows["a", 2]["status"]) == ("failed", "done")
    assert world.count("slack", "failed") == 1


def test_a_stop_during_a_round_leaves_the_rest_pending(world: World) -> None:
    world.add("slack", "a", "b", "c")
    stop = threading.Event()
    sender = OneByOne(on_send=stop.set)
    assert world.drainer(sender).drain_once(stop) is None
    assert len(sender.sent) == 1
    assert world.store.pending_counts(["slack"]) == {"slack": 2}


# --------------------------------------------------------------------- the wait returned


def test_drain_once_returns_the_wait_until_the_next_entry_is_due(world: World) -> None:
    drainer = world.drainer(OneByOne())
    assert drainer.drain_once() is None  # nothing at all
    world.add("slack", "a")
    (e,) = world.store.due("slack", world.now_ms(), 10)
    world.store.reschedule([e.id], world.now_ms() + 2_500, "503")
    assert drainer.drain_once() == 2.5
    world.clock.now += 2.5
    assert drainer.drain_once() is None


def test_the_rate_limit_is_a_token_bucket(world: World) -> None:
    unlimited = TokenBucket(None, 1, world.clock)
    assert [unlimited.wait_s() for _ in range(5)] == [0.0] * 5
    bucket = TokenBucket(2.0, 3, world.clock)
    assert [bucket.wait_s() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
    # A long idle refills up to the burst, no further.
    world.clock.now += 3_600
    assert [bucket.wait_s() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
    world.clock.now += 0.25
    assert bucket.wait_s() == pytest.approx(0.25)  # half a token there: half of 0.5 s left


def test_a_rate_limited_round_returns_the_wait_for_the_next_token(world: World) -> None:
    world.add("slack", "a", "b", "c")
    sender = OneByOne()
    drainer = world.drainer(sender, rate_per_s=2.0, burst=2)
    assert drainer.drain_once() == pytest.approx(0.5)
    assert len(sender.sent) == 2
    world.clock.now += 0.5
    assert drainer.drain_once() is None
    assert len(sender.sent) == 3


# --------------------------------------------------------------------- rate keys


def drain_until(world: World, drainer: Drainer, until_s: float) -> None:
    """Rounds as the sender thread runs them, each after the wait the last returned (at
    least 5 ms, at most a second, as ``Drainer.run`` sleeps), until nothing is left."""
    while (wait := drainer.drain_once()) is not None:
        wait = min(max(wait, 0.005), 1.0)
        if world.clock.now + wait > until_s:
            break
        world.clock.now += wait


def test_each_rate_key_has_its_own_rate_so_one_backlog_holds_up_no_other(world: World) -> None:
    # Channel a's backlog is older than channel b's entries.
    world.add("slack", "a-1", "a-2", "a-3", "a-4", "b-1", "b-2")
    sender = OneByOne(keyed=True)
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1)
    assert drainer.drain_once() == pytest.approx(1.0)
    assert sender.sent == [("a-1", 1), ("b-1", 1)]
    world.clock.now += 1.0
    assert drainer.drain_once() == pytest.approx(1.0)
    assert sender.sent[2:] == [("a-2", 1), ("b-2", 1)]
    # Channel a alone is held to its rate as before.
    world.clock.now += 0.5
    assert drainer.drain_once() == pytest.approx(0.5)
    assert len(sender.sent) == 4
    drain_until(world, drainer, START_S + 10)
    assert sender.sent[4:] == [("a-3", 1), ("a-4", 1)]
    assert world.clock.now == pytest.approx(START_S + 3.0)


def test_a_round_of_waiting_keys_returns_the_soonest_keys_wait(world: World) -> None:
    world.add("slack", "a-1", "a-2")
    sender = OneByOne(keyed=True)
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1)
    assert drainer.drain_once() == pytest.approx(1.0)
    world.clock.now += 0.5
    world.add("slack", "b-1", "b-2")
    # a's next token is half a second away, b's a whole second.
    assert drainer.drain_once() == pytest.approx(0.5)
    assert sender.sent == [("a-1", 1), ("b-1", 1)]


def test_a_key_behind_a_whole_page_of_another_keys_backlog_still_goes(world: World) -> None:
    world.add("slack", *(f"a-{i}" for i in range(10)), "b-1")
    sender = OneByOne(keyed=True)
    # A page holds four entries: the first pages are all channel a's.
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1, batch_size=4)
    assert drainer.drain_once() == pytest.approx(1.0)
    assert sender.sent == [("a-0", 1), ("b-1", 1)]


def test_a_sender_without_keys_never_reads_past_its_page(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.add("slack", *(f"a-{i}" for i in range(10)))
    drainer = world.drainer(OneByOne(), rate_per_s=1.0, burst=1, batch_size=4)
    limits: list[int] = []
    due = drainer._store.due

    def spy(integration: str, now_ms: int, limit: int) -> list[OutboxEntry]:
        limits.append(limit)
        return due(integration, now_ms, limit)

    monkeypatch.setattr(drainer._store, "due", spy)
    assert drainer.drain_once() == pytest.approx(1.0)
    assert limits == [4, 4]  # the round, then the page its one key waits for


def test_one_key_alone_is_limited_as_before(world: World) -> None:
    world.add("slack", "a-1", "a-2", "a-3", "a-4", "a-5")
    sender = OneByOne(keyed=True)
    drainer = world.drainer(sender, rate_per_s=2.0, burst=2, batch_size=2)
    assert drainer.drain_once() == pytest.approx(0.5)
    assert [i for i, _ in sender.sent] == ["a-1", "a-2"]
    world.clock.now += 0.25
    assert drainer.drain_once() == pytest.approx(0.25)
    assert len(sender.sent) == 2
    drain_until(world, drainer, START_S + 10)
    # Two at once (the burst), then two a second.
    assert [i for i, _ in sender.sent] == ["a-1", "a-2", "a-3", "a-4", "a-5"]
    assert world.clock.now == pytest.approx(START_S + 1.5)


def test_the_total_rate_caps_all_keys_together(world: World) -> None:
    world.add("slack", *(f"{key}-{i}" for i in range(10) for key in "abcd"))
    times: list[float] = []
    sender = OneByOne(keyed=True, on_send=lambda: times.append(world.clock.now))
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1, total_rate_per_s=2.0)
    drain_until(world, drainer, START_S + 5)
    # Four channels at 1/s each, but two a second in all: the burst of one, then one per 0.5 s.
    assert times == pytest.approx([START_S + 0.5 * i for i in range(11)])
    assert {i.split("-")[0] for i, _ in sender.sent} == set("abcd")  # every channel had turns


def test_the_buckets_kept_stay_bounded_and_a_key_still_waiting_is_not_forgotten(
    world: World,
) -> None:
    world.add("slack", "hot-1", seqs=2)
    world.add("slack", *(f"k{i}-1" for i in range(200)))
    sent_at: dict[tuple[str, int], float] = {}
    kept: list[int] = []
    drainer: Drainer

    def on_send() -> None:
        sent_at[sender.sent[-1]] = world.clock.now
        kept.append(len(drainer._buckets))

    sender = OneByOne(keyed=True, on_send=on_send)
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1, total_rate_per_s=10.0)
    drainer.MAX_BUCKETS = 5
    drain_until(world, drainer, START_S + 60)
    assert len(sent_at) == 202
    # 201 keys, but only those used in the last second (the total rate: 10) are kept.
    assert max(kept) <= 12
    # The hot channel's bucket, empty while the others came and went, held its rate.
    assert sent_at["hot-1", 2] - sent_at["hot-1", 1] == pytest.approx(1.0)


def test_a_key_renamed_by_a_send_keeps_its_bucket(world: World) -> None:
    """Slack: a channel routed by name is known by its id once posted to."""
    world.add("slack", "a-1", "a-2")

    @dataclass
    class Learning(OneByOne):
        def rate_key(self, e: OutboxEntry) -> str:
            return "C0ID" if self.sent else "#name"

    sender = Learning()
    drainer = world.drainer(sender, rate_per_s=1.0, burst=1)
    assert drainer.drain_once() == pytest.approx(1.0)
    assert sender.sent == [("a-1", 1)]  # one channel: not one more under its new name


def test_an_entry_whose_key_cannot_be_read_still_goes_to_the_sender(world: World) -> None:
    """Its send fails (and is retried or failed) as any unreadable entry's does."""
    world.add("slack", "a-1")

    @dataclass
    class Unreadable(OneByOne):
        def rate_key(self, e: OutboxEntry) -> str:
            raise KeyError("view")

    sender = Unreadable()
    assert world.drainer(sender, rate_per_s=1.0).drain_once() is None
    assert sender.sent == [("a-1", 1)]


# --------------------------------------------------------------------- crash points


def test_crash_points_fall_around_the_send_and_inside_the_done_commit(world: World) -> None:
    world.add("slack", "a")
    world.add("events", "b")
    seen: list[tuple[str, str]] = []
    world.drainer(OneByOne(), crash=lambda point, i: seen.append((point, i))).drain_once()
    world.drainer(Batches(), crash=lambda point, i: seen.append((point, i))).drain_once()
    assert seen == [
        ("send_before", "slack"),
        ("send_after", "slack"),
        ("done_in_commit", "slack"),
        ("send_before", "events"),
        ("send_after", "events"),
        ("done_in_commit", "events"),
    ]


class Died(BaseException):
    """The process dying at a crash point."""


@pytest.mark.parametrize(
    ("point", "sent", "outcome"),
    [("send_before", [], None), ("send_after", [("a", 1)], "reconciled")],
)
def test_a_crash_around_the_send_leaves_the_entry_to_be_reconciled(
    world: World, point: str, sent: list[tuple[str, int]], outcome: str | None
) -> None:
    world.add("slack", "a")
    sender = OneByOne()

    def die(at: str, integration: str) -> None:
        if at == point:
            raise Died

    with pytest.raises(Died):
        world.drainer(sender, crash=die).drain_once()
    assert sender.sent == sent
    assert (world.rows()["a", 1]["status"], world.rows()["a", 1]["attempts"]) == ("attempting", 1)
    # After the restart, the entry is asked about before anything is sent again.
    if outcome:
        sender.found["a"] = Delivered("reconciled")
    world.drainer(sender).drain_once()
    assert sender.reconciled == ["a"]
    assert world.rows()["a", 1]["outcome"] == (outcome or "sent")
    assert len(sender.sent) == 1


# --------------------------------------------------------------------- metrics and logs


def test_latency_is_measured_from_consumption_for_what_was_delivered(world: World) -> None:
    world.add("slack", "a", "b")
    sender = OneByOne(answers={"b": [Delivered("suppressed")]})
    world.drainer(sender).drain_once()
    labels = {"integration": "slack"}
    name = "anchorwatch_alerting_notification_latency_seconds"
    # Only "a" was delivered; it was consumed 2 s before.
    assert world.registry.get_sample_value(f"{name}_count", labels) == 1
    assert world.registry.get_sample_value(f"{name}_sum", labels) == pytest.approx(2.0)
    assert world.count("slack", "suppressed") == 1


def extra(records: list[logging.LogRecord], message: str) -> dict[str, Any]:
    """The structured fields of the one record with ``message`` (what the JSON log adds)."""
    (record,) = [r for r in records if r.getMessage() == message]
    standard = {*vars(logging.makeLogRecord({})), "message", "asctime"}
    return {k: v for k, v in vars(record).items() if k not in standard}


def test_log_lines_name_the_entry_the_outcome_and_the_error(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.add("slack", "a", "b")
    world.add("slack", "c", seqs=2)
    world.store.mark_done([world.store.due("slack", world.now_ms(), 10)[2].id], "sent", 1)
    sender = OneByOne(
        answers={"a": [permanent("channel_not_found")], "c": [retryable("429", 7.25)]}
    )
    with caplog.at_level(logging.INFO, logger="anchorwatch.alerting.outbox"):
        world.drainer(sender).drain_once()
    assert extra(caplog.records, "notification failed for good") == {
        "integration": "slack",
        "action": "open",
        "incident_id": "a",
        "seq": 1,
        "error": "remote post: channel_not_found",
    }
    assert extra(caplog.records, "notification") == {
        "integration": "slack",
        "action": "open",
        "kind": "opened",
        "incident_id": "b",
        "seq": 1,
        "outcome": "sent",
    }
    assert extra(caplog.records, "notification rescheduled") == {
        "integration": "slack",
        "entries": 1,
        "retry_in_s": 7.25,
        "error": "remote post: 429",
    }
    assert sender.sent == [("a", 1), ("b", 1), ("c", 2)]


# --------------------------------------------------------------------- the sender thread
#
# These tests wait on what the thread observably did, never on a fixed sleep: a Watch
# records, in order, each look at the store for due entries, each wait on the wake (the
# timeout it asked for, whether the wake was already set, how the wait ended) and each
# send. What they assert is that record, so a slow machine only makes them slower.


@dataclass(frozen=True)
class Look:
    """The thread asked the store for the entries due now; it found ``found``."""

    found: int


@dataclass(frozen=True)
class Sent:
    incident_id: str
    at: float  # time.monotonic()


@dataclass
class Wait:
    """One wait of the thread on its wake."""

    timeout_s: float | None  # what the thread asked for
    set_on_entry: bool  # the wake was already set: the wait returns at once
    woken: bool | None = None  # True: a wake ended it; False: its timeout; None: waiting


class Watch:
    """What the sender thread did, in order (see above); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timeline: list[Look | Wait | Sent] = []

    def add(self, item: Look | Wait | Sent) -> None:
        with self._lock:
            self._timeline.append(item)

    def timeline(self) -> list[Look | Wait | Sent]:
        """A copy, as it is now (a wait still running stays ``woken=None`` in it)."""
        with self._lock:
            return [replace(i) if isinstance(i, Wait) else i for i in self._timeline]

    def waits(self) -> list[Wait]:
        return [i for i in self.timeline() if isinstance(i, Wait)]

    def waiting(self) -> bool:
        """The thread is inside a wait now."""
        with self._lock:
            last = self._timeline[-1] if self._timeline else None
            return isinstance(last, Wait) and last.woken is None

    def sender(self, **kwargs: Any) -> OneByOne:
        sender = OneByOne(**kwargs)
        sender.on_send = lambda: self.add(Sent(sender.sent[-1][0], time.monotonic()))
        return sender


class WatchedStore(Store):
    """The real store; each look for due entries is recorded."""

    def __init__(self, state_dir: Path, watch: Watch) -> None:
        super().__init__(state_dir)
        self.watch = watch

    def due(self, integration: str, now_ms: int, limit: int) -> list[OutboxEntry]:
        found = super().due(integration, now_ms, limit)
        self.watch.add(Look(len(found)))
        return found


class WatchedWake(threading.Event):
    """The drainer's wake; each wait on it is recorded. The first ``untimed`` waits ignore
    their timeout (only a wake ends them), so that a test's wake cannot be overtaken by the
    thread's own timeout, however slow the machine."""

    def __init__(self, watch: Watch, untimed: int = 0) -> None:
        super().__init__()
        self.watch = watch
        self.untimed = untimed
        self._count = 0

    def wait(self, timeout: float | None = None) -> bool:
        record = Wait(timeout, set_on_entry=self.is_set())
        self._count += 1  # only the sender thread waits
        self.watch.add(record)
        woken = super().wait(None if self._count <= self.untimed else timeout)
        record.woken = woken
        return woken


def watched_drainer(
    state_dir: Path,
    sender: OneByOne,
    watch: Watch,
    metrics: ServiceMetrics,
    *,
    clock: Callable[[], float],
    untimed: int = 0,
) -> Drainer:
    drainer = Drainer(sender, WatchedStore(state_dir, watch), RETRY, metrics, clock=clock)
    drainer.wake = WatchedWake(watch, untimed)
    return drainer


def run_in_thread(drainer: Drainer) -> Callable[[], None]:
    """The sender thread started; returns what stops it."""
    stop = threading.Event()
    thread = threading.Thread(target=drainer.run, args=(stop,))
    thread.start()

    def stopped() -> None:
        stop.set()
        drainer.interrupt()
        thread.join(timeout=5)
        assert not thread.is_alive()

    return stopped


def test_the_sender_thread_drains_counts_what_is_left_and_stops_when_told(world: World) -> None:
    world.add("slack", "a", "b")
    sender = OneByOne(answers={"b": [retryable("503", retry_after_s=600)]})
    drainer = world.drainer(sender)
    stop = threading.Event()
    thread = threading.Thread(target=drainer.run, args=(stop,))
    thread.start()
    pending = "anchorwatch_alerting_outbox_pending"
    try:
        wait_until(
            lambda: world.registry.get_sample_value(pending, {"integration": "slack"}) == 1,
            10,
            "the pending gauge to count the one entry left",
        )
        assert sorted(sender.sent) == [("a", 1), ("b", 1)]
    finally:
        stop.set()
        drainer.interrupt()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert sender.interrupted == 1


def test_new_work_wakes_the_sender_thread(world: World) -> None:
    watch = Watch()
    sender = watch.sender()
    # Its idle wait (a second) ends only on a wake here: the look that finds "a" can only
    # be the wake's doing.
    drainer = watched_drainer(
        world.tmp_path, sender, watch, world.metrics, clock=world.clock, untimed=1
    )
    stop = run_in_thread(drainer)
    try:
        wait_until(watch.waiting, 10, "the idle sender thread to wait for work")
        world.add("slack", "a")
        drainer.wake.set()
        wait_until(lambda: sender.sent == [("a", 1)], 10, "the woken thread to send the new entry")
        timeline = watch.timeline()
    finally:
        stop()
    assert timeline[:4] == [
        Look(0),
        Wait(1.0, set_on_entry=False, woken=True),
        Look(1),
        Sent("a", ANY),
    ]


def test_the_sender_thread_survives_a_broken_state_file(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    drainer = world.drainer(OneByOne())
    drainer._store.close()  # every query now raises
    stop = threading.Event()
    thread = threading.Thread(target=drainer.run, args=(stop,))
    with caplog.at_level(logging.ERROR, logger="anchorwatch.alerting.outbox"):
        thread.start()
        try:
            wait_until(
                lambda: any(r.getMessage() == "sender failed" for r in caplog.records),
                10,
                'the thread to log "sender failed"',
            )
            assert thread.is_alive()
        finally:
            stop.set()
            drainer.interrupt()
            thread.join(timeout=5)
    failed = next(r for r in caplog.records if r.getMessage() == "sender failed")
    assert failed.integration == "slack"  # type: ignore[attr-defined]
    assert failed.exc_info is not None


def test_an_interrupt_wakes_the_thread_and_reaches_a_sender_that_can_be_cut_short(
    world: World,
) -> None:
    sender = OneByOne()
    drainer = world.drainer(sender)
    drainer.interrupt()
    assert drainer.wake.is_set()
    assert sender.interrupted == 1
    plain = world.drainer(Batches())  # no interrupt of its own
    plain.interrupt()
    assert plain.wake.is_set()


def test_an_idle_sender_thread_looks_once_a_second_not_in_a_loop(world: World) -> None:
    watch = Watch()
    # The first idle wait ends on the test's wake only; the next ones time out for real.
    drainer = watched_drainer(
        world.tmp_path, OneByOne(), watch, world.metrics, clock=world.clock, untimed=1
    )
    stop = run_in_thread(drainer)
    try:
        wait_until(watch.waiting, 10, "the idle sender thread to wait for work")
        drainer.wake.set()  # a wake is taken once, then it waits again
        wait_until(
            lambda: len(watch.waits()) >= 3, 10, "a second idle wait to end and a third to start"
        )
        timeline = watch.timeline()
    finally:
        stop()
    # One look at start, one for the wake, one when the idle second was over; in between,
    # waits of a second that start with the wake cleared (a wake taken is not taken again).
    assert timeline[:6] == [
        Look(0),
        Wait(1.0, set_on_entry=False, woken=True),
        Look(0),
        Wait(1.0, set_on_entry=False, woken=False),
        Look(0),
        Wait(1.0, set_on_entry=False, woken=ANY),
    ]


def test_the_sender_thread_retries_as_soon_as_the_pause_ends(tmp_path: Path) -> None:
    """A short pause (a Retry-After of 0.2 s) is waited out, not rounded up to the idle
    look once a second."""
    world = World(tmp_path, clock=ManualClock(time.time()))  # the entries' times, real
    world.add("slack", "a")
    watch = Watch()
    sender = watch.sender(answers={"a": [retryable("429", retry_after_s=0.2)]})
    drainer = watched_drainer(tmp_path, sender, watch, world.metrics, clock=time.time)
    stop = run_in_thread(drainer)
    try:
        wait_until(lambda: len(sender.sent) == 2, 10, "the retry after the 0.2 s pause")
        timeline = watch.timeline()
    finally:
        stop()
    first, second = (i for i, item in enumerate(timeline) if isinstance(item, Sent))
    pause = [w for w in timeline[first:second] if isinstance(w, Wait)]
    # Not retried before the pause was over ...
    assert timeline[second].at - timeline[first].at >= 0.2  # type: ignore[union-attr]
    # ... and waited out in waits no longer than what was left of it (not the idle second).
    assert pause, timeline
    assert all(w.timeout_s is not None and w.timeout_s <= 0.2 for w in pause), pause


def test_work_whose_wake_was_lost_is_still_picked_up_within_a_second_or_so(
    tmp_path: Path,
) -> None:
    """A wake can be lost (set just before the thread clears it); with the next entry due
    only in a minute, the thread still looks at least once a second, so new work waits no
    longer than that."""
    world = World(tmp_path, clock=ManualClock(time.time()))
    world.add("slack", "later")
    (later,) = world.store.due("slack", world.now_ms(), 10)
    world.store.reschedule([later.id], world.now_ms() + 60_000, "503")
    watch = Watch()
    sender = watch.sender()
    drainer = watched_drainer(tmp_path, sender, watch, world.metrics, clock=time.time)
    stop = run_in_thread(drainer)
    try:
        wait_until(watch.waiting, 10, "the thread to wait for the entry due in a minute")
        world.clock.now = time.time()
        world.add("slack", "new")  # no wake
        wait_until(lambda: sender.sent == [("new", 1)], 10, "the new entry sent without a wake")
        timeline = watch.timeline()
    finally:
        stop()
    sent = next(i for i, item in enumerate(timeline) if isinstance(item, Sent))
    waits = [w for w in timeline[:sent] if isinstance(w, Wait)]
    # Each wait before the send asked for a second (not the minute until "later" is due)
    # and ended by its timeout: no wake brought the new entry out.
    assert waits, timeline
    assert all((w.timeout_s, w.woken) == (1.0, False) for w in waits), waits
    assert timeline[sent - 1] == Look(1)
