"""Baselines that stay current by themselves (``alerting.refit``): the windows judged are
kept per doc type (``anchorwatch.policy.refit``: windows inside incidents left out, the
shift kept when an incident resolved "adapted"), and every ``refit_interval_s`` the
consumer thread refits the types that gathered ``refit_min_windows`` new windows and
publishes the baselines to the compacted topic, from which this service (and the drift
job) read them back. The history is kept on disk (``refit_rows``); a first start reads it
back from the verdicts topic. A pinned type (``[policy] pins``, or a pin on its baseline
record: ``anchorwatch baseline pin``) is never refitted: counted and logged as ``pinned``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as MetricCounter

from anchorwatch.alerting.consumers import read_recent_windows
from anchorwatch.alerting.engine import Engine
from anchorwatch.alerting.grouping import FOLLOWED_ELSEWHERE
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Store
from anchorwatch.baseline_publish import BaselinePublishError, publish_baselines
from anchorwatch.contracts import Baseline
from anchorwatch.policy.fitting import fit_baseline
from anchorwatch.policy.refit import RefitHistory

log = logging.getLogger(__name__)


class RefitMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.refits = MetricCounter(
            "anchorwatch_alerting_baseline_refits_total",
            "Baseline refits, by outcome: published; skipped (too little history to replace "
            "a fitted baseline); pinned (the type's owner pinned it: never refitted); failed "
            "(Kafka did not take it; retried); dry_run.",
            ["outcome"],
            registry=registry,
        )
        self.last = Gauge(
            "anchorwatch_alerting_baseline_refit_last_timestamp_seconds",
            "When refitted baselines were last published (Unix time).",
            registry=registry,
        )
        self.behind = Gauge(
            "anchorwatch_alerting_refit_behind_doc_types",
            "Fitted doc types past refit_interval_s since their last fit with windows since: "
            "due, waiting their turn (a run fits a few; the rest follow a check later).",
            registry=registry,
        )
        self.behind_age = Gauge(
            "anchorwatch_alerting_refit_behind_seconds",
            "The longest any of those types has gone since its last fit: refits keep up while "
            "this stays near refit_interval_s, and fall behind when it grows.",
            registry=registry,
        )
        self.unfitted = Gauge(
            "anchorwatch_alerting_refit_unfitted_doc_types",
            "Doc types with windows but no fit yet (the service's or a published baseline's): "
            "waiting for refit_min_windows windows, or for their turn.",
            registry=registry,
        )
        for outcome in ("published", "skipped", "pinned", "failed", "dry_run"):
            self.refits.labels(outcome)


class Refitter:
    """Refits due baselines and publishes them (runs on the consumer thread, which owns the
    engine). Publishing twice is harmless: the topic is compacted by doc type and a fit's
    version is derived from its inputs and its fit time."""

    #: After a failed publish, wait this long before trying again.
    RETRY_S: Final = 60.0
    PUBLISH_TIMEOUT_S: Final = 30.0
    #: Gathering and fitting a type-week of windows takes ~0.5-0.7 s (bench/refit.py; the
    #: fit replays the history through the policy to leave its incidents out): the consumer
    #: thread pauses for about 3 s per run at most; other due types follow.
    TYPES_PER_RUN: Final = 4

    def __init__(
        self,
        settings: AlertingSettings,
        engine: Engine,
        metrics: RefitMetrics,
        *,
        clock: Callable[[], float] = time.time,
        publish: Callable[[list[Baseline]], object] | None = None,
        split: bool = False,
    ) -> None:
        assert engine.refit is not None
        self._settings = settings
        self._engine = engine
        self._history = engine.refit
        self._metrics = metrics
        self._clock = clock
        self._publish = publish or (
            lambda baselines: publish_baselines(
                settings.kafka,
                settings.topics.baselines,
                baselines,
                timeout_s=self.PUBLISH_TIMEOUT_S,
            )
        )
        self._not_before = 0.0
        #: Types the last run found due (at most TYPES_PER_RUN): at the cap, more may wait.
        self.last_due = 0
        # The work split (``split_work.py``): the types of this instance's engine alone.
        self._all_types = not split

    def rebind(self, engine: Engine) -> None:
        """To the engine the work split built anew (the history is the same)."""
        self._engine = engine

    def keep(
        self,
        stop: threading.Event,
        ready: Callable[[], bool],
        verdicts_waiting: Callable[[], bool],
        every_s: float,
    ) -> None:
        """The refit thread, until ``stop``: out of the consumer's way, a run starts only
        while no verdicts wait (its ``due`` sorts every type under the history's lock, its
        fits take the interpreter, one lock for all Python threads) and gives way after its
        first fit when some arrive; the next follows at once while types are due, else a
        check (``every_s``) later. So a minute's burst of verdicts is decided first, and the
        refits use the rest of the minute. Under verdicts that never stop, a run still
        starts once per check. Nothing before ``ready()`` (every current baseline known: a
        pin not yet read would be refitted over, a fresher baseline fitted again)."""
        last_run = time.monotonic()
        while not stop.is_set():
            if not ready():
                stop.wait(0.2)
                continue
            if verdicts_waiting() and time.monotonic() - last_run < every_s:
                stop.wait(0.05)
                continue
            last_run = time.monotonic()
            self.run(yield_now=verdicts_waiting)
            if self.last_due < self.TYPES_PER_RUN:
                stop.wait(every_s)

    def run(self, yield_now: Callable[[], bool] = lambda: False) -> list[Baseline]:
        """Fit and publish the types due now, up to TYPES_PER_RUN of them (the longest
        unfitted first; pinned ones beyond); the baselines published. The history's lock is
        held while their windows are gathered and while they are marked, not while they
        are fitted: verdicts go on being decided on the consumer thread meanwhile. Before
        each fit, ``yield_now()`` (verdicts waiting) ends the run early: the types not yet
        fitted stay due for the next one."""
        now = self._clock()
        self.last_due = 0
        if now < self._not_before:
            return []
        now_ms = int(now * 1000)
        policy, dry_run = self._settings.policy, self._settings.alerting.dry_run
        fits: list[tuple[Baseline, Baseline | None, int]] = []
        tracker = self._engine.tracker
        behind, behind_ms, unfitted = self._history.backlog(now_ms, tracker.baseline)
        self._metrics.behind.set(behind)
        self._metrics.behind_age.set(behind_ms / 1000)
        self._metrics.unfitted.set(unfitted)
        engine = self._engine
        due = self._history.due(
            now_ms,
            tracker.baseline,
            self.TYPES_PER_RUN,
            pinned=lambda doc_type: tracker.pin(doc_type) is not None,
            include=None
            if self._all_types
            else lambda doc_type: engine.last_window_start_ms(doc_type) is not None,
        )
        self.last_due = sum(1 for item in due if not item.pinned)
        for item in due:
            if fits and yield_now():
                break  # what is fitted is published; the rest waits for a calmer moment
            if item.pinned:
                # The owner's figures stand: not refitted, not due again for an interval.
                self._history.fitted(
                    item.doc_type, fitted_at_ms=now_ms, history_end_ms=item.history_end_ms
                )
                self._pinned(item.doc_type)
                continue
            new = fit_baseline(
                item.doc_type,
                item.windows,
                policy,
                fitted_at_ms=now_ms,
                history_start_ms=item.history_start_ms,
                history_end_ms=item.history_end_ms,
            ).baseline
            old = self._engine.tracker.baseline(item.doc_type)
            if new.status != "fitted" and old is not None and old.status == "fitted":
                # Fewer usable windows than a fit needs (e.g. just after an adaptation):
                # keep judging by the fitted one.
                self._history.fitted(
                    item.doc_type, fitted_at_ms=now_ms, history_end_ms=old.history_end_ms
                )
                self._log(new, old, "skipped")
                continue
            fits.append((new, old, len(item.windows)))
        if not fits:
            return []
        if not dry_run:
            try:
                self._publish([new for new, _, _ in fits])
            except (BaselinePublishError, KafkaException) as exc:
                self._metrics.refits.labels("failed").inc(len(fits))
                self._not_before = now + self.RETRY_S
                log.error(
                    "refitted baselines not published; retrying later",
                    extra={"doc_types": len(fits), "error": str(exc)[:1000]},
                )
                return []
            self._metrics.last.set(now)
        for new, old, _ in fits:
            self._history.fitted(
                new.doc_type, fitted_at_ms=now_ms, history_end_ms=new.history_end_ms
            )
            self._log(new, old, "dry_run" if dry_run else "published")
        return [new for new, _, _ in fits]

    def _pinned(self, doc_type: str) -> None:
        pin = self._engine.tracker.pin(doc_type)
        self._metrics.refits.labels("pinned").inc()
        log.info(
            "baseline not refitted: pinned",
            extra={
                "doc_type": doc_type,
                "outcome": "pinned",
                "source": pin.source if pin is not None else None,
                "threshold": pin.threshold if pin is not None else None,
                "min_requests": pin.min_requests if pin is not None else None,
                "mute": pin.mute if pin is not None else None,
            },
        )

    def _log(self, new: Baseline, old: Baseline | None, outcome: str) -> None:
        self._metrics.refits.labels(outcome).inc()
        log.info(
            "baseline refitted",
            extra={
                "doc_type": new.doc_type,
                "outcome": outcome,
                "status": new.status,
                "windows": new.window_count,
                "center": round(new.center, 4),
                "threshold": round(new.threshold, 4),
                "version": new.version,
                "old_center": round(old.center, 4) if old is not None else None,
                "old_threshold": round(old.threshold, 4) if old is not None else None,
                "old_version": old.version if old is not None else None,
            },
        )


def rebuild_refit_history(
    settings: AlertingSettings, history: RefitHistory, store: Store, now_ms: int
) -> int:
    """Apply the incidents the service recorded to ``history``, so a restart does not
    forget. Its windows are kept on disk; when it holds none (a first start, or refits
    just turned on) the last ``refit_history_s`` of verdicts is read back from the topic
    (``read_recent_windows``). Returns the windows read back."""
    read = 0
    if not history.doc_types():
        since_ms = now_ms - settings.alerting.refit_history_s * 1000
        read = read_recent_windows(settings, since_ms, history.add)
    follow_incidents(history, store)
    return read


def follow_incidents(history: RefitHistory, store: Store) -> None:
    """Every incident of a doc type the state holds, as it is now, applied to ``history``
    (not a group nor the watchdog's notice: they cover no type's windows, and their records
    have no breach)."""
    marks = ",".join("?" * len(FOLLOWED_ELSEWHERE))
    for row in store.incidents_where(f"rule NOT IN ({marks})", sorted(FOLLOWED_ELSEWHERE)):
        history.incident(
            row.doc_type,
            row.incident_id,
            first_breach_ms=int(row.record["first_breach_ms"]),
            resolved_at_ms=row.resolved_at_ms,
            resolution=row.record.get("resolution"),
        )
    history.flush()
