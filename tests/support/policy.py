"""Windows for the policy's tests."""

from __future__ import annotations

from typing import Any

from anchorwatch.contracts import Baseline, WindowAggregate

T0 = 1_764_403_200_000


def window(mean: float, n: int, **kw: Any) -> WindowAggregate:
    return WindowAggregate(
        doc_type="nda",
        window_start_ms=T0,
        window_end_ms=T0 + 60_000,
        request_count=n,
        mean_drift=mean,
        **kw,
    )


def baseline(doc_type: str = "nda", *, t0: int = T0, **kw: Any) -> Baseline:
    """A fitted baseline around 0.30 (spread 0.01, thresholds 0.35 / 0.45), fitted at t0."""
    fields: dict[str, Any] = {
        "doc_type": doc_type,
        "version": "b-test",
        "status": "fitted",
        "fitted_at_ms": t0,
        "history_start_ms": t0 - 86_400_000,
        "history_end_ms": t0,
        "window_count": 1440,
        "center": 0.30,
        "spread": 0.01,
        "p95": 0.32,
        "p99": 0.33,
        "typical_request_count": 40.0,
        "threshold": 0.35,
        "critical_threshold": 0.45,
        "min_requests": 10,
    }
    return Baseline(**{**fields, **kw})
