"""Where in the document, which model, at what cost: what an alert says about a drift
window's breakdown (``anchorwatch.contracts.breakdown``). Pure: no I/O and no markup of its
own. Untrusted text (anchor ids, request ids, model names) is cut to ``NAME_MAX`` and goes
through the ``show`` function the integration passes (Slack: inline code, escaped; Jira:
wiki-escaped; plain text: control characters replaced), as doc types do.

The rules, each simple enough to say in a line:

- **Before the incident**: the type's windows in the history that ended by the start of
  the first breaching window of the run that opened the incident (``first_breach_ms``; when
  not known, those that ended before the window that opened it). The figures "against" are
  their means: per anchor kind, the mean of the windows' per-kind means (those that had
  the kind); for the type, the mean of their mean drifts. ``with_history`` puts them in the
  view when the change is decided, so every message of it says the same.
- **A kind moved** when its mean drift now is above its mean before by more than
  ``max(MOVED_MIN, threshold - the type's mean before)``: on its own, it rose by more than
  the whole type's margin to its threshold. Otherwise it is steady; a kind none of those
  windows had is shown without a comparison.
- **A model drifts** when its requests' mean drift is above the threshold. The drift is
  *concentrated* in a model when that model is the only one drifting and every other
  request together is at or below the threshold (a rollout problem: roll back); *spread*
  when every model (the unlisted ones summed count as one) drifts (look upstream of the
  model, e.g. the input); otherwise it is in some models, not the others. When one model
  answered every request, it cannot tell. Requests naming no model are "unknown model".
- **Latency**: the window's request latency p50/p95 as the job computed them.

A window without a breakdown (from a job before it) has nothing here: every function says
None or nothing, and the messages read as they did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from anchorwatch.alerting.render import IncidentView, WindowPoint, truncate
from anchorwatch.contracts import WindowAggregate
from anchorwatch.contracts.breakdown import KINDS

#: The least rise of a kind's mean drift that counts as moved, whatever the margin.
MOVED_MIN: Final = 0.05
#: The characters of an anchor id, request id or model name shown.
NAME_MAX: Final = 60
UNKNOWN_MODEL: Final = "unknown model"

Show = Callable[[str], str]
ModelPattern = Literal["single", "concentrated", "spread", "partial", "none"]


# --------------------------------------------------------------------------- where


def with_history(view: IncidentView, history: Sequence[WindowPoint]) -> IncidentView:
    """The view with the figures before the incident (``kinds_before``, ``drift_before``),
    when its window has per-kind figures to compare with them; else the view as it is."""
    if view.kind != "drift" or not view.window.kinds:
        return view
    if view.first_breach_ms is not None:
        before = [p for p in history if p.window_end_ms <= view.first_breach_ms]
    else:
        before = [p for p in history if p.window_end_ms < view.opened_at_ms]
    per_kind: dict[str, list[float]] = {}
    for p in before:
        for kind, mean in (p.kind_means() or {}).items():
            per_kind.setdefault(kind, []).append(mean)
    return replace(
        view,
        kinds_before={k: round(sum(v) / len(v), 6) for k in KINDS if (v := per_kind.get(k))},
        drift_before=sum(p.mean_drift for p in before) / len(before) if before else None,
    )


@dataclass(frozen=True)
class KindShift:
    """One anchor kind of the window: its mean drift now and before (None: no window before
    the incident had it), and whether it moved."""

    kind: str
    now: float
    before: float | None
    moved: bool

    @property
    def rise(self) -> float:
        return self.now - self.before if self.before is not None else 0.0


def moved_margin(view: IncidentView) -> float:
    """How far a kind's mean must rise to have moved: the type's margin to its threshold
    before the incident, at least ``MOVED_MIN``."""
    if view.drift_before is None:
        return MOVED_MIN
    return max(MOVED_MIN, view.threshold - view.drift_before)


def kind_shifts(view: IncidentView) -> list[KindShift] | None:
    """The window's kinds in ``KINDS`` order (None: the window has no per-kind figures)."""
    kinds = view.window.kinds
    if not kinds:
        return None
    before = view.kinds_before or {}
    margin = moved_margin(view)
    shifts = []
    for kind in KINDS:
        figures = kinds.get(kind)
        if figures is None:
            continue
        was = before.get(kind)
        moved = was is not None and figures.mean_drift - was > margin
        shifts.append(KindShift(kind, figures.mean_drift, was, moved))
    return shifts


def where_phrase(view: IncidentView) -> str | None:
    """``SECTION anchors 0.92 against 0.85; TABLE, LIST steady`` (kinds are a fixed set:
    nothing to escape); None without per-kind figures."""
    shifts = kind_shifts(view)
    if not shifts:
        return None
    compared = [s for s in shifts if s.before is not None]
    fresh = sorted((s for s in shifts if s.before is None), key=lambda s: -s.now)
    if not compared:
        figures = ", ".join(f"{s.kind} anchors {s.now:.2f}" for s in fresh)
        return f"{figures} (no earlier windows to compare with)"
    moved = sorted((s for s in compared if s.moved), key=lambda s: -s.rise)
    steady = [s.kind for s in compared if not s.moved]
    parts = []
    if moved:
        parts.append(
            ", ".join(f"{s.kind} anchors {s.now:.2f} against {s.before:.2f}" for s in moved)
        )
    else:
        top = max(compared, key=lambda s: s.rise)
        parts.append(
            f"no anchor kind rose by more than {moved_margin(view):.2f} on its own (most: "
            f"{top.kind} anchors {top.now:.2f} against {top.before:.2f})"
        )
    if fresh:
        parts.append(", ".join(f"{s.kind} anchors {s.now:.2f}" for s in fresh) + " (none before)")
    if steady and moved:
        parts.append(f"{', '.join(steady)} steady")
    return "; ".join(parts)


def worst_anchors(window: WindowAggregate, show: Show, limit: int = 5) -> list[str]:
    """``TABLE_003 at position 1,204: 0.97 (request ev-1)``, the window's worst first."""
    out = []
    for a in (window.top_anchors or [])[:limit]:
        request = f" (request {show(truncate(a.event_id, NAME_MAX))})" if a.event_id else ""
        out.append(
            f"{show(truncate(a.anchor_id, NAME_MAX))} at position {a.position:,}: "
            f"{a.drift_score:.2f}{request}"
        )
    return out


# --------------------------------------------------------------------------- which model


@dataclass(frozen=True)
class ModelGroup:
    """The requests of one listed model (``model`` None: unknown), or of the models the
    window does not list, summed (``others``: how many)."""

    model: str | None
    requests: int
    mean: float
    others: int = 0

    def label(self, show: Show) -> str:
        if self.others:
            return f"{self.others} other model{'s' if self.others > 1 else ''}"
        return show(truncate(self.model, NAME_MAX)) if self.model is not None else UNKNOWN_MODEL


def model_groups(window: WindowAggregate) -> list[ModelGroup] | None:
    """The listed models and the others summed, highest mean drift first (None: the window
    has no per-model figures)."""
    if not window.models:
        return None
    groups = [ModelGroup(m.model, m.request_count, m.mean_drift) for m in window.models]
    if (o := window.other_models) is not None:
        groups.append(ModelGroup(None, o.request_count, o.mean_drift, o.model_count))
    return sorted(groups, key=lambda g: (-g.mean, -g.requests))


def model_pattern(groups: Sequence[ModelGroup], threshold: float) -> ModelPattern:
    """How the drift lies over the models (see the module's docstring)."""
    if len(groups) == 1:
        return "single"
    drifting = [g for g in groups if g.mean > threshold]
    if not drifting:
        return "none"
    if len(drifting) == len(groups):
        return "spread"
    if len(drifting) == 1:
        rest = [g for g in groups if g is not drifting[0]]
        rest_mean = sum(g.mean * g.requests for g in rest) / sum(g.requests for g in rest)
        if rest_mean <= threshold:
            return "concentrated"
    return "partial"


def _share(requests: int, total: int) -> str:
    percent = round(100 * requests / total) if total else 0
    return f"{percent}%" if percent or not requests else "<1%"


def model_phrase(window: WindowAggregate, threshold: float, show: Show) -> str | None:
    """``claude-x-2 0.93 over 40% of requests; claude-x-1 0.71 over 60%: concentrated in
    claude-x-2, a rollout problem: consider rolling back``; None without per-model figures."""
    groups = model_groups(window)
    if not groups:
        return None
    total = sum(g.requests for g in groups)
    figures = "; ".join(
        f"{g.label(show)} {g.mean:.2f} over {_share(g.requests, total)}"
        + (" of requests" if i == 0 else "")
        for i, g in enumerate(groups)
    )
    pattern = model_pattern(groups, threshold)
    drifting = [g.label(show) for g in groups if g.mean > threshold]
    calm = [g.label(show) for g in groups if g.mean <= threshold]
    verdict = {
        "single": "one model answered every request: it cannot tell a rollout from the input",
        "concentrated": (
            f"concentrated in {drifting[0] if drifting else ''}, a rollout problem: consider "
            "rolling back"
        ),
        "spread": "spread over every model: look upstream of the model, e.g. the input",
        "partial": (
            f"in {', '.join(drifting)}, not in {', '.join(calm)}: compare those versions "
            "with the others"
        ),
        "none": f"no model above the threshold {threshold:.2f} on its own",
    }[pattern]
    return f"{figures}: {verdict}"


# --------------------------------------------------------------------------- what it cost


def _ms(value: int) -> str:
    return f"{value:,} ms"


def latency_phrase(p50_ms: int | None, p95_ms: int | None) -> str | None:
    """``p95 latency 1,840 ms (p50 420 ms)``; None when the window carried none."""
    if p95_ms is None:
        return f"p50 latency {_ms(p50_ms)}" if p50_ms is not None else None
    tail = f" (p50 {_ms(p50_ms)})" if p50_ms is not None else ""
    return f"p95 latency {_ms(p95_ms)}{tail}"


def window_latency(window: WindowAggregate, *, short: bool = False) -> str | None:
    """The window's latency phrase; ``short``: its p95 alone (``p95 latency 1,840 ms``)."""
    if short and window.latency_p95_ms is not None:
        return latency_phrase(None, window.latency_p95_ms)
    return latency_phrase(window.latency_p50_ms, window.latency_p95_ms)
