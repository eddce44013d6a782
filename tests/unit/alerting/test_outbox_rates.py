"""The outbox drainer's rates: the token bucket, the wait a rate-limited round returns, a
bucket per rate key (Slack: per channel) so one backlog holds up no other, the total cap
over all keys, the bounded set of buckets kept, and a key renamed by a send."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from anchorwatch.alerting.outbox import Drainer, TokenBucket
from anchorwatch.alerting.store import OutboxEntry
from tests.support.alerting_outbox import START_S, OneByOne, World


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# --------------------------------------------------------------------- the token bucket


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
