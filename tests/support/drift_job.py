"""Feeding the drift job and reading what it decided, shared by the tests that run it (on
the embedded mini-cluster, a session cluster, a cluster of several TaskManagers): snapshot
events placed in chosen minutes, baselines, and waiting for the verdicts of chosen windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from anchorwatch.connectors.publisher import SnapshotPublisher
from anchorwatch.contracts import AnchorSnapshot, Baseline, SnapshotEvent, Verdict, encode
from anchorwatch.demo import slice as flow
from anchorwatch.jobs.settings import JobSettings
from tests.support.kafka import ordered_producer

T0 = 1_764_403_200_000
MIN = 60_000


def event(doc: str, t: int, drift: float, n: int = 0) -> SnapshotEvent:
    anchor = AnchorSnapshot(
        anchor_id="SECTION_001",
        position=10,
        l2_norm=4.0,
        cosine_angle=0.99,
        kl_divergence=0.05,
        drift_score=drift,
        recommendation="none",
    )
    return SnapshotEvent(event_id=f"{doc}-{t}-{n}", event_time_ms=t, doc_type=doc,
                         snapshot_status="active", anchor_count=1, anchors=[anchor])  # fmt: skip


def minute(doc: str, m: int, drifts: list[float], *, jitter: int = 0) -> list[SnapshotEvent]:
    """Events spread over minute ``m``; ``jitter`` reorders them (within the watermark delay)."""
    out = [event(doc, T0 + m * MIN + 1_000 + i * 1_000, d, i) for i, d in enumerate(drifts)]
    return out[::-1] if jitter else out


def publish(settings: JobSettings, events: list[SnapshotEvent]) -> None:
    publisher = SnapshotPublisher(settings.kafka, settings.topics, source="test")
    for e in events:
        publisher.publish(e)
    publisher.flush()


def publish_baseline(settings: JobSettings, baseline: Baseline) -> None:
    producer = ordered_producer(settings.kafka.bootstrap_servers)
    producer.produce(settings.topics.baselines, encode(baseline), baseline.doc_type.encode())
    assert producer.flush(10) == 0


def baseline(doc: str, version: str, threshold: float, fitted_at: int) -> Baseline:
    return Baseline(doc_type=doc, version=version, status="fitted", fitted_at_ms=fitted_at,
                    history_start_ms=T0 - 86_400_000, history_end_ms=T0, window_count=1440,
                    center=threshold - 0.1, spread=0.02, p95=threshold - 0.05,
                    p99=threshold - 0.02, typical_request_count=10, threshold=threshold,
                    critical_threshold=min(1.0, threshold + 0.1), min_requests=2)  # fmt: skip


def wait_for(
    settings: JobSettings, done: Callable[[list[Verdict]], bool], timeout_s: float = 120
) -> list[Verdict]:
    """The verdicts topic's content once ``done`` holds for it; fails after ``timeout_s``
    naming the windows that did have verdicts."""
    deadline = time.monotonic() + timeout_s
    while True:
        verdicts = flow.read_verdicts(settings)
        if done(verdicts):
            return verdicts
        if time.monotonic() > deadline:
            got = sorted((v.window.doc_type, v.window.window_start_ms) for v in verdicts)
            raise AssertionError(f"timed out; verdicts so far: {got}")
        time.sleep(1)


def windows_of(verdicts: list[Verdict], doc: str) -> dict[int, Verdict]:
    return {v.window.window_start_ms: v for v in verdicts if v.window.doc_type == doc}


def has(doc: str, *minutes: int) -> Callable[[list[Verdict]], bool]:
    return lambda vs: all(T0 + m * MIN in windows_of(vs, doc) for m in minutes)
