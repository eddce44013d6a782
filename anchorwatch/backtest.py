"""Backtest: replay a history of window aggregates through the detection policy.

The core is pure: fit baselines on a prefix of the history (``fit_baselines``), replay the
rest through an ``IncidentTracker`` (the same code the alerting service runs) and collect
the incidents it would have opened. ``score`` compares incidents with labelled truth (the
generator's incident labels). ``aggregate_windows`` computes windows from snapshot events
with the Flink job's arithmetic (count, and the mean of the requests' mean drift); the
files a backtest replays are read by ``anchorwatch.history``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, Final

from anchorwatch.contracts import Baseline, SnapshotEvent, WindowAggregate
from anchorwatch.history import MINUTE_MS, BacktestInputError, Label
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.fitting import FitResult, fit_baselines
from anchorwatch.policy.incident_types import Incident, IncidentChange, final_incidents
from anchorwatch.policy.incidents import IncidentTracker
from anchorwatch.policy.series import quantile

DRIFT_KINDS: Final = ("jump", "ramp")


# --------------------------------------------------------------------------- inputs


def aggregate_windows(
    events: Iterable[SnapshotEvent], window_ms: int = MINUTE_MS
) -> list[WindowAggregate]:
    """One aggregate per (doc type, tumbling event-time window): request count and the mean
    of the requests' mean drift, as the Flink job computes them. Sorted by window, type."""
    sums: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for e in events:
        acc = sums[(e.doc_type, e.event_time_ms - e.event_time_ms % window_ms)]
        acc[0] += 1
        acc[1] += e.mean_drift
    return [
        WindowAggregate(
            doc_type=doc_type,
            window_start_ms=start,
            window_end_ms=start + window_ms,
            request_count=int(n),
            mean_drift=min(1.0, total / n),  # float sums may overshoot 1 by an ulp
        )
        for (doc_type, start), (n, total) in sorted(sums.items(), key=lambda kv: kv[0][::-1])
    ]


# --------------------------------------------------------------------------- shaping


@dataclass(frozen=True)
class Spacing:
    """How one doc type's rows are spaced, against the window size."""

    rows: int
    gaps: int  # consecutive rows further apart than one window: silence in between
    typical_ms: int | None  # median distance between consecutive rows (None: one row)


def deduplicate(
    windows: Sequence[WindowAggregate],
) -> tuple[list[WindowAggregate], dict[str, int]]:
    """One row per (doc type, window start): the last one in input order wins, as on a
    compacted topic. Returns the rows kept (in input order of the winners) and, per type,
    how many rows were dropped. The fit and the replay both see only the rows kept."""
    last: dict[tuple[str, int], int] = {}
    for i, w in enumerate(windows):
        last[(w.doc_type, w.window_start_ms)] = i
    dropped: dict[str, int] = defaultdict(int)
    kept = []
    for i, w in enumerate(windows):
        if last[(w.doc_type, w.window_start_ms)] == i:
            kept.append(w)
        else:
            dropped[w.doc_type] += 1
    return kept, dict(dropped)


def spacing(windows: Iterable[WindowAggregate]) -> dict[str, Spacing]:
    """Per doc type: rows, gaps wider than the rows' own window, and the typical spacing."""
    by_type: dict[str, list[WindowAggregate]] = defaultdict(list)
    for w in windows:
        by_type[w.doc_type].append(w)
    out = {}
    for doc_type, ws in by_type.items():
        ws.sort(key=lambda w: w.window_start_ms)
        steps = [b.window_start_ms - a.window_start_ms for a, b in pairwise(ws)]
        gaps = sum(1 for a, b in pairwise(ws) if b.window_start_ms > a.window_end_ms)
        typical = int(quantile(sorted(steps), 0.5)) if steps else None
        out[doc_type] = Spacing(len(ws), gaps, typical)
    return out


def rows_as_windows(windows: Sequence[WindowAggregate]) -> list[WindowAggregate]:
    """Each row as a window lasting its type's typical spacing (the median distance between
    its consecutive rows): 5-minute samples become 5-minute windows, so consecutive rows are
    consecutive slots and only a row that is missing counts as silence. A type with a single
    row keeps its window."""
    typical = {t: s.typical_ms for t, s in spacing(windows).items()}
    out = []
    for w in windows:
        size = typical.get(w.doc_type)
        if size and size > 0 and w.window_end_ms - w.window_start_ms != size:
            w = w.model_copy(update={"window_end_ms": w.window_start_ms + size})
        out.append(w)
    return out


# --------------------------------------------------------------------------- the replay


def fit_cuts(
    windows: Sequence[WindowAggregate],
    *,
    minutes: int | None = None,
    fraction: float | None = None,
) -> dict[str, int]:
    """Each doc type's own fit cut: ``minutes`` after its first window, or ``fraction`` of
    its own span (rounded down to a whole window of it). Series that start and end at
    different times each get a prefix to fit on and a rest to replay."""
    by_type: dict[str, list[WindowAggregate]] = defaultdict(list)
    for w in windows:
        by_type[w.doc_type].append(w)
    return {t: fit_until(ws, minutes=minutes, fraction=fraction) for t, ws in by_type.items()}


def fit_until(
    windows: Sequence[WindowAggregate],
    *,
    minutes: int | None = None,
    fraction: float | None = None,
) -> int:
    """Where the fitting prefix ends: ``minutes`` after the first window, or ``fraction``
    of the history's span (rounded down to a whole window)."""
    if not windows:
        raise BacktestInputError("the history holds no windows")
    first = min(w.window_start_ms for w in windows)
    last = max(w.window_end_ms for w in windows)
    if minutes is not None:
        return first + minutes * MINUTE_MS
    share = 0.5 if fraction is None else fraction
    size = windows[0].window_end_ms - windows[0].window_start_ms
    cut = first + int((last - first) * share)
    return cut - (cut - first) % size


@dataclass(frozen=True)
class BacktestResult:
    fits: dict[str, FitResult]  # empty when baselines were given
    baselines: dict[str, Baseline]
    fit_windows: int
    replayed_windows: int
    replay_start_ms: int  # the earliest type's cut
    replay_end_ms: int
    changes: list[IncidentChange] = field(repr=False)
    incidents: list[Incident]
    cuts: dict[str, int] = field(default_factory=dict)  # each type's own cut
    ends: dict[str, int] = field(default_factory=dict)  # each type's last replayed window end


def backtest(
    windows: Sequence[WindowAggregate],
    policy: PolicyConfig,
    *,
    fit_until_ms: int | Mapping[str, int],
    baselines: Mapping[str, Baseline] | None = None,
    fitted_at_ms: int | None = None,
) -> BacktestResult:
    """Fit each type on its windows that end by its cut (unless ``baselines`` are given),
    replay its windows that start from it. ``fit_until_ms``: one cut for every type, or a
    cut per type (see ``fit_cuts``; a type without one is replayed whole). Deterministic:
    each fit is dated at its cut. Rows repeating a type's window start: the last one counts,
    in the fit and the replay alike (``deduplicate``)."""
    windows, _ = deduplicate(windows)
    types = {w.doc_type for w in windows}
    if isinstance(fit_until_ms, int):
        cuts = dict.fromkeys(types, fit_until_ms)
    else:
        first = min((w.window_start_ms for w in windows), default=0)
        cuts = {t: fit_until_ms.get(t, first) for t in types}
    prefix = [w for w in windows if w.window_end_ms <= cuts[w.doc_type]]
    rest = [w for w in windows if w.window_start_ms >= cuts[w.doc_type]]
    fits: dict[str, FitResult] = {}
    if baselines is None:
        by_type: dict[str, list[WindowAggregate]] = defaultdict(list)
        for w in prefix:
            by_type[w.doc_type].append(w)
        for doc_type in sorted(by_type):
            cut = cuts[doc_type]
            fits.update(
                fit_baselines(
                    by_type[doc_type],
                    policy,
                    fitted_at_ms=fitted_at_ms if fitted_at_ms is not None else cut,
                    history_end_ms=cut,
                )
            )
        baselines = {t: f.baseline for t, f in fits.items()}
    tracker = IncidentTracker(policy, baselines)
    changes = tracker.replay(rest)
    start = min(cuts.values(), default=0)
    ends: dict[str, int] = {}
    for w in rest:
        ends[w.doc_type] = max(ends.get(w.doc_type, w.window_end_ms), w.window_end_ms)
    return BacktestResult(
        fits=fits,
        baselines=dict(baselines),
        fit_windows=len(prefix),
        replayed_windows=len(rest),
        replay_start_ms=start,
        replay_end_ms=max((w.window_end_ms for w in rest), default=start),
        changes=changes,
        incidents=final_incidents(changes),
        cuts=cuts,
        ends=ends,
    )


def incident_record(incident: Incident) -> dict[str, Any]:
    """The NDJSON line of an incident: every field, plus readable UTC times."""
    record = incident.to_record()
    record["opened_at"] = _iso(incident.opened_at_ms)
    record["resolved_at"] = _iso(incident.resolved_at_ms) if incident.resolved_at_ms else None
    return record


def change_record(change: IncidentChange) -> dict[str, Any]:
    """The NDJSON line of one state change (opened, updated, reopened, resolved): what
    changed, the window that caused it (None: a silent slot) and the incident after it."""
    w = change.window
    return {
        "change": change.kind,
        "window_start_ms": change.window_start_ms,
        "window_start": _iso(change.window_start_ms),
        "window": w.model_dump(mode="json", exclude_none=True) if w is not None else None,
        "incident": incident_record(change.incident),
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Alert:
    """What an operator sees: an incident from its opening (or re-opening) to its resolution."""

    incident: Incident  # its latest state
    start_ms: int  # start of the window that opened or re-opened it
    end_ms: float  # when it resolved; infinity while still open

    @property
    def doc_type(self) -> str:
        return self.incident.doc_type


def alerts(changes: Iterable[IncidentChange]) -> list[Alert]:
    """The alerts of a replay, in order of opening."""
    opened: dict[str, int] = {}
    latest: dict[str, Incident] = {}
    out = []
    for c in changes:
        key = c.incident.incident_id
        latest[key] = c.incident
        if c.kind in ("opened", "reopened"):
            opened[key] = c.window_start_ms
        elif c.kind == "resolved" and key in opened:
            end = c.incident.resolved_at_ms
            out.append(Alert(c.incident, opened.pop(key), math.inf if end is None else end))
    out += [Alert(latest[key], start, math.inf) for key, start in opened.items()]
    return sorted(out, key=lambda a: (a.start_ms, a.doc_type))


@dataclass(frozen=True)
class Detection:
    label: Label
    alert: Alert
    delay_windows: int | None  # None: an alert raised for an earlier incident was still open


@dataclass(frozen=True)
class Score:
    """Incident-level precision and recall against labelled drift incidents."""

    labels: list[Label]  # the positives scored (drift kinds inside the replayed span)
    detections: list[Detection]
    missed: list[Label]
    true_alerts: list[Alert]
    false_alerts: list[Alert]
    type_days: float  # doc types x days replayed: the denominator of false alarms per day

    @property
    def precision(self) -> float:
        alerts = len(self.true_alerts) + len(self.false_alerts)
        return len(self.true_alerts) / alerts if alerts else 1.0

    @property
    def recall(self) -> float:
        return len(self.detections) / len(self.labels) if self.labels else 1.0

    def delays(self, kind: str | None = None) -> list[int]:
        return sorted(
            d.delay_windows
            for d in self.detections
            if d.delay_windows is not None and (kind is None or d.label.kind == kind)
        )

    def delay_quantile(self, q: float, kind: str | None = None) -> float | None:
        values = self.delays(kind)
        return quantile([float(v) for v in values], q) if values else None

    @property
    def false_alarms_per_type_day(self) -> float:
        return len(self.false_alerts) / self.type_days if self.type_days else 0.0


def score(
    changes: Sequence[IncidentChange],
    labels: Iterable[Label],
    *,
    replay_start_ms: int | Mapping[str, int],
    replay_end_ms: int | Mapping[str, int],
    doc_types: int,
    window_ms: int = MINUTE_MS,
    grace_windows: int = 1,
    positive_kinds: Sequence[str] = DRIFT_KINDS,
) -> Score:
    """Match the alerts of a replay with labels of the same doc type.

    An alert is true when it was raised (opened or re-opened) by a window inside a drift
    label (``positive_kinds``) or within ``grace_windows`` after it (windows are judged when
    they close), false otherwise: alerts during data-quality faults or quiet traffic, and
    alerts raised before an incident that merely stay open into it, are false alarms. A
    label is detected by a true alert raised inside it (its delay: the number of the label's
    windows seen up to and including the one that raised the alert; 1 = its first window)
    or, without one, by a true alert raised for an earlier incident that is still open
    (no delay). Labels cut by either end of the replay are not scored, and alerts raised
    inside them count neither way."""
    grace = grace_windows * window_ms
    per_type = isinstance(replay_start_ms, Mapping) or isinstance(replay_end_ms, Mapping)

    def start_of(doc_type: str) -> int | None:
        if isinstance(replay_start_ms, Mapping):
            return replay_start_ms.get(doc_type)
        return replay_start_ms

    def end_of(doc_type: str) -> int | None:
        if isinstance(replay_end_ms, Mapping):
            return replay_end_ms.get(doc_type)
        return replay_end_ms

    def replayed(lab: Label) -> bool:
        start, end = start_of(lab.doc_type), end_of(lab.doc_type)
        return start is not None and end is not None and start <= lab.start_ms <= lab.end_ms <= end

    drift = [lab for lab in labels if lab.kind in positive_kinds]
    positives = [lab for lab in drift if replayed(lab)]
    cut = [lab for lab in drift if lab not in positives]

    def raised_in(alert: Alert, lab: Label) -> bool:
        return (
            lab.doc_type == alert.doc_type and lab.start_ms <= alert.start_ms < lab.end_ms + grace
        )

    true_alerts, false_alerts = [], []
    for alert in alerts(changes):
        if any(raised_in(alert, lab) for lab in positives):
            true_alerts.append(alert)
        elif not any(raised_in(alert, lab) for lab in cut):
            false_alerts.append(alert)
    detections, missed = [], []
    for lab in sorted(positives, key=lambda x: (x.start_ms, x.doc_type)):
        raised = [a for a in true_alerts if raised_in(a, lab)]
        if raised:
            first = min(raised, key=lambda a: a.start_ms)
            delay = (first.start_ms - lab.start_ms) // window_ms + 1
            detections.append(Detection(lab, first, delay))
            continue
        still_open = [
            a
            for a in true_alerts
            if a.doc_type == lab.doc_type and a.start_ms < lab.start_ms < a.end_ms
        ]
        if still_open:
            detections.append(Detection(lab, still_open[0], None))
        else:
            missed.append(lab)
    day = 24 * 60 * MINUTE_MS
    if not per_type:
        assert isinstance(replay_start_ms, int)
        assert isinstance(replay_end_ms, int)
        type_days = doc_types * (replay_end_ms - replay_start_ms) / day
    else:
        # Each type's own replayed span: series of different lengths weigh what they hold.
        types = set(replay_start_ms) if isinstance(replay_start_ms, Mapping) else set()
        types |= set(replay_end_ms) if isinstance(replay_end_ms, Mapping) else set()
        type_days = 0.0
        for t in types:
            start, end = start_of(t), end_of(t)
            if start is not None and end is not None:
                type_days += max(0, end - start) / day
    return Score(positives, detections, missed, true_alerts, false_alerts, type_days)
