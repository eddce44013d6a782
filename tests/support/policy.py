"""Windows for the policy's tests."""

from __future__ import annotations

from typing import Any

from anchorwatch.contracts import WindowAggregate

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
