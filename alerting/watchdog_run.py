"""The watchdog in the service: a thread of its own samples Kafka every ``check_interval_s``
(``watchdog_probe.py``: admin requests and a short read, kept off the consumer thread so
verdicts are not held up), and the consumer thread, between batches, hands each new sample
with the engine's view to the detector (``watchdog.py``) and posts what it decides
(``watchdog_post.py``) on the engine's store, like the held incidents it releases.

With the work split among instances (``split_work.py``), the engine holds only its own
types: every instance's watchdog then sees every type through the state (``StateView``), and
only the owner of verdict partition 0 posts (its notice's writes are fenced by that
partition's lease); the others keep their detector current, so a new owner is not blind to
what came before it.

Metrics: ``anchorwatch_alerting_blind_doc_types`` (the types the notice lists now),
``anchorwatch_alerting_watchdog_checks_total{outcome}`` (``seeing``, ``blind``,
``warming_up``, ``no_input``, ``error``), ``anchorwatch_alerting_watchdog_notices_total{kind}``
and ``anchorwatch_alerting_watchdog_probe_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from anchorwatch.alerting.database import Database, StateLocation
from anchorwatch.alerting.engine import Engine, stored_watermarks
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA
from anchorwatch.alerting.watchdog import Observation, Thresholds, Watchdog, decide
from anchorwatch.alerting.watchdog_post import NoticePoster
from anchorwatch.alerting.watchdog_probe import InputProbe, ProbeError, Sample

log = logging.getLogger(__name__)

CHECK_OUTCOMES: Final = ("seeing", "blind", "warming_up", "no_input", "error")


class WatchdogMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.blind = Gauge(
            "anchorwatch_alerting_blind_doc_types",
            "Doc types anchorwatch cannot see now (snapshots arrive, no verdicts follow).",
            registry=registry,
        )
        self.checks = Counter(
            "anchorwatch_alerting_watchdog_checks_total",
            "Watchdog checks by outcome: seeing, blind, warming_up, no_input (no input "
            "topic), error (Kafka did not answer).",
            ["outcome"],
            registry=registry,
        )
        self.notices = Counter(
            "anchorwatch_alerting_watchdog_notices_total",
            "Changes of the watchdog's notice posted: opened, updated, resolved.",
            ["kind"],
            registry=registry,
        )
        self.probe = Histogram(
            "anchorwatch_alerting_watchdog_probe_seconds",
            "Time one check takes to read Kafka (offsets, committed offsets, tails).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        for outcome in CHECK_OUTCOMES:
            self.checks.labels(outcome)


class TypesView(Protocol):
    """What the detector needs of the types' verdicts: the engine, or the state."""

    def last_window_start_ms(self, doc_type: str) -> int | None: ...

    @property
    def watermark_ms(self) -> int: ...


class StateView:
    """Every type as the state holds it (the work split: the engine holds its own alone),
    read once per check on a connection of its own."""

    def __init__(self, location: StateLocation) -> None:
        self._db = Database(location, filename=FILENAME, schema=PG_SCHEMA)
        self._last: dict[str, int] = {}
        self._watermark = 0

    def load(self, doc_types: Collection[str]) -> None:
        wanted = set(doc_types)
        # All rows, filtered here: one statement whatever the number of types wanted.
        rows = self._db.execute("SELECT doc_type, last_window_start_ms FROM doc_types")
        self._last = {d: int(ms) for d, ms in rows if d in wanted}
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        self._watermark = max(stored_watermarks(meta, None).values(), default=0)

    def last_window_start_ms(self, doc_type: str) -> int | None:
        return self._last.get(doc_type)

    @property
    def watermark_ms(self) -> int:
        return self._watermark

    def close(self) -> None:
        self._db.close()


class WatchdogRunner:
    def __init__(
        self,
        settings: AlertingSettings,
        engine: Engine,
        integrations: Sequence[str],
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
        probe: Callable[[], Sample | None] | None = None,
        view: StateView | None = None,
    ) -> None:
        """``view``: the types as the state holds them, instead of the engine's."""
        w = settings.watchdog
        self._settings = settings
        self._integrations = integrations
        self._clock = clock
        self._view = view
        self.metrics = WatchdogMetrics(registry)
        self.rebind(engine)
        listed = self.poster.notice.types if self.poster.notice is not None else None
        self.detector = Watchdog(
            Thresholds(w.blind_after_s, w.forget_after_s, w.update_interval_s), listed=listed
        )
        self.metrics.blind.set(len(listed or {}))
        self._probe = probe
        self._own_probe: InputProbe | None = None
        self._lock = threading.Lock()
        self._samples: list[tuple[float, Sample | None]] = []

    def rebind(self, engine: Engine) -> None:
        """To this engine (the work split built a new one): the notice as the state holds
        it now, which another instance may have changed since."""
        self._engine = engine
        # follow: the engine holds the notice's row, so an Acknowledge click on it applies.
        self.poster = NoticePoster(
            self._settings,
            engine.store,
            self._integrations,
            clock_ms=lambda: int(self._clock() * 1000),
            follow=engine._keep,
        )

    def close(self) -> None:
        if self._view is not None:
            self._view.close()

    # ----------------------------------------------------------------- the probe thread

    def probe_loop(self, stop: threading.Event) -> None:
        """Samples until ``stop``; Kafka errors are counted and logged, the next check
        tries again."""
        if self._probe is None:
            self._own_probe = InputProbe(self._settings)
            self._probe = self._own_probe.sample
        try:
            while not stop.is_set():
                self.probe_once()
                stop.wait(self._settings.watchdog.check_interval_s)
        finally:
            if self._own_probe is not None:
                self._own_probe.close()

    def probe_once(self) -> None:
        assert self._probe is not None
        started = time.perf_counter()
        at_s = self._clock()
        try:
            sample = self._probe()
        except ProbeError as exc:
            self.metrics.checks.labels("error").inc()
            log.warning("watchdog check failed", extra={"error": str(exc)[:500]})
            return
        self.metrics.probe.observe(time.perf_counter() - started)
        with self._lock:
            self._samples.append((at_s, sample))

    # ----------------------------------------------------------------- the consumer thread

    def tick(self, consumed_ms: int, *, post: bool = True) -> bool:
        """Decides on the samples taken since the last tick; True when it posted. Without
        ``post`` (the work split: another instance posts) the detector only observes."""
        with self._lock:
            samples, self._samples = self._samples, []
        posted = False
        for at_s, sample in samples:
            posted |= self._check(at_s, sample, consumed_ms, post)
        return posted

    def _check(self, at_s: float, sample: Sample | None, consumed_ms: int, post: bool) -> bool:
        if sample is None:
            self.metrics.checks.labels("no_input").inc()
            return False
        wanted = self.detector.watched() | set(sample.arrivals)
        engine: TypesView = self._engine
        if self._view is not None:
            self._view.load(wanted)
            engine = self._view
        observation = Observation(
            at_s=at_s,
            arrivals=sample.arrivals,
            ends=sample.ends,
            committed=sample.committed,
            last_windows={d: engine.last_window_start_ms(d) for d in wanted},
            watermark_ms=engine.watermark_ms,
        )
        sight = self.detector.observe(observation)
        if sight is None:
            self.metrics.checks.labels("warming_up").inc()
            return False
        self.metrics.checks.labels("blind" if sight.blind else "seeing").inc()
        self.metrics.blind.set(len(sight.types))
        if not post:
            return False
        decision = decide(
            self.poster.posted(), sight, at_s, self._settings.watchdog.update_interval_s
        )
        if decision is None:
            return False
        self.poster.post(decision, consumed_ms)
        self.metrics.notices.labels(decision.kind).inc()
        return True
