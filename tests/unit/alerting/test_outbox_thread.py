"""The outbox drainer's sender thread: it drains, refreshes the pending gauge and stops when
told; survives a broken state file; wakes on new work and on an interrupt; waits out a short
pause rather than the idle second; looks once a second when idle, not in a loop; and picks
up work whose wake was lost within about a second."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.outbox import Drainer
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import OutboxEntry, Store
from tests.support.alerting_outbox import RETRY, Batches, OneByOne, World, retryable
from tests.support.waiting import wait_until


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


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
