"""Fit a doc type's baseline from the one-minute windows of its history. Pure statistics.

For each type, over its windows (request count n_i, mean drift m_i):

- ``center``: the median of the window means (per UTC hour of day too, when seasonal);
- ``spread``: how far a window mean strays at the type's typical request count. A mean over
  n requests has standard error sigma / sqrt(n), so the residuals are first put on one scale,
  u_i = (m_i - center) * sqrt(n_i), whose robust spread (1.4826 x MAD) estimates the
  per-request sigma; ``spread = sigma / sqrt(typical_request_count)``. A window of n requests
  then strays by ``spread * sqrt(typical / n)`` (see ``spread_at``): busy and sparse windows of
  the same type are judged on the same footing. Median and MAD ignore the incidents and
  data-quality faults the history holds, as long as they cover under half of it. The
  history's upper tail and its value grid bound sigma from below (``sigma.request_sigma``), and
  a short or correlated history widens it to a prediction interval on its effective number
  of windows (``spread_inflation``);
- ``autocorrelation``: the phi of the AR(1) series whose sums of neighbouring windows vary
  as much as the history's do (``long_run_ratio``); pooled evidence is judged on it;
- incidents in the history: the policy, run over the history with a first fit, finds the
  excursions it would raise; the type is fitted again without them (``fit_baseline``);
- ``threshold = max(center + max(sensitivity x spread, min_margin), threshold_floor)`` and
  ``critical_threshold`` alike with the critical figures, both capped at 1;
- ``min_requests``: the smallest n whose standard error fits ``significance`` times into the
  margin ``threshold - center``, so one window alone is trusted only when its mean is precise
  enough to mean something; at least ``min_requests_floor``;
- ``extreme_threshold``: beyond anything the history showed (``_beyond_history``): one
  window above it is enough to open an incident.

Types with fewer than ``min_windows`` windows are marked ``insufficient_history`` and carry
the static rule's figures, which is what ``judge_window`` applies to them.

A fit knows nothing of pins: it replays the history by the fitted figures (the policy
``without_pins``). ``pinned_baseline`` and ``unpinned_baseline`` make the records that pin a
type and let it go again (``anchorwatch baseline pin``).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from anchorwatch.contracts import Baseline, BaselinePin, WindowAggregate
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.incident_types import final_incidents
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.seasons import hourly_centers, weekday_offsets
from anchorwatch.policy.series import (
    clip,
    effective_windows,
    equivalent_autocorrelation,
    long_run_ratio,
    median,
    quantile,
    spread_inflation,
)
from anchorwatch.policy.sigma import TAIL_WINDOWS, grid_sigma, request_sigma, residuals
from anchorwatch.policy.spikes import MIN_SPIKE_WINDOWS
from anchorwatch.policy.tail import MIN_SPIKES, spike_record, spikes
from anchorwatch.policy.window import DAY_MS, MIN_SPREAD, centers_at, centers_of


@dataclass(frozen=True)
class FitResult:
    baseline: Baseline
    notes: tuple[str, ...]  # why a type is unfitted, why seasonality is off, capped figures


def baseline_version(doc_type: str, fitted_at_ms: int, start_ms: int, end_ms: int) -> str:
    """Deterministic, and new on every refit (the fit time is part of it)."""
    digest = hashlib.sha256(f"{doc_type}\x1f{fitted_at_ms}\x1f{start_ms}\x1f{end_ms}".encode())
    return f"b1-{digest.hexdigest()[:20]}"


def fit_baseline(
    doc_type: str,
    windows: Sequence[WindowAggregate],
    policy: PolicyConfig,
    *,
    fitted_at_ms: int,
    history_start_ms: int,
    history_end_ms: int,
) -> FitResult:
    """Fit one type from its windows (any order; windows without requests are ignored,
    a window start that repeats counts once: ``one_per_start``).

    Twice, when the history holds incidents: the policy itself, run over the history with
    the first fit and its spike record, finds the excursions it would have raised, and the
    type is fitted again without their windows. Median and MAD shrug incidents off, but
    neighbouring windows inside one do not look independent: on a sparse type a few short
    incidents read as a lag-1 autocorrelation of 0.2-0.35, which discounts the pooled
    evidence live and hides the next incident. The spike record keeps a heavy-tailed
    type's ordinary highs out of those excursions (they are what it is fitted on), and the
    page budget catches what the tighter second fit would page on (``_budgeted``). As with
    a refit, the excursions are dropped only while they are under half the history."""
    kw = {
        "fitted_at_ms": fitted_at_ms,
        "history_start_ms": history_start_ms,
        "history_end_ms": history_end_ms,
    }
    ws, repeated = one_per_start(windows)
    once = (f"{repeated} windows repeating a window start left out (one per start counts)",)
    first = _fit_once(doc_type, ws, policy, **kw)
    if repeated:
        first = FitResult(first.baseline, (*first.notes, *once))
    if first.baseline.status != "fitted":
        return first
    # The first fit's record holds its single-window spikes only: incidents of three
    # windows or more in the history must not pass for the type's ordinary spikes.
    record = _spike_record(ws, first.baseline, policy)
    spiky = _with_record(ws, first.baseline, policy, lengths=MIN_SPIKE_WINDOWS, record=record)
    spans = excursions(doc_type, ws, spiky, policy)
    if not spans:  # the first fit stands, and so does its record
        return _budgeted(ws, ws, spans, first, policy, record=record)
    kept = _outside(ws, spans)
    if 2 * len(kept) < len(ws):
        return _budgeted(ws, kept, spans, first, policy)
    second = _fit_once(doc_type, kept, policy, **kw)
    note = (
        f"{len(ws) - len(kept)} windows inside {len(spans)} excursion(s) the policy finds in "
        "the history left out of the fit"
    )
    notes = (*second.notes, *(once if repeated else ()), note)
    return _budgeted(ws, kept, spans, FitResult(second.baseline, notes), policy)


def _outside(
    ws: Sequence[WindowAggregate], spans: Sequence[tuple[int, int]]
) -> list[WindowAggregate]:
    """The windows of ``ws`` (in time order) that start in none of ``spans`` ([start, end))."""
    starts = [w.window_start_ms for w in ws]
    inside: set[int] = set()
    for a, b in spans:  # the windows starting in [a, b): a run of ws, found by bisection
        inside.update(range(bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)))
    return [w for i, w in enumerate(ws) if i not in inside]


def one_per_start(windows: Iterable[WindowAggregate]) -> tuple[list[WindowAggregate], int]:
    """The windows with requests, one per window start, in time order, and how many
    repeated a start. The copy that counts depends on the copies alone, not on their order:
    the most requests (a window emitted again after a late request counted holds more),
    then the higher mean, then the whole record. Otherwise the replay took the first copy
    to arrive, the spike record the last and the statistics all of them: a history with
    windows emitted twice (an at-least-once topic) fitted differently in another order."""
    best: dict[int, WindowAggregate] = {}
    repeated = 0
    for w in windows:
        if w.request_count <= 0:
            continue
        held = best.get(w.window_start_ms)
        if held is not None:
            repeated += 1
            if _rank(held) >= _rank(w):
                continue
        best[w.window_start_ms] = w
    return [best[start] for start in sorted(best)], repeated


def _rank(w: WindowAggregate) -> tuple[int, float, int, str]:
    return (w.request_count, w.mean_drift, w.window_end_ms, w.model_dump_json())


def excursions(
    doc_type: str, ws: Sequence[WindowAggregate], baseline: Baseline, policy: PolicyConfig
) -> list[tuple[int, int]]:
    """[start, end) of every incident the policy raises on ``ws`` (in time order) against
    ``baseline``: from its first breaching window to its resolution (or the history's
    end)."""
    if not ws:
        return []
    # Each excursion on its own: a storm's one long incident would swallow the history.
    singly = policy.without_pins().model_copy(
        update={"rules": tuple(r.model_copy(update={"storm_after": 0}) for r in policy.rules)}
    )
    changes = IncidentTracker(singly, {doc_type: baseline}).replay(ws)
    end = ws[-1].window_end_ms
    return sorted(
        (i.first_breach_ms, i.resolved_at_ms if i.resolved_at_ms is not None else end)
        for i in final_incidents(changes)
    )


def _with_record(
    ws: Sequence[WindowAggregate],
    baseline: Baseline,
    policy: PolicyConfig,
    *,
    lengths: int | None = None,
    record: list[float] | None = None,
) -> Baseline:
    """``baseline`` with the spike record of ``ws`` (see ``tail.spike_record``), read at a
    risk per window of the page budget over a week's windows; with ``lengths``, every
    length up to it held to the single windows' record (a record of single spikes).
    ``record``: ``_spike_record(ws, baseline, policy)``, when already worked out."""
    if not ws:  # every window inside an excursion: no ordinary spike to learn
        return baseline.model_copy(update={"page_budget": policy.page_budget})
    if record is None:
        record = _spike_record(ws, baseline, policy)
    if lengths is not None:
        record = [record[0]] * lengths
    return baseline.model_copy(update={"spike_record": record, "page_budget": policy.page_budget})


def _spike_record(
    ws: Sequence[WindowAggregate], baseline: Baseline, policy: PolicyConfig
) -> list[float]:
    """The spike record ``_with_record`` gives ``baseline`` on ``ws`` (not empty)."""
    size = max(ws[0].window_end_ms - ws[0].window_start_ms, 1)
    risk = policy.page_budget * size / WEEK_MS
    by_slot = _slot_residuals(ws, baseline)
    margin = baseline.threshold - baseline.center
    # A history that shows few spikes above the threshold keeps a record that holds none
    # (capped at the margin): a handful are as likely the incidents a history holds as
    # its habits.
    record = spike_record(by_slot, risk, margin)
    if spikes(by_slot, margin) < MIN_SPIKES:
        record = [min(r, margin) for r in record]
    return record


#: How far each replay that pages beyond the budget widens the margins, and how often.
BUDGET_STEP = 1.25
BUDGET_STEPS = 4
FORGIVEN_PAGES = 2
WEEK_MS = 7 * DAY_MS


def _budgeted(
    ws: Sequence[WindowAggregate],
    kept: Sequence[WindowAggregate],
    spans: Sequence[tuple[int, int]],
    fitted: FitResult,
    policy: PolicyConfig,
    *,
    record: list[float] | None = None,
) -> FitResult:
    """The fitted baseline with its spike record (``record``: when already worked out on
    ``kept``), and its thresholds raised until the history's replay keeps the page budget.

    The record (``_with_record``) is read on the windows the fit kept, conclusive ones
    only. The replay runs the policy over the whole history, ordinary highs
    included, and counts its pages outside the left-out excursions; while they exceed
    ``page_budget`` x the history's weeks, the margins widen by ``BUDGET_STEP`` (at most
    ``BUDGET_STEPS`` times); ``FORGIVEN_PAGES`` more are allowed. A history shorter than a
    week can say no more: the record, read past it on its Pareto tail, carries the rest."""
    size = max(ws[0].window_end_ms - ws[0].window_start_ms, 1)
    base = recorded = _with_record(kept, fitted.baseline, policy, record=record)
    weeks = max(base.history_end_ms - base.history_start_ms, size) / WEEK_MS
    # A few pages are forgiven however short the history: they are as likely incidents the
    # first fit's replay let through (a history holds them) as ordinary highs, which page
    # far more often where they are the problem (every half hour, not twice a history).
    allowed = FORGIVEN_PAGES + math.floor(policy.page_budget * weeks + 1e-9)
    basis = "the spread"
    notes = list(fitted.notes)
    factor = 1.0
    for step in range(BUDGET_STEPS + 1):
        pages = _replayed_pages(ws, spans, base, policy)
        if pages <= allowed or step == BUDGET_STEPS or base.threshold >= 1.0:
            break
        factor *= BUDGET_STEP
        base = _widened(recorded, factor, policy)
        basis = f"margins x{factor:.2f} to keep the replay within the page budget"
    base = base.model_copy(
        update={"replayed_pages_per_week": pages / weeks, "threshold_basis": basis}
    )
    if pages > allowed:
        notes.append(
            f"the history's replay pages {pages} times ({pages / weeks:.1f} a week) with "
            f"margins x{factor:.2f}, over the budget of {policy.page_budget:g} a week"
        )
    return FitResult(base, tuple(notes))


def _min_requests(typical: float, spread: float, room: float, policy: PolicyConfig) -> int:
    """The smallest n with significance * spread_at(n) <= room (at least the floor)."""
    needed = typical * (policy.significance * spread / room) ** 2
    return max(policy.min_requests_floor, math.ceil(needed - 1e-9))


def _slot_residuals(ws: Sequence[WindowAggregate], baseline: Baseline) -> list[float | None]:
    """Window means minus their center, one per slot from the first window to the last;
    None where the slot holds no window, or one too small to judge alone."""
    if not ws:
        return []
    size = max(ws[0].window_end_ms - ws[0].window_start_ms, 1)
    first = ws[0].window_start_ms
    out: list[float | None] = [None] * ((ws[-1].window_start_ms - first) // size + 1)
    judged = [w for w in ws if w.request_count >= baseline.min_requests]
    centers = centers_of(baseline, [w.window_start_ms for w in judged])
    for w, center in zip(judged, centers, strict=True):
        out[(w.window_start_ms - first) // size] = w.mean_drift - center
    return out


def _replayed_pages(
    ws: Sequence[WindowAggregate],
    spans: Sequence[tuple[int, int]],
    baseline: Baseline,
    policy: PolicyConfig,
) -> int:
    """Pages (incidents opened, re-opened or escalated) the policy raises on ``ws`` against
    ``baseline``, outside ``spans``."""
    changes = IncidentTracker(policy.without_pins(), {baseline.doc_type: baseline}).replay(ws)
    return sum(
        1
        for c in changes
        if c.kind in ("opened", "reopened", "updated")
        and not any(a <= c.window_start_ms < b for a, b in spans)
    )


def _widened(baseline: Baseline, factor: float, policy: PolicyConfig) -> Baseline:
    """``baseline`` with its warning and critical margins (and what follows from them)
    times ``factor``."""
    center = baseline.center
    threshold = clip(center + factor * (baseline.threshold - center))
    critical = clip(max(center + factor * (baseline.critical_threshold - center), threshold))
    room = threshold - center
    min_requests = (
        _min_requests(baseline.typical_request_count, baseline.spread, room, policy)
        if room > 0
        else baseline.min_requests
    )
    extreme = baseline.extreme_threshold
    if extreme is not None:
        extreme = clip(max(extreme, critical))
    return baseline.model_copy(
        update={
            "threshold": threshold,
            "critical_threshold": critical,
            "min_requests": min_requests,
            "extreme_threshold": extreme,
        }
    )


def _fit_once(
    doc_type: str,
    ws: Sequence[WindowAggregate],
    policy: PolicyConfig,
    *,
    fitted_at_ms: int,
    history_start_ms: int,
    history_end_ms: int,
) -> FitResult:
    notes: list[str] = []
    common: dict[str, Any] = {
        "doc_type": doc_type,
        "version": baseline_version(doc_type, fitted_at_ms, history_start_ms, history_end_ms),
        "fitted_at_ms": fitted_at_ms,
        "history_start_ms": history_start_ms,
        "history_end_ms": history_end_ms,
        "window_count": len(ws),
    }
    means = sorted(w.mean_drift for w in ws)
    counts = [float(w.request_count) for w in ws]
    if len(ws) < policy.min_windows:
        notes.append(
            f"insufficient history: {len(ws)} windows, needs {policy.min_windows}; "
            "the static rule applies"
        )
        static = policy.fallback
        baseline = Baseline(
            **common,
            status="insufficient_history",
            center=median(means) if ws else 0.0,
            spread=(
                request_sigma(ws, [median(means)] * len(ws), grid_sigma(ws), policy)
                / math.sqrt(median(counts))
                if ws
                else 0.0
            ),
            p95=quantile(means, 0.95) if ws else 0.0,
            p99=quantile(means, 0.99) if ws else 0.0,
            typical_request_count=median(counts) if ws else 0.0,
            threshold=static.threshold,
            critical_threshold=static.critical_threshold,
            min_requests=static.min_requests,
        )
        return FitResult(baseline, tuple(notes))

    center = median(means)
    typical = median(counts)
    hourly = hourly_centers(ws, center, policy, notes)
    # Each window's center (flat, by the hour, by the day of the week too) and the grid
    # the means sit on, for the estimates below: worked out once each.
    starts = [w.window_start_ms for w in ws]
    grid = grid_sigma(ws)
    centers = [center] * len(ws)
    sigma = request_sigma(ws, centers, grid, policy)
    if hourly is not None:
        seasonal = centers_at(center, hourly, None, starts)
        seasonal_sigma = request_sigma(ws, seasonal, grid, policy)
        if policy.seasonality == "auto" and seasonal_sigma > (1 - policy.seasonal_min_gain) * sigma:
            notes.append(
                f"seasonality not used: the hourly profile narrows the spread by only "
                f"{1 - seasonal_sigma / sigma:.0%} (auto needs {policy.seasonal_min_gain:.0%})"
                if sigma > 0
                else "seasonality not used: the spread is already zero"
            )
            hourly = None
        else:
            sigma, centers = seasonal_sigma, seasonal
    weekday = weekday_offsets(ws, center, hourly, policy, notes)
    if weekday is not None:
        centers = centers_at(center, hourly, weekday, starts)
        sigma = request_sigma(ws, centers, grid, policy)
    phi = equivalent_autocorrelation(long_run_ratio(ws, center, hourly, weekday))
    effective = effective_windows(len(ws), phi)
    inflation = spread_inflation(effective, policy.sensitivity)
    if inflation > 1.05:
        notes.append(
            f"short or correlated history: {len(ws)} windows with autocorrelation {phi:.2f} "
            f"count as {effective:.0f} independent ones; spread raised x{inflation:.2f}"
        )
    spread = max(sigma * inflation / math.sqrt(typical), MIN_SPREAD)

    margin = max(policy.sensitivity * spread, policy.min_margin)
    critical_margin = max(policy.critical_sensitivity * spread, policy.critical_min_margin)
    threshold = clip(max(center + margin, policy.threshold_floor))
    critical = clip(max(center + critical_margin, threshold))
    if threshold >= 1.0:
        notes.append(
            f"threshold capped at 1.0: center {center:.3f} leaves no room for a rise of "
            f"{margin:.3f}; this type cannot breach"
        )
    # Smallest n with significance * spread_at(n) <= margin (the margin as actually stored).
    room = threshold - center
    min_requests = (
        _min_requests(typical, spread, room, policy) if room > 0 else policy.min_requests_floor
    )
    highest, allowance = _beyond_history(ws, centers)
    extreme = clip(max(critical, center + highest + max(allowance, threshold - center)))
    baseline = Baseline(
        **common,
        status="fitted",
        center=center,
        spread=spread,
        p95=quantile(means, 0.95),
        p99=quantile(means, 0.99),
        typical_request_count=typical,
        threshold=threshold,
        critical_threshold=critical,
        min_requests=min_requests,
        hourly_center=hourly,
        weekday_offset=weekday,
        autocorrelation=phi,
        significance=policy.significance,
        extreme_threshold=extreme,
    )
    return FitResult(baseline, tuple(notes))


def pinned_baseline(
    held: Baseline | None, doc_type: str, pin: BaselinePin, policy: PolicyConfig, *, now_ms: int
) -> Baseline:
    """The record that pins ``doc_type``: the baseline it holds, fitted figures kept as the
    fit gave them, with ``pin``, dated now so that every reader takes it over the one it
    holds; for a type without one, a record of no history, carrying the static rule."""
    if held is None:
        held = fit_baseline(
            doc_type,
            [],
            policy,
            fitted_at_ms=now_ms,
            history_start_ms=now_ms,
            history_end_ms=now_ms,
        ).baseline
    return _redated(held, pin, now_ms, "p1")


def unpinned_baseline(held: Baseline, *, now_ms: int) -> Baseline:
    """``held`` without its pin, dated now: the type is judged by its fitted figures again
    (the next refit follows ``refit_interval_s`` later)."""
    return _redated(held, None, now_ms, "u1")


def _redated(held: Baseline, pin: BaselinePin | None, now_ms: int, prefix: str) -> Baseline:
    mark = pin.model_dump_json() if pin is not None else ""
    digest = hashlib.sha256(f"{held.version}\x1f{now_ms}\x1f{mark}".encode())
    return held.model_copy(
        update={
            "pin": pin,
            "fitted_at_ms": max(now_ms, held.fitted_at_ms),
            "version": f"{prefix}-{digest.hexdigest()[:20]}",
        }
    )


def fit_baselines(
    windows: Iterable[WindowAggregate],
    policy: PolicyConfig,
    *,
    fitted_at_ms: int,
    history_start_ms: int | None = None,
    history_end_ms: int | None = None,
    on_type: Callable[[str], None] | None = None,
) -> dict[str, FitResult]:
    """Fit every type seen in ``windows``. The history range defaults to the windows' own
    span; ``on_type`` is called after each type (progress for long fits)."""
    per_type: dict[str, list[WindowAggregate]] = defaultdict(list)
    first, last = None, None
    for w in windows:
        per_type[w.doc_type].append(w)
        first = w.window_start_ms if first is None else min(first, w.window_start_ms)
        last = w.window_end_ms if last is None else max(last, w.window_end_ms)
    start = history_start_ms if history_start_ms is not None else first
    end = history_end_ms if history_end_ms is not None else last
    if start is None or end is None:
        return {}
    results = {}
    for doc_type in sorted(per_type):
        results[doc_type] = fit_baseline(
            doc_type,
            per_type[doc_type],
            policy,
            fitted_at_ms=fitted_at_ms,
            history_start_ms=start,
            history_end_ms=max(start, end),
        )
        if on_type is not None:
            on_type(doc_type)
    return results


def _beyond_history(ws: Sequence[WindowAggregate], centers: Sequence[float]) -> tuple[float, float]:
    """The history's highest window (above the center) and how far above it a new window
    must be to be beyond anything the history showed.

    A new window tops the highest of N exchangeable ones with probability 1/(N + 1). How
    far it may top it follows from the tail: for one that decays like an exponential of
    scale beta (estimated by the mean gap of the ``TAIL_WINDOWS`` highest windows above
    the next one), by t with probability exp(-t / beta) / N: once in ~100 history lengths
    at ``EXTREME_SPACINGS`` gaps. The fit asks for that allowance and for the margin
    (a rise that matters), so heavy or skewed tails, with wide gaps, keep their own spikes
    below it. All windows count, small ones too: a sparse type's noisy single windows set
    it high."""
    top = sorted(residuals(ws, centers, scaled=False))[-(TAIL_WINDOWS + 1) :]
    if len(top) < 2:
        return (top[-1] if top else 0.0), 0.0
    gap = sum(top[1:]) / (len(top) - 1) - top[0]
    return top[-1], EXTREME_SPACINGS * gap


#: Gaps of the history's top windows by which a single window must top its highest to be
#: beyond it: exp(-4.6) ~ 1/100.
EXTREME_SPACINGS = 4.6
