"""The alerting service: verdicts in, incidents decided, notifications delivered exactly once.

This module wires the parts and runs them: one consumer thread reads the baselines and the
verdicts (``consumers.py``) and hands batches to the ``Engine`` (``engine.py``: decisions,
one SQLite transaction per batch, see ``store.py``); only then are the offsets committed to
Kafka (for lag monitoring; the service resumes from its own state). The same thread runs
the due refits (``refit.py``) and prunes old incidents. One sender thread per integration
drains the outbox (``outbox.py``, with the integration's sender from ``integrations/``).
``/metrics``, ``/healthz`` and ``/readyz`` are served by ``http.py``.

So a restart, even after ``kill -9`` at any point (``crash.py`` names the points the
trials kill it at), resumes exactly where the state says: a batch whose transaction did not
commit is consumed and decided again; one that did is never decided twice; a notification
cut off mid-send is reconciled with Slack or Jira before it is sent again. One service runs
per state directory (a lock file enforces it).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from anchorwatch.alerting import log_limit
from anchorwatch.alerting.consumers import (
    BaselineConsumer,
    VerdictConsumer,
    VerdictSource,
    close_consumers,
)
from anchorwatch.alerting.crash import CrashPoints
from anchorwatch.alerting.database import DATABASE_ERRORS, Database, SessionEnded, StateLocation
from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.http import Endpoint
from anchorwatch.alerting.integrations import registry
from anchorwatch.alerting.integrations.base import BatchSender, Sender
from anchorwatch.alerting.integrations.dry_run import DryRunSender
from anchorwatch.alerting.leadership import Lease, LostLead, PartitionFenced
from anchorwatch.alerting.notify import OneAttempt
from anchorwatch.alerting.outbox import Drainer
from anchorwatch.alerting.refit import (
    RefitMetrics,
    Refitter,
    follow_incidents,
    rebuild_refit_history,
)
from anchorwatch.alerting.refit_rows import StoredRows
from anchorwatch.alerting.service_endpoint import start_endpoint
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.split_work import SplitWork
from anchorwatch.alerting.state_lock import AlertingServiceError, StateLock
from anchorwatch.alerting.store import IncidentListing, Store
from anchorwatch.alerting.store_records import PartitionGuard
from anchorwatch.alerting.watchdog_run import StateView, WatchdogRunner
from anchorwatch.kafkaio import check_access
from anchorwatch.policy.refit import RefitHistory, RefitSchedule

log = logging.getLogger(__name__)

__all__ = ["AlertingService", "AlertingServiceError", "StateLock", "list_incidents", "run"]


class AlertingService:
    """Wires the consumer loop, the senders and the endpoint; ``start`` returns at once."""

    PRUNE_EVERY_S = 3600.0
    #: A stop takes at most this long, whatever Kafka or the remote services do: within
    #: Docker's default 10 s between SIGTERM and SIGKILL, exit included.
    STOP_TIMEOUT_S = 8.0
    THREADS_SHARE = 0.6  # of it for the threads to finish; the rest for the Kafka clients
    #: The Kafka clients' commit and close take well under a second with a broker up;
    #: with the brokers gone, waiting longer would not help.
    KAFKA_CLOSE_S = 3.0
    REFRESH_EVERY_S = 30.0
    REFIT_CHECK_S = 30.0  # how often due refits are looked for
    RELEASE_EVERY_S = 5.0  # how often held incidents whose silence ended are looked for
    ACKS_EVERY_S = 0.5  # how often acknowledgements recorded from Slack are looked for

    def __init__(
        self,
        settings: AlertingSettings,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        crash: CrashPoints | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.metrics = ServiceMetrics(
            self.registry, doc_types_max=settings.alerting.metrics_doc_types_max
        )
        self._clock = clock
        self._crash = crash or CrashPoints.from_env()
        self._stop = threading.Event()
        # Set while verdicts are waiting (the last poll returned some): refits give way.
        self._verdicts_waiting = threading.Event()
        self._threads: list[threading.Thread] = []
        self._drainers: list[Drainer] = []
        self._lock: StateLock | None = None
        self._lease: Lease | None = None  # with the state in PostgreSQL
        self._split: SplitWork | None = None  # with the work split among instances
        self._standby = False  # waiting for the lead of the shared state
        self._endpoint: Endpoint | None = None
        self._heartbeat = time.monotonic()
        self._released = self._acked = self._pruned = 0.0  # when last done (monotonic)
        self.engine: Engine | None = None
        self._verdicts: VerdictConsumer | None = None
        self._baselines: BaselineConsumer | None = None
        self._failure: BaseException | None = None
        self.refit_metrics = RefitMetrics(self.registry)
        self.refitter: Refitter | None = None
        self._refit_history: RefitHistory | None = None  # the work split: every engine's
        self.watchdog: WatchdogRunner | None = None  # notices when anchorwatch is blind
        self.left_behind: list[str] = []  # what the last stop could not finish in time

    # ----------------------------------------------------------------- wiring

    def integrations(self) -> list[str]:
        return [i.name for i in registry.enabled(self.settings)]

    def _sender(self, name: str) -> Sender | BatchSender:
        integration = registry.BY_NAME[name]
        if self.settings.alerting.dry_run:
            return DryRunSender(integration, self.settings)
        # One attempt per call: the drainer owns retries (see outbox.Drainer).
        return integration.sender(self.settings, OneAttempt(self.metrics.notify))

    def _rates(self, name: str) -> tuple[float | None, float | None]:
        """Its rate per rate key, and over all keys (a dry run sends nothing: no limits)."""
        if self.settings.alerting.dry_run:
            return None, None
        integration = registry.BY_NAME[name]
        return integration.rate_per_s(self.settings), integration.total_rate_per_s(self.settings)

    def start(self) -> AlertingService:
        s = self.settings
        a = s.alerting
        # Wrong credentials or an untrusted CA stop the start here, naming the setting.
        check_access(s.kafka)
        state = a.state_location()
        if state.shared:
            self._start_endpoint(state)  # a standby answers probes: live, not ready
        if not a.work_split and not self._take_state(state):
            self._stop_endpoint()
            return self  # stopped while waiting as a standby
        try:
            if a.work_split:
                self._split = SplitWork(s, state, self._make_engine)
                self.engine = self._split.engine
            else:
                self.engine = self._make_engine(None, None)
            refit = self.engine.refit
            if refit is not None:
                self.refitter = Refitter(
                    s, self.engine, self.refit_metrics, clock=self._clock, split=a.work_split
                )
            if self._endpoint is None:
                self._start_endpoint(state)
            if self._split is None:
                self._verdicts = VerdictConsumer(s, self.engine.offsets)
            if s.watchdog.enabled:
                self.watchdog = WatchdogRunner(
                    s,
                    self.engine,
                    self.integrations(),
                    self.registry,
                    clock=self._clock,
                    view=StateView(state) if self._split is not None else None,
                )
            self._baselines = BaselineConsumer(s, self.metrics.baselines.labels("invalid").inc)
        except BaseException:
            self._stop_endpoint()
            self._give_state_up()
            raise
        if self._lease is not None:
            self._spawn("lease", self._lease.keep, self._stop, self._lost_lead)
        for integration in self.integrations():
            self._spawn(f"sender-{integration}", self._drain, integration)
        self._spawn("consumer", self._consume)
        if self.watchdog is not None:
            self._spawn("watchdog", self.watchdog.probe_loop, self._stop)
        log.info(
            "alerting service started",
            extra={
                "state": state.describe(),
                "integrations": self.integrations(),
                "dry_run": a.dry_run,
                "endpoint": self.endpoint_url,
                "open_incidents": len(self.engine.open_incidents()),
            },
        )
        return self

    def _make_engine(
        self, partitions: frozenset[int] | None, guard: PartitionGuard | None
    ) -> Engine:
        """The engine of every type, or (the work split) of ``partitions``' types."""
        a = self.settings.alerting
        state = a.state_location()
        store = Store(state, synchronous=a.sqlite_synchronous, fence=self._fence, guard=guard)
        refit = self._refit_history
        if a.refit and refit is None:
            refit = RefitHistory(
                RefitSchedule(
                    a.refit_interval_s * 1000, a.refit_history_s * 1000, a.refit_min_windows
                ),
                StoredRows(state),
            )
            if partitions is not None:
                self._refit_history = refit  # it outlives each engine of the work split
        return Engine(
            self.settings,
            store,
            self.metrics,
            self.integrations(),
            clock=self._clock,
            crash=self._crash,
            refit=refit,
            partitions=partitions,
        )

    def _start_endpoint(self, state: StateLocation) -> None:
        self._endpoint = start_endpoint(
            self.settings, state, self.registry, self.health, self.readiness, self._clock
        )

    def _stop_endpoint(self) -> None:
        if self._endpoint is not None:
            self._endpoint.stop()
            self._endpoint = None

    def _take_state(self, state: StateLocation) -> bool:
        """The state for this instance alone: the directory's lock (SQLite), or the lead of
        the shared state (PostgreSQL), waiting as a standby until it has it. False if
        stopped while waiting."""
        if not state.shared:
            self._lock = StateLock(state.directory)
            return True
        self._lease = Lease(state, lease_s=self.settings.alerting.lease_s)
        self._standby = True
        try:
            if self._lease.acquire(self._stop):
                self._heartbeat = time.monotonic()  # the loop's clock starts now
                return True
        except BaseException:
            self._give_state_up()
            raise
        finally:
            self._standby = False
        self._give_state_up()
        return False

    @property
    def _fence(self) -> Callable[[Database], None] | None:
        return self._lease.fence if self._lease is not None else None

    def _lost_lead(self, reason: str) -> None:
        self._failure = LostLead(reason)
        log.error("alerting lead lost: stopping", extra={"reason": reason})
        self._stop.set()

    def _give_state_up(self) -> None:
        if self._lock:
            self._lock.release()
            self._lock = None
        if self._lease is not None:
            self._lease.release()
            self._lease.close()
            self._lease = None

    @property
    def leads(self) -> bool:
        """Whether this instance runs (holds the state), as opposed to waiting or stopped."""
        if self._split is not None or self._lock is not None:
            return True
        return self._lease is not None and self._lease.epoch is not None

    @property
    def endpoint_url(self) -> str:
        assert self._endpoint is not None
        return self._endpoint.url

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # the service stops rather than run half-dead
                self._failure = exc
                log.exception("alerting thread failed", extra={"alerting_thread": name})
                self._stop.set()

        thread = threading.Thread(target=guarded, name=f"alerting-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _drain(self, name: str) -> None:
        a = self.settings.alerting
        guard = self._split.ownership if self._split is not None else None
        store = Store(
            a.state_location(), synchronous=a.sqlite_synchronous, fence=self._fence, guard=guard
        )
        sender = self._sender(name)
        rate, total_rate = self._rates(name)
        drainer = Drainer(
            sender,
            store,
            self.settings.retry.policy(),
            self.metrics,
            rate_per_s=rate,
            burst=a.rate_burst,
            total_rate_per_s=total_rate,
            clock=self._clock,
            crash=self._crash,
        )
        self._drainers.append(drainer)
        try:
            drainer.run(self._stop)
        finally:
            sender.close()
            store.close()

    def _wake_senders(self) -> None:
        for drainer in list(self._drainers):
            drainer.wake.set()

    def _consume(self) -> None:
        assert self.engine is not None
        assert self._baselines is not None
        split = self._split
        verdicts = split or self._verdicts
        assert verdicts is not None
        engine, baselines = self.engine, self._baselines
        set_baseline = split.set_baseline if split is not None else engine.set_baseline
        a = self.settings.alerting
        refreshed = pruned = 0.0
        if engine.refit is not None:
            n = rebuild_refit_history(
                self.settings, engine.refit, engine.store, int(self._clock() * 1000)
            )
            log.info(
                "refit history ready",
                extra={"doc_types": len(engine.refit.doc_types()), "windows_read_back": n},
            )
        if self.refitter is not None:
            # Once the history is rebuilt: fits run on a thread of their own.
            self._spawn("refit", self._refit)
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            if not baselines.caught_up:
                # Verdicts wait until every current baseline is known.
                for b in baselines.poll(timeout_s=a.poll_timeout_s):
                    set_baseline(b)
                continue
            for b in baselines.poll():
                set_baseline(b)
            if split is not None:
                try:
                    self._decide_split(split)
                except (PartitionFenced, SessionEnded) as exc:
                    split.fenced(exc)
                    self._follow(split.engine)
                continue
            now = time.monotonic()
            assert isinstance(verdicts, VerdictConsumer)
            if now - refreshed > self.REFRESH_EVERY_S or not verdicts.assigned:
                verdicts.refresh()
                refreshed = now
                if not verdicts.assigned:
                    self._stop.wait(1.0)
                    continue
            if now - pruned > self.PRUNE_EVERY_S:
                self._prune(engine)
                pruned = now
            self._between_batches(engine, now)
            if self.watchdog is not None and self.watchdog.tick(int(self._clock() * 1000)):
                self._wake_senders()
            self._decide(engine, verdicts, verdicts.poll(a.batch_max, a.poll_timeout_s))

    def _decide(self, engine: Engine, source: VerdictSource, messages: list[RawMessage]) -> None:
        """A batch decided and committed (refits give way while verdicts keep coming)."""
        if not messages:
            self._verdicts_waiting.clear()
            return
        self._verdicts_waiting.set()
        offsets = engine.process(messages, int(self._clock() * 1000))
        self._crash("batch_after_commit", "")
        source.commit(offsets)
        self._wake_senders()

    def _prune(self, engine: Engine) -> None:
        cutoff = int((self._clock() - self.settings.alerting.retention_days * 86_400) * 1000)
        if n := engine.prune(cutoff):
            log.info("pruned old incidents", extra={"incidents": n})

    def _between_batches(self, engine: Engine, now: float) -> None:
        """Held incidents whose silence ended, then acknowledgements from Slack."""
        if now - self._released > self.RELEASE_EVERY_S:
            if engine.release_held(int(self._clock() * 1000)):
                self._wake_senders()
            self._released = now
        if now - self._acked > self.ACKS_EVERY_S:
            if engine.apply_acks(int(self._clock() * 1000)):
                self._wake_senders()
            self._acked = now

    def _decide_split(self, split: SplitWork) -> None:
        """One round of an instance sharing the work: its partitions' verdicts (the engine
        rebuilt first when they changed), the work between batches for its types; the
        prune by the owner of partition 0 alone."""
        a = self.settings.alerting
        messages = split.poll(a.batch_max, a.poll_timeout_s)
        engine = self._follow(split.engine)
        now = time.monotonic()
        if 0 in split.assigned and now - self._pruned > self.PRUNE_EVERY_S:
            self._prune(engine)
            self._pruned = now
        self._between_batches(engine, now)
        at_ms = int(self._clock() * 1000)
        if self.watchdog is not None and self.watchdog.tick(at_ms, post=0 in split.assigned):
            self._wake_senders()
        self._decide(engine, split, messages)

    def _follow(self, engine: Engine) -> Engine:
        """The engine the work split built anew, for the watchdog and the refits too: the
        incidents of the types it takes over (their former owner's) leave the history's
        windows they cover out of the next fits."""
        if engine is not self.engine:
            self.engine = engine
            if self.watchdog is not None:
                self.watchdog.rebind(engine)
            if self.refitter is not None and engine.refit is not None:
                follow_incidents(engine.refit, engine.store)
                self.refitter.rebind(engine)
        return engine

    def _refit(self) -> None:
        """Refits on a thread of their own, out of the verdicts' way (``Refitter.keep``)."""
        assert self.refitter is not None
        assert self._baselines is not None
        every = min(self.REFIT_CHECK_S, float(self.settings.alerting.refit_interval_s))
        baselines = self._baselines
        self.refitter.keep(
            self._stop, lambda: baselines.caught_up, self._verdicts_waiting.is_set, every
        )

    # ----------------------------------------------------------------- probes

    def health(self) -> tuple[bool, dict[str, Any]]:
        if self._standby:
            return True, {"standby": True}
        alive = {t.name: t.is_alive() for t in self._threads}
        stale = time.monotonic() - self._heartbeat > 60
        ok = all(alive.values()) and not stale and self._failure is None
        return ok, {"threads": alive, "consumer_stalled": stale}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        if self._standby:
            try:
                holder = self._lease.holder_now() if self._lease is not None else None
            except DATABASE_ERRORS:
                holder = None  # the state is unreachable: still a standby, leader unknown
            return False, {"standby": True, "leader": holder[0] if holder else None}
        healthy, _ = self.health()
        v, b = self._split or self._verdicts, self._baselines
        detail = {
            "healthy": healthy,
            "baselines_loaded": bool(b and b.caught_up),
            "partitions": sorted(v.assigned) if v else [],
            "kafka": bool(v and v.kafka_ok),
            "kafka_error": v.last_error if v else None,
        }
        ok = (
            healthy
            and detail["baselines_loaded"]
            # Sharing the work, an instance may own none (more instances than partitions).
            and (bool(detail["partitions"]) or self._split is not None)
            and detail["kafka"]
        )
        return bool(ok), detail

    # ----------------------------------------------------------------- stop

    def request_stop(self) -> None:
        self._stop.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until stopped (a signal, ``stop``, or a failed thread); True if stopped."""
        return self._stop.wait(timeout_s)

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop within ``timeout_s`` (default STOP_TIMEOUT_S) whatever Kafka, Slack or Jira
        do. The threads get most of it, then the Kafka clients (the offsets' commit, for lag
        monitoring only, and closing). What does not finish in time is left behind and
        named in ``left_behind``: nothing is lost by it, since every decision and delivery
        is committed in the state file as it happens, and unfinished work resumes from
        there at the next start. The process should then exit without waiting on those
        clients (``run`` does)."""
        budget = self.STOP_TIMEOUT_S if timeout_s is None else timeout_s
        started = time.monotonic()
        deadline = started + budget
        self._stop.set()
        for drainer in list(self._drainers):
            drainer.interrupt()
        threads_until = started + budget * self.THREADS_SHARE
        for thread in self._threads:
            thread.join(timeout=max(0.0, threads_until - time.monotonic()))
        self.left_behind = [t.name for t in self._threads if t.is_alive()]
        stuck = {t.name for t in self._stuck()}
        consumer_done = "alerting-consumer" not in stuck
        if consumer_done:
            if not self._close_kafka(min(deadline, time.monotonic() + self.KAFKA_CLOSE_S)):
                self.left_behind.append("kafka-clients")
        else:
            self.left_behind.append("kafka-clients")
        if self._endpoint:
            self._endpoint.stop()
        if self.engine and consumer_done and "alerting-refit" not in stuck:
            # A thread still deciding, or still fitting, keeps its connections.
            self.engine.close()
            if self._refit_history is not None:
                self._refit_history.close()
            if self.watchdog is not None:
                self.watchdog.close()
        if not stuck:
            # A thread still running may still write: the lead stays held until it expires.
            self._give_state_up()
        elif self._lock:
            self._lock.release()
            self._lock = None
        log.info(
            "alerting service stopped",
            extra={
                "took_s": round(time.monotonic() - started, 2),
                "left_behind": self.left_behind,
            },
        )
        if self._failure is not None:
            raise AlertingServiceError(f"the service stopped on an error: {self._failure}")

    def _stuck(self) -> list[threading.Thread]:
        return [t for t in self._threads if t.is_alive()]

    def _close_kafka(self, deadline: float) -> bool:
        """Commit the offsets and close the consumers within ``deadline`` (``consumers.py``)."""
        engine = self.engine
        offsets = engine.offsets if engine is not None and self._failure is None else None
        return close_consumers(self._split or self._verdicts, self._baselines, offsets, deadline)


def run(settings: AlertingSettings) -> None:
    """Run until SIGTERM or SIGINT (entry point of `anchorwatch alerting serve`). Repeated
    warnings and errors are written once per interval (``log_limit.py``). A stop takes at
    most ``AlertingService.STOP_TIMEOUT_S``: when a Kafka client or a thread could not
    finish in time, the process exits at once rather than wait for them in the
    interpreter's own shutdown (where librdkafka would block again)."""
    service = AlertingService(settings)
    limited = log_limit.install()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        service.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service.start()
    # What the process holds once started (modules, settings, the restored state) lives as
    # long as it does: out of the collector's full passes, which otherwise walked it every
    # few thousand verdicts (70-100 ms each, a fifth of the engine's time at 10,000 types).
    gc.collect()
    gc.freeze()
    while not service.wait(1.0):
        pass
    try:
        service.stop()
    finally:
        limited()
        if service.left_behind:
            logging.shutdown()  # flush the log handlers: os._exit does not
            os._exit(1 if service._failure is not None else 0)


def list_incidents(
    state: Path | StateLocation, *, open_only: bool, limit: int
) -> list[IncidentListing]:
    """The incidents the service holds (for `anchorwatch alerting incidents`)."""
    store = Store(state, create=False)
    try:
        return store.list_incidents(open_only=open_only, limit=limit)
    finally:
        store.close()
