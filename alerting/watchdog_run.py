"""The watchdog in the service: a thread of its own samples Kafka every ``check_interval_s``
(``watchdog_probe.py``: admin requests and a short read, kept off the consumer thread so
verdicts are not held up), and the consumer thread, between batches, hands each new sample
with the engine's view to the detector (``watchdog.py``) and posts what it decides
(``watchdog_post.py``) on the engine's store, like the held incidents it releases.

Metrics: ``anchorwatch_alerting_blind_doc_types`` (the types the notice lists now),
``anchorwatch_alerting_watchdog_checks_total{outcome}`` (``seeing``, ``blind``,
``warming_up``, ``no_input``, ``error``), ``anchorwatch_alerting_watchdog_notices_total{kind}``
and ``anchorwatch_alerting_watchdog_probe_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from anchorwatch.alerting.engine import Engine
from anchorwatch.alerting.settings import AlertingSettings
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
    ) -> None:
        w = settings.watchdog
        self._settings = settings
        self._engine = engine
        self._clock = clock
        self.metrics = WatchdogMetrics(registry)
        # follow: the engine holds the notice's row, so an Acknowledge click on it applies.
        self.poster = NoticePoster(
            settings,
            engine.store,
            integrations,
            clock_ms=lambda: int(clock() * 1000),
            follow=engine._keep,
        )
        listed = self.poster.notice.types if self.poster.notice is not None else None
        self.detector = Watchdog(
            Thresholds(w.blind_after_s, w.forget_after_s, w.update_interval_s), listed=listed
        )
        self.metrics.blind.set(len(listed or {}))
        self._probe = probe
        self._own_probe: InputProbe | None = None
        self._lock = threading.Lock()
        self._samples: list[tuple[float, Sample | None]] = []

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

    def tick(self, consumed_ms: int) -> bool:
        """Decides on the samples taken since the last tick; True when it posted."""
        with self._lock:
            samples, self._samples = self._samples, []
        posted = False
        for at_s, sample in samples:
            posted |= self._check(at_s, sample, consumed_ms)
        return posted

    def _check(self, at_s: float, sample: Sample | None, consumed_ms: int) -> bool:
        if sample is None:
            self.metrics.checks.labels("no_input").inc()
            return False
        wanted = self.detector.watched() | set(sample.arrivals)
        engine = self._engine
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
        decision = decide(
            self.poster.posted(), sight, at_s, self._settings.watchdog.update_interval_s
        )
        if decision is None:
            return False
        self.poster.post(decision, consumed_ms)
        self.metrics.notices.labels(decision.kind).inc()
        return True
