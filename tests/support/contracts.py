"""Records of every contract, valid, for the contract tests and their mutants: a snapshot (as
the dict a producer would send) with its anchors, and one of each record kind
(sample_records).
"""

from __future__ import annotations

from typing import Any

import orjson

from anchorwatch.contracts import (
    Baseline,
    DriftEvent,
    DriftEvidence,
    Verdict,
    WindowAggregate,
    decode_snapshot,
    verdict_id,
)

T0 = 1_764_403_200_000


def anchor(**kw: Any) -> dict[str, Any]:
    base = {
        "anchor_id": "SECTION_003",
        "position": 1527,
        "l2_norm": 4.28,
        "cosine_angle": 0.992,
        "kl_divergence": 0.037,
        "drift_score": 0.87,
        "recommendation": "re-sample",
    }
    return base | kw


def snapshot(**kw: Any) -> dict[str, Any]:
    base = {
        "event_id": "req-1",
        "event_time_ms": T0 + 1234,
        "doc_type": "medical_report",
        "snapshot_status": "active",
        "anchor_count": 2,
        "anchors": [
            anchor(),
            anchor(
                anchor_id="TABLE_001", drift_score=0.41, kl_divergence=0.2, recommendation="none"
            ),
        ],
    }
    return base | kw


def sample_records() -> dict[str, Any]:
    window = WindowAggregate(
        doc_type="nda",
        window_start_ms=T0,
        window_end_ms=T0 + 60_000,
        request_count=12,
        mean_drift=0.42,
        p95_drift=0.7,
        late_count=1,
    )
    evidence = DriftEvidence(window_start_ms=T0, mean_drift=0.9, threshold=0.6, request_count=40)
    return {
        "snapshot-event": decode_snapshot(orjson.dumps(snapshot())),
        "window-aggregate": window,
        "verdict": Verdict(
            verdict_id=verdict_id("nda", T0, "1"),
            job_version="1",
            window=window,
            rule="static",
            threshold=0.85,
            critical_threshold=0.9,
            min_requests=5,
            breach_level="none",
        ),
        "baseline": Baseline(
            doc_type="nda",
            version="b1",
            status="fitted",
            fitted_at_ms=T0,
            history_start_ms=T0 - 86_400_000,
            history_end_ms=T0,
            window_count=1440,
            center=0.4,
            spread=0.05,
            p95=0.5,
            p99=0.55,
            typical_request_count=30,
            threshold=0.6,
            critical_threshold=0.7,
            min_requests=8,
        ),
        "drift-event": DriftEvent(
            event_id="i1-alert",
            event_type="ANCHOR_DRIFT_ALERT",
            incident_id="i1",
            doc_type="nda",
            severity="critical",
            opened_at_ms=T0,
            emitted_at_ms=T0,
            evidence=evidence,
        ),
    }
