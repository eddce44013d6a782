"""Refitting baselines in the running system: which windows a type's next fit rests on, and
when it is due. Pure: no I/O, no clock (times are passed in).

Per doc type a bounded history of windows is kept: those that start within ``history_ms``
of event time before the type's latest window end. The rule for what a refit sees:

- windows inside an incident are left out: an incident covers its type's windows from its
  first breach until it resolves (open: until further notice; a re-opened incident covers
  the windows since its first breach again). Drift is not the normal to fit.
- unless the incident resolved "adapted" (the level moved and stayed, and the tracker
  accepted it): then the windows before that shift's first breach are dropped, and the
  windows from the shift on, the incident's own included, are the type's new history.

A type is due when ``interval_ms`` of wall time has passed since its baseline was fitted
(the baseline it holds, or the last fit made here, whichever is later) and at least
``min_new_windows`` usable windows ended after that baseline's history. A type with no
baseline at all is due once it has ``min_new_windows`` usable windows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from anchorwatch.contracts import Baseline, WindowAggregate


@dataclass(frozen=True)
class RefitSchedule:
    interval_ms: int  # wall time between fits of one type
    history_ms: int  # event time of history a fit rests on
    min_new_windows: int  # usable windows newer than the current baseline's history

    def __post_init__(self) -> None:
        if self.interval_ms < 0 or self.history_ms <= 0 or self.min_new_windows < 1:
            raise ValueError(
                "refit schedule: interval_ms >= 0, history_ms > 0, min_new_windows >= 1"
            )


@dataclass(frozen=True)
class FitInput:
    """What one type's refit fits on."""

    doc_type: str
    windows: list[WindowAggregate]
    history_start_ms: int
    history_end_ms: int


@dataclass
class _TypeHistory:
    # window start -> (end, request count, mean drift): small tuples, a week of minutes
    # per type is ~10,000 of them.
    windows: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    latest_end_ms: int = 0
    floor_ms: int | None = None  # after an adaptation: nothing before the shift counts
    spans: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # incident -> span
    fitted_at_ms: int | None = None  # last fit made here
    fitted_until_ms: int | None = None  # ... and the end of the history it rested on


class RefitHistory:
    """Every doc type's refit history (see the module doc for the rule)."""

    def __init__(self, schedule: RefitSchedule) -> None:
        self.schedule = schedule
        self._types: dict[str, _TypeHistory] = {}

    # ----------------------------------------------------------------- inputs

    def add(self, window: WindowAggregate) -> None:
        """A judged window. A start already held is replaced (the last one counts)."""
        h = self._types.setdefault(window.doc_type, _TypeHistory())
        h.windows[window.window_start_ms] = (
            window.window_end_ms,
            window.request_count,
            window.mean_drift,
        )
        h.latest_end_ms = max(h.latest_end_ms, window.window_end_ms)
        self._prune(h)

    def incident(
        self,
        doc_type: str,
        incident_id: str,
        *,
        first_breach_ms: int,
        resolved_at_ms: int | None,
        resolution: str | None,
    ) -> None:
        """An incident as it is now (opened, re-opened, updated or resolved)."""
        h = self._types.setdefault(doc_type, _TypeHistory())
        if resolution == "adapted":
            h.spans.pop(incident_id, None)
            h.floor_ms = first_breach_ms if h.floor_ms is None else max(h.floor_ms, first_breach_ms)
            for start in [s for s in h.windows if s < first_breach_ms]:
                del h.windows[start]
            return
        h.spans[incident_id] = (first_breach_ms, resolved_at_ms)

    def fitted(self, doc_type: str, *, fitted_at_ms: int, history_end_ms: int) -> None:
        """A fit of ``doc_type`` was made (published) at ``fitted_at_ms``."""
        h = self._types.setdefault(doc_type, _TypeHistory())
        h.fitted_at_ms, h.fitted_until_ms = fitted_at_ms, history_end_ms

    # ----------------------------------------------------------------- outputs

    def doc_types(self) -> list[str]:
        return sorted(self._types)

    def usable(self, doc_type: str) -> list[WindowAggregate]:
        """The windows a fit of ``doc_type`` would rest on now, in event-time order."""
        h = self._types.get(doc_type)
        rows = self._usable_rows(h) if h is not None else []
        if not rows:
            return []
        start, end, count, mean = rows[0]
        # Copies of one validated window: several times cheaper than validating each.
        template = WindowAggregate(
            doc_type=doc_type,
            window_start_ms=start,
            window_end_ms=end,
            request_count=count,
            mean_drift=mean,
        )
        return [
            template.model_copy(
                update={
                    "window_start_ms": start,
                    "window_end_ms": end,
                    "request_count": count,
                    "mean_drift": mean,
                }
            )
            for start, end, count, mean in rows
        ]

    def due(
        self, now_ms: int, held: Callable[[str], Baseline | None], limit: int | None = None
    ) -> list[FitInput]:
        """The types due for a refit at ``now_ms`` with what each would be fitted on (at most
        ``limit``, longest unfitted first). ``held``: the baseline a type is judged by now."""
        out: list[FitInput] = []
        order = sorted(self._types, key=lambda t: (self._last_fit(t, held), t))
        for doc_type in order:
            if limit is not None and len(out) >= limit:
                break
            h = self._types[doc_type]
            baseline = held(doc_type)
            last_fit, fitted_until = h.fitted_at_ms, h.fitted_until_ms
            if baseline is not None and (last_fit is None or baseline.fitted_at_ms > last_fit):
                last_fit, fitted_until = baseline.fitted_at_ms, baseline.history_end_ms
            if last_fit is not None and now_ms - last_fit < self.schedule.interval_ms:
                continue
            rows = self._usable_rows(h)
            new = sum(1 for r in rows if fitted_until is None or r[1] > fitted_until)
            if new < self.schedule.min_new_windows:
                continue
            windows = self.usable(doc_type)
            out.append(
                FitInput(
                    doc_type,
                    windows,
                    windows[0].window_start_ms,
                    max(w.window_end_ms for w in windows),
                )
            )
        return out

    def _last_fit(self, doc_type: str, held: Callable[[str], Baseline | None]) -> int:
        baseline = held(doc_type)
        own = self._types[doc_type].fitted_at_ms
        return max(own or -1, baseline.fitted_at_ms if baseline is not None else -1)

    def window_count(self) -> int:
        """Windows held over all types (for the service's log line at start)."""
        return sum(len(h.windows) for h in self._types.values())

    # ----------------------------------------------------------------- internals

    def _usable_rows(self, h: _TypeHistory) -> list[tuple[int, int, int, float]]:
        cutoff = h.latest_end_ms - self.schedule.history_ms
        floor = max(cutoff, h.floor_ms) if h.floor_ms is not None else cutoff
        spans = list(h.spans.values())
        return [
            (start, *h.windows[start])
            for start in sorted(h.windows)
            if start >= floor and not _covered(start, spans)
        ]

    def _prune(self, h: _TypeHistory) -> None:
        cutoff = h.latest_end_ms - self.schedule.history_ms
        # Windows arrive nearly in order: drop from the oldest inserted while they are old.
        while h.windows:
            oldest = next(iter(h.windows))
            if oldest >= cutoff:
                break
            del h.windows[oldest]
        h.spans = {
            i: (start, end) for i, (start, end) in h.spans.items() if end is None or end > cutoff
        }


def _covered(start_ms: int, spans: Iterable[tuple[int, int | None]]) -> bool:
    return any(first <= start_ms and (end is None or start_ms < end) for first, end in spans)
