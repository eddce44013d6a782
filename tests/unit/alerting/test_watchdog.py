"""The watchdog's detector (alerting/watchdog.py), pure: observations in, what is blind and
what to post out. Times are seconds from a start at 0; a check every 10 s."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from anchorwatch.alerting.watchdog import (
    Decision,
    Observation,
    Posted,
    Sight,
    Thresholds,
    Watchdog,
    decide,
)

AFTER = 140.0
T = Thresholds(blind_after_s=AFTER, forget_after_s=900.0, update_interval_s=60.0)


class Stream:
    """A detector fed one observation per check, with an input that grows as types arrive
    and an engine whose last window per type is set by the test."""

    def __init__(self, listed: Mapping[str, str] | None = None, *, group: bool = False) -> None:
        self.dog = Watchdog(T, listed=listed)  # type: ignore[arg-type]
        self.now = 0.0
        self.end = {0: 0, 1: 0}
        self.committed: dict[int, int] | None = {0: 0, 1: 0} if group else None
        self.windows: dict[str, int] = {}
        self.watermark = 0
        self.posted: Posted | None = None
        self.decisions: list[Decision] = []

    def verdict(self, doc_type: str) -> None:
        """The engine moved on for this type to the window before now (and the watermark
        with it: event time is processing time here)."""
        self.windows[doc_type] = (int(self.now // 60) - 1) * 60_000
        self.watermark = max(self.watermark, self.windows[doc_type] + 60_000)

    def check(self, arriving: Mapping[str, int] = {}) -> Sight | None:
        for p in arriving.values():
            self.end[p] += 100
        wanted = self.dog.watched() | set(arriving)
        sight = self.dog.observe(
            Observation(
                at_s=self.now,
                arrivals=dict(arriving),
                ends=dict(self.end),
                committed=dict(self.committed) if self.committed is not None else None,
                last_windows={d: self.windows.get(d) for d in wanted},
                watermark_ms=self.watermark,
            )
        )
        decision = decide(self.posted, sight, self.now, T.update_interval_s)
        if decision is not None:
            self.decisions.append(decision)
            if decision.kind == "resolved":
                self.posted = None
            else:
                s = decision.sight
                self.posted = Posted(dict(s.types), s.causes, self.now)
        self.now += 10
        return sight

    def run(
        self, seconds: float, arriving: Mapping[str, int], judged: tuple[str, ...] = ()
    ) -> Sight | None:
        """Checks for ``seconds``: the types keep arriving; those ``judged`` get a verdict
        every 60 s (the job alive for them)."""
        sight = None
        stop = self.now + seconds
        while self.now < stop:
            if judged and int(self.now) % 60 == 0:
                for d in judged:
                    self.verdict(d)
            sight = self.check(arriving)
        return sight

    def kinds(self) -> list[str]:
        return [d.kind for d in self.decisions]


def test_a_healthy_job_never_blinds_it() -> None:
    s = Stream()
    s.run(1800, {"invoice": 0, "receipt": 1}, judged=("invoice", "receipt"))
    assert s.decisions == []


def test_no_traffic_at_all_posts_nothing() -> None:
    s = Stream(group=True)
    sight = s.run(1800, {})
    assert sight is not None
    assert not sight.blind
    assert s.decisions == []


def test_a_type_without_verdicts_is_blind_after_blind_after_s_and_named() -> None:
    s = Stream()
    s.run(300, {"invoice": 0, "receipt": 1}, judged=("invoice", "receipt"))
    last_verdict = 240.0
    # The job dies right after its verdicts at 240 s: snapshots keep arriving, no verdict.
    while not s.decisions:
        noticed = s.now
        s.check({"invoice": 0, "receipt": 1})
        assert s.now - last_verdict < 300, "no notice"
    assert s.kinds() == ["opened"]
    opened = s.decisions[0].sight
    assert dict(opened.types) == {"invoice": "no_verdicts", "receipt": "no_verdicts"}
    # Not before blind_after_s, and within it plus a check: within 3 minutes.
    assert AFTER <= noticed - last_verdict <= AFTER + 10
    assert opened.since_s == last_verdict


def test_warm_up_a_new_type_gets_blind_after_s_for_its_first_verdict() -> None:
    s = Stream()
    s.run(300, {"invoice": 0}, judged=("invoice",))
    # A new type: the job needs a window, its watermark delay and a checkpoint to judge it.
    s.run(100, {"invoice": 0, "new_type": 1}, judged=("invoice",))
    s.run(600, {"invoice": 0, "new_type": 1}, judged=("invoice", "new_type"))
    assert s.decisions == []


def test_nothing_is_concluded_before_blind_after_s_from_a_start() -> None:
    s = Stream()
    sights = [s.check({"invoice": 0}) for _ in range(int(AFTER // 10))]
    assert sights == [None] * len(sights)


def test_types_join_and_recover_as_updates_then_it_resolves() -> None:
    s = Stream()
    # invoice is not judged from the start; receipt is, until minute 5.
    s.run(300, {"invoice": 0, "receipt": 1}, judged=("receipt",))
    assert s.kinds() == ["opened"]
    assert set(s.decisions[0].sight.types) == {"invoice"}
    s.run(300, {"invoice": 0, "receipt": 1})  # receipt's verdicts stop too: it joins
    assert s.kinds() == ["opened", "updated"]
    assert set(s.decisions[1].sight.types) == {"invoice", "receipt"}
    s.run(120, {"invoice": 0, "receipt": 1}, judged=("invoice",))  # invoice recovers
    assert s.kinds() == ["opened", "updated", "updated"]
    assert set(s.decisions[2].sight.types) == {"receipt"}
    s.run(120, {"invoice": 0, "receipt": 1}, judged=("invoice", "receipt"))
    assert s.kinds() == ["opened", "updated", "updated", "resolved"]
    s.run(600, {"invoice": 0, "receipt": 1}, judged=("invoice", "receipt"))
    assert len(s.decisions) == 4


def test_updates_are_held_to_one_per_update_interval() -> None:
    s = Stream()
    s.run(150, {"a": 0})
    assert s.kinds() == ["opened"]
    # b joins 10 s after the opening: the update waits for the interval, then says both.
    s.run(150, {"a": 0, "b": 1})
    assert s.kinds() == ["opened", "updated"]
    opened_at = 140.0
    assert s.posted is not None
    assert s.posted.posted_at_s >= opened_at + T.update_interval_s


def test_a_blind_type_that_stops_arriving_is_forgotten() -> None:
    s = Stream()
    s.run(200, {"gone": 0})
    assert s.kinds() == ["opened"]
    s.run(T.forget_after_s + 20, {})
    assert s.kinds() == ["opened", "resolved"]


def test_listed_types_carried_over_a_restart_stay_until_they_recover() -> None:
    s = Stream(listed={"invoice": "no_verdicts"})
    s.posted = Posted({"invoice": "no_verdicts"}, frozenset(), -10.0)
    s.run(300, {"invoice": 0})  # still blind: no resolution, no second opening
    assert s.decisions == []
    s.run(120, {"invoice": 0}, judged=("invoice",))
    assert s.kinds() == ["resolved"]


def test_a_restart_while_blind_resolves_only_on_evidence() -> None:
    s = Stream(listed={"invoice": "no_verdicts"})
    s.posted = Posted({"invoice": "no_verdicts"}, frozenset(), -10.0)
    # Not sampled since the restart, not judged either: nothing says it can be seen again.
    s.run(AFTER * 3, {})
    assert s.decisions == []
    s.run(T.forget_after_s, {})  # it stopped arriving: nothing left to see
    assert s.kinds() == ["resolved"]


def test_a_stalled_watermark_blinds_every_arriving_type() -> None:
    s = Stream()
    s.run(60, {"a": 0, "b": 1}, judged=("a", "b"))
    # No verdict after 60 s while both types keep arriving: the watermark stops too.
    while not s.decisions:
        s.check({"a": 0, "b": 1})
        assert s.now < 400
    sight = s.decisions[0].sight
    assert "watermark_stalled" in sight.causes
    assert set(sight.types) == {"a", "b"}
    assert "snapshots arrived" in sight.detail["watermark_stalled"]


def test_a_stopped_consumer_is_named_with_its_partitions() -> None:
    s = Stream(group=True)
    assert s.committed is not None
    # The job commits on partition 0 only (partition 1 is stuck), verdicts still flow for a.
    for _ in range(30):
        s.end[0] += 100
        s.committed[0] = s.end[0]
        if int(s.now) % 60 == 0:
            s.verdict("a")
        s.check({"b": 1})
    sight = s.decisions[0].sight if s.decisions else None
    assert sight is not None
    assert "consumer_stalled" in sight.causes
    assert "partition(s) 1 " in sight.detail["consumer_stalled"]
    assert sight.types["b"] in ("no_verdicts", "consumer_stalled")


def test_a_group_that_commits_nothing_gives_no_consumer_signal() -> None:
    s = Stream()
    s.committed = None
    s.run(600, {"a": 0}, judged=("a",))
    assert s.decisions == []


@pytest.mark.parametrize("posted_types", [{"a": "no_verdicts"}])
def test_decide_opens_once_and_resolves(posted_types: dict[str, str]) -> None:
    blind = Sight({"a": "no_verdicts"}, frozenset(), 0.0)
    clear = Sight({}, frozenset(), None)
    assert decide(None, None, 0, 60) is None
    assert decide(None, clear, 0, 60) is None
    opened = decide(None, blind, 0, 60)
    assert opened is not None
    assert opened.kind == "opened"
    posted = Posted(posted_types, frozenset(), 0.0)  # type: ignore[arg-type]
    assert decide(posted, blind, 1000, 60) is None  # the same: nothing to say
    resolved = decide(posted, clear, 1, 60)
    assert resolved is not None
    assert resolved.kind == "resolved"
