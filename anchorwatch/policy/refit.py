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

A pinned type (its owner's figures, in settings or on its baseline record) is never refitted:
when it would be due, it comes out marked ``pinned``, with no windows, for the caller to
count and to mark as handled (``fitted``) so that it is not due again until the interval has
passed.

One lock guards the history: the service decides verdicts (``add``, ``incident``, ``flush``)
on one thread while another gathers and marks fits (``due``, ``fitted``); the fits
themselves run outside it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from anchorwatch.contracts import Baseline, WindowAggregate

#: One window as the history holds it: (start ms, end ms, request count, mean drift).
Row = tuple[int, int, int, float]


class WindowRows(Protocol):
    """Where a ``RefitHistory`` keeps its windows. A week of minutes is ~10,000 windows per
    type: in memory for tests and small deployments (``MemoryRows``), on disk for the
    service (``anchorwatch.alerting.refit_rows``), where thousands of types would not fit
    in memory."""

    def put(self, doc_type: str, row: Row) -> None:
        """Hold ``row``; one already held with the same start is replaced."""

    def drop_before(self, doc_type: str, start_ms: int) -> None:
        """Forget ``doc_type``'s windows that start before ``start_ms``."""

    def rows(self, doc_type: str, since_ms: int, ended_after_ms: int | None = None) -> list[Row]:
        """``doc_type``'s windows starting at or after ``since_ms`` (and ending after
        ``ended_after_ms``, when given), in start order."""
        ...

    def count(self) -> int:
        """Windows held over all types."""
        ...

    def latest_ends(self) -> dict[str, int]:
        """Per doc type, the latest end of a window ever put (rows kept from an earlier
        run tell the history where each type's event time stands)."""
        ...

    def flush(self) -> None:
        """Make what was put and dropped so far durable (where the rows are durable)."""

    def close(self) -> None:
        """Flush and let go of what the rows hold open."""


class MemoryRows:
    """``WindowRows`` in a dict per type: start -> (end, request count, mean drift)."""

    def __init__(self) -> None:
        self._types: dict[str, dict[int, tuple[int, int, float]]] = {}
        self._latest: dict[str, int] = {}

    def put(self, doc_type: str, row: Row) -> None:
        start, end, count, mean = row
        self._types.setdefault(doc_type, {})[start] = (end, count, mean)
        self._latest[doc_type] = max(end, self._latest.get(doc_type, end))

    def drop_before(self, doc_type: str, start_ms: int) -> None:
        windows = self._types.get(doc_type, {})
        for start in [s for s in windows if s < start_ms]:
            del windows[start]

    def rows(self, doc_type: str, since_ms: int, ended_after_ms: int | None = None) -> list[Row]:
        windows = self._types.get(doc_type, {})
        return [
            (start, *windows[start])
            for start in sorted(windows)
            if start >= since_ms and (ended_after_ms is None or windows[start][0] > ended_after_ms)
        ]

    def count(self) -> int:
        return sum(len(w) for w in self._types.values())

    def latest_ends(self) -> dict[str, int]:
        return dict(self._latest)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


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
    pinned: bool = False  # pinned: not to be refitted (no windows gathered)


@dataclass
class _TypeHistory:
    # The windows themselves are in the history's ``WindowRows``.
    latest_end_ms: int = 0
    pruned_to_ms: int = 0  # windows before this start are dropped from the rows
    floor_ms: int | None = None  # after an adaptation: nothing before the shift counts
    spans: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # incident -> span
    fitted_at_ms: int | None = None  # last fit made here
    fitted_until_ms: int | None = None  # ... and the end of the history it rested on


F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    @functools.wraps(method)
    def guarded(self: RefitHistory, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(F, guarded)


class RefitHistory:
    """Every doc type's refit history (see the module doc for the rule)."""

    #: Old windows are dropped from the rows once this much event time (at most a tenth of
    #: the history) has passed since the last drop; reads skip them anyway. One delete per
    #: type per hour, not one per window.
    PRUNE_EVERY_MS = 3_600_000

    def __init__(self, schedule: RefitSchedule, rows: WindowRows | None = None) -> None:
        """``rows``: where the windows are kept (default: in memory). Rows it already holds
        count as added (a restart on the service's own file)."""
        self.schedule = schedule
        self._lock = threading.RLock()
        self.rows: WindowRows = rows if rows is not None else MemoryRows()
        self._types: dict[str, _TypeHistory] = {
            doc_type: _TypeHistory(latest_end_ms=end_ms)
            for doc_type, end_ms in self.rows.latest_ends().items()
        }

    # ----------------------------------------------------------------- inputs

    @_locked
    def add(self, window: WindowAggregate) -> None:
        """A judged window. A start already held is replaced (the last one counts)."""
        h = self._types.setdefault(window.doc_type, _TypeHistory())
        self.rows.put(
            window.doc_type,
            (window.window_start_ms, window.window_end_ms, window.request_count, window.mean_drift),
        )
        h.latest_end_ms = max(h.latest_end_ms, window.window_end_ms)
        self._prune(window.doc_type, h)

    @_locked
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
            self.rows.drop_before(doc_type, first_breach_ms)
            return
        h.spans[incident_id] = (first_breach_ms, resolved_at_ms)

    @_locked
    def fitted(self, doc_type: str, *, fitted_at_ms: int, history_end_ms: int) -> None:
        """A fit of ``doc_type`` was made (published) at ``fitted_at_ms``."""
        h = self._types.setdefault(doc_type, _TypeHistory())
        h.fitted_at_ms, h.fitted_until_ms = fitted_at_ms, history_end_ms

    @_locked
    def flush(self) -> None:
        """Make the windows added so far durable (a no-op in memory)."""
        self.rows.flush()

    @_locked
    def close(self) -> None:
        self.rows.close()

    # ----------------------------------------------------------------- outputs

    @_locked
    def doc_types(self) -> list[str]:
        return sorted(self._types)

    @_locked
    def usable(self, doc_type: str) -> list[WindowAggregate]:
        """The windows a fit of ``doc_type`` would rest on now, in event-time order."""
        h = self._types.get(doc_type)
        rows = self._usable_rows(doc_type, h) if h is not None else []
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

    @_locked
    def due(
        self,
        now_ms: int,
        held: Callable[[str], Baseline | None],
        limit: int | None = None,
        pinned: Callable[[str], bool] | None = None,
        include: Callable[[str], bool] | None = None,
    ) -> list[FitInput]:
        """The types due for a refit at ``now_ms`` with what each would be fitted on (at most
        ``limit``, longest unfitted first). ``held``: the baseline a type is judged by now;
        ``pinned``: whether a type is pinned (default: its baseline carries a pin). Pinned
        types that would be due come out marked so, without windows, beyond ``limit``.
        ``include``: the types to consider (default: all)."""
        out: list[FitInput] = []
        fits = 0
        is_pinned = pinned or (lambda t: (b := held(t)) is not None and b.pin is not None)
        types = self._types if include is None else [t for t in self._types if include(t)]
        order = sorted(types, key=lambda t: (self._last_fit(t, held), t))
        for doc_type in order:
            pinned_type = is_pinned(doc_type)
            if limit is not None and fits >= limit and not pinned_type:
                continue
            h = self._types[doc_type]
            last_fit, fitted_until = self._fit_of(h, held(doc_type))
            if last_fit is not None and now_ms - last_fit < self.schedule.interval_ms:
                continue
            new = len(self._usable_rows(doc_type, h, ended_after_ms=fitted_until))
            if new < self.schedule.min_new_windows:
                continue
            if pinned_type:
                out.append(FitInput(doc_type, [], h.latest_end_ms, h.latest_end_ms, pinned=True))
                continue
            fits += 1
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

    @_locked
    def backlog(self, now_ms: int, held: Callable[[str], Baseline | None]) -> tuple[int, int, int]:
        """How far refits are behind, cheaply (no rows read): the fitted types past their
        interval with a window ended after the history of their last fit; the longest time
        (ms) since such a type's last fit (0 when none is behind); and the types never
        fitted (waiting for enough windows, or for their turn)."""
        behind, oldest, unfitted = 0, 0, 0
        for doc_type, h in self._types.items():
            last_fit, fitted_until = self._fit_of(h, held(doc_type))
            if last_fit is None:
                unfitted += 1
                continue
            if fitted_until is not None and h.latest_end_ms <= fitted_until:
                continue
            age = now_ms - last_fit
            if age >= self.schedule.interval_ms:
                behind += 1
                oldest = max(oldest, age)
        return behind, oldest, unfitted

    @staticmethod
    def _fit_of(h: _TypeHistory, baseline: Baseline | None) -> tuple[int | None, int | None]:
        """A type's last fit (wall time) and the end of the history it rested on (event
        time): the service's own, or its baseline's when that is newer."""
        if baseline is not None and (
            h.fitted_at_ms is None or baseline.fitted_at_ms > h.fitted_at_ms
        ):
            return baseline.fitted_at_ms, baseline.history_end_ms
        return h.fitted_at_ms, h.fitted_until_ms

    def _last_fit(self, doc_type: str, held: Callable[[str], Baseline | None]) -> int:
        baseline = held(doc_type)
        own = self._types[doc_type].fitted_at_ms
        return max(own or -1, baseline.fitted_at_ms if baseline is not None else -1)

    @_locked
    def window_count(self) -> int:
        """Windows held over all types (for the service's log line at start)."""
        return self.rows.count()

    # ----------------------------------------------------------------- internals

    def _usable_rows(
        self, doc_type: str, h: _TypeHistory, ended_after_ms: int | None = None
    ) -> list[Row]:
        cutoff = h.latest_end_ms - self.schedule.history_ms
        floor = max(cutoff, h.floor_ms) if h.floor_ms is not None else cutoff
        spans = list(h.spans.values())
        return [
            r for r in self.rows.rows(doc_type, floor, ended_after_ms) if not _covered(r[0], spans)
        ]

    def _prune(self, doc_type: str, h: _TypeHistory) -> None:
        cutoff = h.latest_end_ms - self.schedule.history_ms
        if cutoff - h.pruned_to_ms < min(self.PRUNE_EVERY_MS, self.schedule.history_ms // 10):
            return
        self.rows.drop_before(doc_type, cutoff)
        h.pruned_to_ms = cutoff
        h.spans = {
            i: (start, end) for i, (start, end) in h.spans.items() if end is None or end > cutoff
        }


def _covered(start_ms: int, spans: Iterable[tuple[int, int | None]]) -> bool:
    return any(first <= start_ms and (end is None or start_ms < end) for first, end in spans)
