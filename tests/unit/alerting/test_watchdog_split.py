"""The watchdog of an instance that shares the work (``alerting.work_split``): its engine
holds the types of its own partitions only, so it sees every type through the state
(``StateView``); and only the owner of partition 0 posts, the others keep watching."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.engine import Engine
from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.store import Store
from anchorwatch.alerting.watchdog_probe import Sample
from anchorwatch.alerting.watchdog_run import StateView, WatchdogRunner
from tests.support.alerting import LocalSlackWithHistory, verdict
from tests.support.alerting_harness import Harness, posted, settings_for

INTEGRATIONS = ["slack", "jira", "events"]


def types_on_both_partitions() -> dict[str, int]:
    """A type on each of the harness's two partitions."""
    names = [f"type-{i}" for i in range(10)]
    return {next(n for n in names if Harness.partition_of(n) == p): p for p in (0, 1)}


class Checks:
    """A watchdog on an engine of partition 1 alone; the harness's engine decides both."""

    def __init__(self, h: Harness, *, view: bool) -> None:
        self.h = h
        self.types = types_on_both_partitions()
        self.ends = {0: 0, 1: 0}
        self.minute = 0
        self.engine = Engine(
            h.settings,
            Store(h.settings.alerting.state_location()),
            h.metrics,
            INTEGRATIONS,
            clock=h.clock,
            partitions=frozenset({1}),
        )
        self.view = StateView(h.settings.alerting.state_location()) if view else None
        self.registry = CollectorRegistry()
        self.runner = WatchdogRunner(
            h.settings,
            self.engine,
            INTEGRATIONS,
            self.registry,
            clock=h.clock,
            probe=self._sample,
            view=self.view,
        )

    def _sample(self) -> Sample:
        for p in self.types.values():
            self.ends[p] += 250
        return Sample(dict(self.types), dict(self.ends), None, 10)

    def run(self, seconds: int, *, judged: bool, post: bool) -> None:
        for _ in range(seconds // 10):
            self.h.clock.now += 10
            if judged and int(self.h.clock.now) % 60 < 10:
                self.h.publish([verdict(d, self.minute, 0.5) for d in self.types])
                self.minute += 1
                self.h.consume()
            self.runner.probe_once()
            self.runner.tick(self.h.clock.ms(), post=post)
            self.h.drain()

    def blind(self) -> float:
        return self.registry.get_sample_value("anchorwatch_alerting_blind_doc_types") or 0.0

    def close(self) -> None:
        self.runner.close()
        self.engine.close()


def notices(slack: LocalSlackWithHistory) -> list[dict[str, object]]:
    return [m for m in posted(slack) if not m["thread_ts"] and "cannot see" in str(m["text"])]


def test_through_the_state_it_sees_the_types_other_instances_decide(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    checks = Checks(h, view=True)
    try:
        checks.run(400, judged=True, post=True)
        # Its engine knows nothing of partition 0's type; the state does, and so the watchdog.
        (other,) = [d for d, p in checks.types.items() if p == 0]
        assert checks.engine.last_window_start_ms(other) is None
        assert checks.blind() == 0
        assert notices(slack) == []
    finally:
        checks.close()


def test_only_the_owner_of_partition_0_posts_the_notice(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    checks = Checks(h, view=True)
    try:
        checks.run(300, judged=True, post=False)
        checks.run(180, judged=False, post=False)  # the drift job died: blind, not posted
        assert checks.blind() == 2
        assert notices(slack) == []
        checks.run(20, judged=False, post=True)  # partition 0 is this instance's now
        assert len(notices(slack)) == 1
    finally:
        checks.close()
