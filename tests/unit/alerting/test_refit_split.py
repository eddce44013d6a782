"""Refits of an instance that shares the work (``alerting.work_split``): it fits the types of
its own partitions alone, and the history it takes over with a partition leaves out the
windows of the incidents its former owner decided."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.refit import RefitMetrics, Refitter, follow_incidents
from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.contracts import Baseline, encode
from anchorwatch.policy.refit import RefitHistory, RefitSchedule
from tests.support.alerting import T0, verdict

CLEAN = [0.30, 0.34, 0.31, 0.38, 0.33, 0.36, 0.32, 0.35, 0.37, 0.39, 0.30, 0.31]


def settings(tmp_path: Path) -> AlertingSettings:
    return AlertingSettings.load(
        alerting={
            "state_dir": tmp_path / "state",
            "refit_min_windows": 5,
            "refit_interval_s": 3600,
        },
        policy={"min_windows": 5},
    )


def history(s: AlertingSettings) -> RefitHistory:
    a = s.alerting
    schedule = RefitSchedule(
        a.refit_interval_s * 1000, a.refit_history_s * 1000, a.refit_min_windows
    )
    return RefitHistory(schedule, StoredRows(a.state_dir))


def refitter(
    s: AlertingSettings, engine: Engine, clock: ManualClock
) -> tuple[Refitter, list[list[Baseline]]]:
    published: list[list[Baseline]] = []
    fitter = Refitter(
        s,
        engine,
        RefitMetrics(CollectorRegistry()),
        clock=clock,
        publish=published.append,
        split=True,
    )
    return fitter, published


def test_a_split_instance_fits_its_own_types_and_leaves_the_former_owners_incidents_out(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    clock = ManualClock(T0 / 1000 + 86_400)
    # The former owner of both partitions: "drifting" (partition 1) has an incident open
    # on its last four windows; "quiet" is on partition 0.
    former = Engine(
        s,
        Store(s.alerting.state_dir),
        ServiceMetrics(CollectorRegistry()),
        ["events"],
        clock=clock,
        refit=history(s),
        partitions=frozenset({0, 1}),
    )
    quiet = [(0, verdict("quiet", i, m)) for i, m in enumerate(CLEAN)]
    drifting = [(1, verdict("drifting", i, m)) for i, m in enumerate(CLEAN[:10])]
    drifting += [(1, verdict("drifting", 10 + i, 0.88)) for i in range(4)]
    placed = sorted(quiet + drifting, key=lambda pv: pv[1].window.window_start_ms)
    former.process(
        [RawMessage("verdicts", p, i, encode(v)) for i, (p, v) in enumerate(placed)],
        int(clock() * 1000),
    )
    assert [i.doc_type for i in former.open_incidents()] == ["drifting"]
    former.refit.close()  # type: ignore[union-attr]
    former.close()

    # This instance took partition 1 over: its history comes from the state.
    taken = history(s)
    mine = Engine(
        s,
        Store(s.alerting.state_dir),
        ServiceMetrics(CollectorRegistry()),
        ["events"],
        clock=clock,
        refit=taken,
        partitions=frozenset({1}),
    )
    # Read from the state, its windows include the incident's until its span is known.
    assert len(taken.usable("drifting")) == 14
    follow_incidents(taken, mine.store)
    assert len(taken.usable("drifting")) == 10
    fitter, published = refitter(s, mine, clock)
    (fit,) = fitter.run()
    assert fit.doc_type == "drifting"  # "quiet" is partition 0's: another instance fits it
    assert fit.window_count == 10  # the four windows of the incident left out
    assert published == [[fit]]
    taken.close()
    mine.close()
