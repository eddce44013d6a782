"""Refits in the alerting service without Kafka: the engine keeps the windows it judged, the
refitter fits the due types (leaving out incident windows, skipping pinned types) and hands
the baselines to a recording publisher, on a manual clock."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.refit import RefitMetrics, Refitter, rebuild_refit_history
from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.baseline_publish import BaselinePublishError
from anchorwatch.contracts import Baseline, BaselinePin, Verdict, encode
from anchorwatch.policy.fitting import fit_baseline, pinned_baseline
from anchorwatch.policy.incident_types import Incident, IncidentChange
from anchorwatch.policy.refit import MemoryRows, RefitHistory, RefitSchedule, WindowRows
from tests.support.alerting import T0, verdict

HOUR_S = 3600.0


class Setup:
    def __init__(
        self,
        tmp_path: Path,
        rows: WindowRows | None = None,
        policy: dict[str, Any] | None = None,
        **alerting: Any,
    ) -> None:
        self.settings = AlertingSettings.load(
            alerting={
                "state_dir": tmp_path / "state",
                "refit_min_windows": 5,
                "refit_interval_s": 3600,
                **alerting,
            },
            policy={"min_windows": 5, **(policy or {})},
        )
        a = self.settings.alerting
        self.clock = ManualClock(T0 / 1000 + 86_400)
        self.registry = CollectorRegistry()
        self.engine = Engine(
            self.settings,
            Store(a.state_dir),
            ServiceMetrics(self.registry),
            ["events"],
            clock=self.clock,
            refit=RefitHistory(
                RefitSchedule(
                    a.refit_interval_s * 1000, a.refit_history_s * 1000, a.refit_min_windows
                ),
                rows,
            ),
        )
        self.published: list[list[Baseline]] = []
        self.fail = False
        self.offset = 0
        self.refitter = Refitter(
            self.settings,
            self.engine,
            RefitMetrics(self.registry),
            clock=self.clock,
            publish=self._publish,
        )

    def _publish(self, baselines: list[Baseline]) -> None:
        if self.fail:
            raise BaselinePublishError("0 of 1 baselines acknowledged")
        self.published.append(baselines)

    def feed(self, verdicts: list[Verdict]) -> None:
        messages = []
        for v in verdicts:
            messages.append(RawMessage("verdicts", 0, self.offset, encode(v)))
            self.offset += 1
        self.engine.process(messages, int(self.clock() * 1000))

    def refits(self, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "anchorwatch_alerting_baseline_refits_total", {"outcome": outcome}
        )
        return value or 0.0


CLEAN = [0.30, 0.34, 0.31, 0.38, 0.33, 0.36, 0.32, 0.35, 0.37, 0.39, 0.30, 0.31]


def test_due_types_are_fitted_and_incident_windows_left_out(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    quiet = [verdict("quiet", i, m) for i, m in enumerate(CLEAN)]
    # "drifting": ten clean windows, then four above the static threshold: an incident
    # opens on the second and is still open.
    drifting = [verdict("drifting", i, m) for i, m in enumerate(CLEAN[:10])]
    drifting += [verdict("drifting", 10 + i, 0.88) for i in range(4)]
    s.feed(sorted(quiet + drifting, key=lambda v: v.window.window_start_ms))
    assert [i.doc_type for i in s.engine.open_incidents()] == ["drifting"]

    published = s.refitter.run()
    assert s.published == [published]
    by_type = {b.doc_type: b for b in published}
    assert by_type["drifting"].window_count == 10
    assert by_type["quiet"].window_count == 12
    now_ms = int(s.clock() * 1000)
    expected = fit_baseline(
        "drifting",
        [v.window for v in drifting[:10]],
        s.settings.policy,
        fitted_at_ms=now_ms,
        history_start_ms=T0,
        history_end_ms=T0 + 10 * 60_000,
    ).baseline
    assert by_type["drifting"] == expected
    assert s.refits("published") == 2
    assert s.registry.get_sample_value(
        "anchorwatch_alerting_baseline_refit_last_timestamp_seconds"
    ) == pytest.approx(s.clock())


def test_a_type_is_refitted_only_after_the_interval_and_new_windows(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.feed([verdict("quiet", i, m) for i, m in enumerate(CLEAN)])
    assert len(s.refitter.run()) == 1
    assert s.refitter.run() == []  # just fitted
    s.clock.now += HOUR_S
    assert s.refitter.run() == []  # no new windows
    s.feed([verdict("quiet", 12 + i, m) for i, m in enumerate(CLEAN[:5])])
    (again,) = s.refitter.run()
    assert again.window_count == 17


def test_a_failed_publish_is_retried_later(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.feed([verdict("quiet", i, m) for i, m in enumerate(CLEAN)])
    s.fail = True
    assert s.refitter.run() == []
    assert s.refits("failed") == 1
    s.fail = False
    assert s.refitter.run() == []  # waits before retrying
    s.clock.now += Refitter.RETRY_S
    assert [b.doc_type for b in s.refitter.run()] == ["quiet"]


def test_too_little_history_never_replaces_a_fitted_baseline(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.feed([verdict("quiet", i, m) for i, m in enumerate(CLEAN)])
    (fitted,) = s.refitter.run()
    s.engine.set_baseline(fitted)
    # A stricter fit needs more windows than the type has.
    strict = s.settings.model_copy(
        update={"policy": s.settings.policy.model_copy(update={"min_windows": 100})}
    )
    refitter = Refitter(strict, s.engine, RefitMetrics(CollectorRegistry()), clock=s.clock)
    s.clock.now += HOUR_S
    s.feed([verdict("quiet", 12 + i, m) for i, m in enumerate(CLEAN[:5])])
    assert refitter.run() == []
    assert s.engine.tracker.baseline("quiet") == fitted


def test_dry_run_fits_and_publishes_nothing(tmp_path: Path) -> None:
    s = Setup(tmp_path, dry_run=True)
    s.feed([verdict("quiet", i, m) for i, m in enumerate(CLEAN)])
    assert [b.doc_type for b in s.refitter.run()] == ["quiet"]
    assert s.published == []
    assert s.refits("dry_run") == 1
    assert s.refitter.run() == []


def test_an_adapted_resolution_reaches_the_notification_view(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    incident = Incident(
        incident_id="i1-x",
        doc_type="medical_report",
        rule="drift",
        severity="warning",
        evidence="window",
        first_breach_ms=T0,
        opened_at_ms=T0 + 120_000,
        resolved_at_ms=T0 + 600_000,
        resolution="adapted",
        peak_mean_drift=0.63,
        peak_window_start_ms=T0,
        last_breach_ms=T0 + 540_000,
        breach_windows=9,
        reopened=0,
        baseline_version="b1-x",
        threshold=0.58,
        adapted_from=0.52,
        adapted_to=0.61,
    )
    v = verdict("medical_report", 9, 0.61)
    view = s.engine._view(IncidentChange("resolved", incident, T0 + 540_000, v.window, None))
    assert (view.adapted_from, view.adapted_to) == (0.52, 0.61)


# ----------------------------------------------------------------- the history on disk


def test_on_disk_rows_answer_as_the_ones_in_memory(alerting_state: Path | StateLocation) -> None:
    """Puts (new and replacing), drops, reads with both bounds, flushes and reopenings, in a
    random order: the file (or database) answers every read as the dict does."""
    rng = random.Random(7)
    memory, disk = MemoryRows(), StoredRows(alerting_state)
    for _ in range(1500):
        doc_type = rng.choice(["a", "b", "c/ü"])
        op = rng.random()
        if op < 0.6:
            start = T0 + rng.randrange(300) * 60_000
            row = (start, start + 60_000, rng.randrange(1, 90), rng.random())
            memory.put(doc_type, row)
            disk.put(doc_type, row)
        elif op < 0.7:
            cut = T0 + rng.randrange(300) * 60_000
            memory.drop_before(doc_type, cut)
            disk.drop_before(doc_type, cut)
        elif op < 0.75:
            disk.flush()
        elif op < 0.78:
            disk.close()
            disk = StoredRows(alerting_state)
        since = T0 + rng.randrange(-5, 300) * 60_000
        after = rng.choice([None, T0 + rng.randrange(300) * 60_000])
        assert disk.rows(doc_type, since, after) == memory.rows(doc_type, since, after)
    assert disk.count() == memory.count()
    assert disk.latest_ends() == memory.latest_ends()
    disk.close()


def _types(s: Setup) -> dict[str, list[Any]]:
    assert s.engine.refit is not None
    return {t: s.engine.refit.usable(t) for t in s.engine.refit.doc_types()}


def test_a_restart_refits_from_the_windows_kept_on_disk(tmp_path: Path) -> None:
    """A week of windows per type does not fit in memory at thousands of types, nor can the
    verdicts topic be read back at each start: the history is in the state directory. A
    new engine on it refits what the first one would have, incident windows left out."""
    state = tmp_path / "state"
    first = Setup(tmp_path, StoredRows(state))
    quiet = [verdict("quiet", i, m) for i, m in enumerate(CLEAN)]
    drifting = [verdict("drifting", i, m) for i, m in enumerate(CLEAN[:10])]
    drifting += [verdict("drifting", 10 + i, 0.88) for i in range(4)]
    first.feed(sorted(quiet + drifting, key=lambda v: v.window.window_start_ms))
    held = _types(first)
    assert len(held["drifting"]) == 10
    first.engine.close()

    again = Setup(tmp_path, StoredRows(state))
    assert again.engine.refit is not None
    # Windows on disk: nothing to read back from the topic (this setup has no Kafka).
    read = rebuild_refit_history(
        again.settings, again.engine.refit, again.engine.store, int(again.clock() * 1000)
    )
    assert read == 0
    assert _types(again) == held
    by_type = {b.doc_type: b for b in again.refitter.run()}
    assert (by_type["quiet"].window_count, by_type["drifting"].window_count) == (12, 10)
    again.engine.close()


def test_the_windows_of_a_committed_batch_are_on_disk_before_its_offsets(
    tmp_path: Path,
) -> None:
    """The engine commits the history's rows before the batch: a kill -9 right after the
    batch's commit (nothing closed) leaves every window of it in the file."""
    state = tmp_path / "state"
    s = Setup(tmp_path, StoredRows(state))
    s.feed([verdict("quiet", i, m) for i, m in enumerate(CLEAN)])
    other = StoredRows(state)  # another process's view of the file
    assert [r[0] for r in other.rows("quiet", 0)] == [T0 + i * 60_000 for i in range(12)]
    other.close()
    s.engine.close()


# --------------------------------------------------------------------------- pins
# A pinned type (on its record, or in settings) is never refitted: counted and logged as
# pinned, the owner's baseline kept.


def feed_both(s: Setup, first_minute: int, means: list[float]) -> None:
    s.feed(
        [
            verdict(doc_type, first_minute + i, m)
            for i, m in enumerate(means)
            for doc_type in ("pinned", "quiet")
        ]
    )


def test_a_type_pinned_on_its_record_is_never_refitted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Setup(tmp_path)
    feed_both(s, 0, CLEAN)
    first = {b.doc_type: b for b in s.refitter.run()}
    assert set(first) == {"pinned", "quiet"}
    for b in first.values():
        s.engine.set_baseline(b)
    # The owner pins one type; the record reaches the service as any baseline does.
    now_ms = int(s.clock() * 1000)
    pin = BaselinePin(threshold=0.7, author="ana", reason="vendor runs high", pinned_at_ms=now_ms)
    record = pinned_baseline(first["pinned"], "pinned", pin, s.settings.policy, now_ms=now_ms)
    assert s.engine.set_baseline(record)

    s.clock.now += HOUR_S
    feed_both(s, 12, CLEAN[:5])
    with caplog.at_level(logging.INFO, logger="anchorwatch.alerting.refit"):
        again = s.refitter.run()
    assert [b.doc_type for b in again] == ["quiet"]
    assert s.engine.tracker.baseline("pinned") == record
    assert (s.refits("pinned"), s.refits("published")) == (1, 3)
    (line,) = [r for r in caplog.records if r.getMessage() == "baseline not refitted: pinned"]
    assert [getattr(line, k) for k in ("doc_type", "source", "threshold")] == [
        "pinned",
        "command",
        0.7,
    ]
    # Counted once per interval, not on every run.
    assert s.refitter.run() == []
    assert s.refits("pinned") == 1
    s.clock.now += HOUR_S
    feed_both(s, 17, CLEAN[:5])
    assert [b.doc_type for b in s.refitter.run()] == ["quiet"]
    assert s.refits("pinned") == 2


def test_a_type_pinned_in_settings_is_never_refitted(tmp_path: Path) -> None:
    s = Setup(tmp_path, policy={"pins": {"pinned": {"mute": True}}})
    feed_both(s, 0, CLEAN)
    assert [b.doc_type for b in s.refitter.run()] == ["quiet"]
    assert [[b.doc_type for b in batch] for batch in s.published] == [["quiet"]]
    assert s.refits("pinned") == 1
    assert s.engine.tracker.pin("pinned") == BaselinePin(mute=True, source="settings")


def test_the_backlog_gauges_show_refits_falling_behind(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    types = [f"t{n}" for n in range(6)]
    s.feed([verdict(t, i, m) for i, m in enumerate(CLEAN) for t in types])
    s.refitter.run()  # 4 of the 6, none fitted before: nothing is behind yet

    def gauges() -> tuple[float | None, ...]:
        return tuple(
            s.registry.get_sample_value(f"anchorwatch_alerting_refit_{name}")
            for name in ("behind_doc_types", "behind_seconds", "unfitted_doc_types")
        )

    # Measured before the run's fits: all six were waiting for their first.
    assert gauges() == (0, 0, 6)
    s.clock.now += 2 * HOUR_S
    s.feed([verdict(t, 12 + i, m) for i, m in enumerate(CLEAN) for t in types])
    s.refitter.run()  # the 2 never fitted first, then 2 of the 4 fitted 2 h ago
    assert gauges() == (4, 2 * HOUR_S, 2)
    s.clock.now += 30
    s.refitter.run()
    assert gauges() == (2, 2 * HOUR_S + 30, 0)
    s.clock.now += 30
    s.refitter.run()
    assert gauges() == (0, 0, 0)


def test_the_decision_time_runs_from_the_verdicts_kafka_timestamp(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    written_ms = int(time.time() * 1000) - 2_000
    messages = [
        RawMessage("verdicts", 0, i, encode(verdict("a", i, m)), written_ms)
        for i, m in enumerate(CLEAN[:3])
    ]
    # A record without a timestamp is not timed.
    messages.append(RawMessage("verdicts", 0, 3, encode(verdict("a", 3, 0.3))))
    s.engine.process(messages, int(s.clock() * 1000))
    name = "anchorwatch_alerting_verdict_decision_seconds"
    assert s.registry.get_sample_value(f"{name}_count") == 3
    assert 3 * 2.0 <= (s.registry.get_sample_value(f"{name}_sum") or 0) < 3 * 10.0
    assert s.registry.get_sample_value(f"{name}_bucket", {"le": "1.0"}) == 0


def test_verdicts_are_decided_while_a_fit_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service fits on a thread of its own: the history's lock is held while the due
    types' windows are gathered and while they are marked, never during the fit itself."""
    import threading

    import anchorwatch.alerting.refit as refit_module

    s = Setup(tmp_path)
    s.feed([verdict("a", i, m) for i, m in enumerate(CLEAN)])
    fitting, release = threading.Event(), threading.Event()

    def slow_fit(*args: Any, **kwargs: Any) -> Any:
        fitting.set()
        assert release.wait(30), "the test did not release the fit"
        return fit_baseline(*args, **kwargs)

    monkeypatch.setattr(refit_module, "fit_baseline", slow_fit)
    results: list[list[Baseline]] = []
    fitter = threading.Thread(target=lambda: results.append(s.refitter.run()))
    fitter.start()
    try:
        assert fitting.wait(30)
        decided = threading.Thread(
            target=lambda: s.feed([verdict("a", 12 + i, m) for i, m in enumerate(CLEAN[:3])])
        )
        decided.start()
        decided.join(10)
        assert not decided.is_alive(), "a verdict waited for the fit"
        assert s.engine.refit is not None
        assert len(s.engine.refit.usable("a")) == 15
    finally:
        release.set()
        fitter.join(30)
    (published,) = results
    assert [b.doc_type for b in published] == ["a"]
    assert published[0].window_count == 12  # what was due when the run gathered it


def test_a_run_gives_way_to_waiting_verdicts_after_its_first_fit(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.feed(
        sorted(
            (verdict(t, i, m) for t in ("a", "b", "c") for i, m in enumerate(CLEAN)),
            key=lambda v: (v.window.window_start_ms, v.window.doc_type),
        )
    )
    asked: list[int] = []

    def busy() -> bool:
        asked.append(len(asked))
        return True

    first = s.refitter.run(yield_now=busy)
    # One fit is made whatever the load (refits never starve), then it gives way.
    assert [b.doc_type for b in first] == ["a"]
    assert s.refitter.last_due == 3
    assert asked == [0]
    assert s.published == [first]
    # The types it gave way on are still due, and fitted by the next run.
    rest = s.refitter.run()
    assert sorted(b.doc_type for b in rest) == ["b", "c"]
