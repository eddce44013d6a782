"""Detection bench, the production-like scenario families (``anchorwatch.demo.scenarios``):
each family's targets, the scoring of one replay's pages against a scenario's labels
(``score_scenario``, into a ``FamilyScore`` that adds up over scenarios), the reason codes
the drift job's judge gives inside ``diagnose`` labels, and ``run_family``, which generates
one scenario and scores every variant on it (a worker process). Printed by
bench/detection.py.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from anchorwatch.backtest import backtest
from anchorwatch.contracts import Baseline, WindowAggregate, encode
from anchorwatch.demo.scenario_grid import scenario as make_family_scenario
from anchorwatch.demo.scenarios import ScenarioLabel
from anchorwatch.jobs.judge import DocTypeJudge
from anchorwatch.policy import window as policy_window
from anchorwatch.policy.config import PolicyConfig
from anchorwatch.policy.incident_types import IncidentChange
from anchorwatch.policy.window import QualityLimits
from bench.detection_data import DAY_MINUTES, MINUTE_MS
from bench.detection_score import Variant, q, variants

WEEK_MS = 7 * DAY_MINUTES * MINUTE_MS
PAGE_KINDS = ("opened", "reopened", "updated")  # what reaches a person
ALERT_KINDS = ("opened", "reopened")
SCENARIO_TARGETS = {"precision": 0.90, "recall": 0.90, "clean_pages_per_week": 1.0}
IID_TARGETS = {"precision": 0.95, "recall": 0.95, "jump_median_delay": 2.0}
ABSORB_TARGET = DIAGNOSE_TARGET = 0.90


@dataclass(frozen=True)
class Change:
    """What scoring needs of an incident change."""

    doc_type: str
    kind: str
    start_ms: int  # the window that caused it
    incident_id: str


def changes_of(changes: Sequence[IncidentChange]) -> list[Change]:
    return [
        Change(c.incident.doc_type, c.kind, c.window_start_ms, c.incident.incident_id)
        for c in changes
    ]


@dataclass
class FamilyScore:
    """Counts of one or more scenarios of a family under one policy (they add up)."""

    alert_labels: int = 0
    detected: int = 0
    delays: list[int] = field(default_factory=list)
    jump_delays: list[int] = field(default_factory=list)
    absorb_labels: int = 0
    absorb_paged: int = 0  # paged at least once
    absorbed: int = 0  # paged exactly once, and that incident resolved before the next anomaly
    diagnose_labels: int = 0
    diagnose_quiet: int = 0  # no page
    diagnosed: int = 0  # a verdict named it with one of the label's codes
    true_alerts: int = 0
    false_alerts: int = 0
    opened: int = 0
    reopened: int = 0
    clean_pages: int = 0
    type_weeks: float = 0.0
    missed: list[ScenarioLabel] = field(default_factory=list)
    false_pages: list[Change] = field(default_factory=list)

    def add(self, other: FamilyScore) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)

    @property
    def precision(self) -> float:
        alerts = self.true_alerts + self.false_alerts
        return self.true_alerts / alerts if alerts else 1.0

    @property
    def recall(self) -> float:
        labels = self.alert_labels + self.absorb_labels
        return (self.detected + self.absorb_paged) / labels if labels else math.nan

    @property
    def median_delay(self) -> float | None:
        return q(self.delays, 0.5)

    def per_type_week(self, count: int) -> float:
        return count / self.type_weeks if self.type_weeks else 0.0

    @property
    def reopens_per_incident(self) -> float:
        return self.reopened / self.opened if self.opened else 0.0


def score_scenario(
    changes: Sequence[Change],
    labels: Sequence[ScenarioLabel],
    *,
    types: int,
    replay_start_ms: int,
    replay_end_ms: int,
    codes_seen: Mapping[ScenarioLabel, frozenset[str]],
    window_ms: int = MINUTE_MS,
    grace_windows: int = 1,
) -> FamilyScore:
    """Score the pages of one replay against a scenario's labels (same doc type only).

    A page raised by a window inside an ``alert`` label, or within ``grace_windows`` after it
    (windows are judged when they close), detects that label (each label counts once; its
    delay counts windows from ``due``, 1 = the due window) and, if it opened or re-opened an
    incident, is a true alert. An incident that stays open into a label does not detect it:
    nobody is told. Inside an ``absorb`` label (and no alert label) the first page is the
    expected one; every later one is a false page, as is a page inside a ``diagnose`` label
    or outside every label. False pages outside alert and diagnose labels are the "clean"
    pages. Escalations (``updated``) are pages but not alerts: they detect a label and count
    as clean pages, but precision counts openings and re-openings only. Labels cut by either
    end of the replay are not scored."""
    grace = grace_windows * window_ms
    score = FamilyScore(type_weeks=types * (replay_end_ms - replay_start_ms) / WEEK_MS)
    scored = [
        lab for lab in labels if lab.start_ms >= replay_start_ms and lab.end_ms <= replay_end_ms
    ]
    by_type: dict[str, list[ScenarioLabel]] = {}
    for lab in scored:
        by_type.setdefault(lab.doc_type, []).append(lab)

    first_page: dict[ScenarioLabel, Change] = {}
    shift_pages: dict[ScenarioLabel, list[Change]] = {}
    resolved: dict[str, int] = {}
    for c in sorted(changes, key=lambda c: c.start_ms):
        if c.kind == "resolved":
            resolved.setdefault(c.incident_id, c.start_ms)
            continue
        if c.kind not in PAGE_KINDS:
            continue
        alert = c.kind in ALERT_KINDS
        score.opened += c.kind == "opened"
        score.reopened += c.kind == "reopened"
        inside = [
            lab
            for lab in by_type.get(c.doc_type, [])
            if lab.start_ms <= c.start_ms < lab.end_ms + grace
        ]
        hits = [lab for lab in inside if lab.expect == "alert"]
        absorbing = [lab for lab in inside if lab.expect == "absorb"]
        wrong = [lab for lab in inside if lab.expect == "diagnose"]
        if hits:
            for lab in hits:
                first_page.setdefault(lab, c)
            score.true_alerts += alert
        elif wrong:
            for lab in wrong:
                first_page.setdefault(lab, c)
            score.false_alerts += alert
            score.false_pages.append(c)
        elif absorbing and not any(shift_pages.get(lab) for lab in absorbing):
            for lab in absorbing:
                shift_pages[lab] = [c]
            score.true_alerts += alert
        else:
            for lab in absorbing:
                shift_pages.setdefault(lab, []).append(c)
            score.false_alerts += alert
            score.clean_pages += 1
            score.false_pages.append(c)

    for lab in scored:
        page = first_page.get(lab)
        if lab.expect == "alert":
            score.alert_labels += 1
            if page is None:
                score.missed.append(lab)
                continue
            score.detected += 1
            delay = (page.start_ms - lab.due) // window_ms + 1
            score.delays.append(delay)
            if lab.kind == "jump":
                score.jump_delays.append(delay)
        elif lab.expect == "absorb":
            score.absorb_labels += 1
            pages = shift_pages.get(lab, [])
            if not pages:
                score.missed.append(lab)
                continue
            score.absorb_paged += 1
            # The next anomaly on top of the new level must find the incident resolved.
            nested = [
                o.start_ms
                for o in by_type[lab.doc_type]
                if o.expect == "alert" and lab.start_ms <= o.start_ms < lab.end_ms
            ]
            settle_by = min(nested, default=lab.end_ms)
            end = resolved.get(pages[0].incident_id)
            score.absorbed += len(pages) == 1 and end is not None and end < settle_by
        else:
            score.diagnose_labels += 1
            score.diagnose_quiet += page is None
            score.diagnosed += bool(set(lab.codes) & codes_seen.get(lab, frozenset()))
    return score


def policy_knows(code: str) -> bool:
    """Whether the policy's window judgement mentions a reason code (read from its source;
    only for the report: scoring looks at the codes actually emitted)."""
    source = inspect.getsource(policy_window)
    return f'"{code}"' in source or f"'{code}'" in source


def diagnosis_codes(
    windows: Sequence[WindowAggregate],
    labels: Sequence[ScenarioLabel],
    baselines: Mapping[str, Baseline],
    policy: PolicyConfig,
    changes: Sequence[IncidentChange],
    replay_start_ms: int,
) -> dict[ScenarioLabel, frozenset[str]]:
    """Per ``diagnose`` label, the reason codes of the verdicts on its windows (as the drift
    job judges them: each type's windows from ``replay_start_ms`` on, in order, through the
    job's per-type judge, which keeps state between windows) and of the incident changes
    raised inside it."""
    out: dict[ScenarioLabel, frozenset[str]] = {}
    wanted = [lab for lab in labels if lab.expect == "diagnose"]
    types = {lab.doc_type for lab in wanted}
    found: dict[str, list[tuple[int, list[str]]]] = {t: [] for t in types}
    judges: dict[str, DocTypeJudge] = {}
    for w in sorted(windows, key=lambda w: (w.doc_type, w.window_start_ms)):
        if w.doc_type not in types or w.window_start_ms < replay_start_ms:
            continue
        judge = judges.get(w.doc_type)
        if judge is None:
            judge = judges[w.doc_type] = DocTypeJudge("bench", policy.fallback, QualityLimits())
            base = baselines.get(w.doc_type)
            if base is not None:
                judge.add_baseline(encode(base).decode())
        verdict = judge.judge(w.model_dump())
        found[w.doc_type].append((w.window_start_ms, [r.code for r in verdict.reasons]))
    for lab in wanted:
        codes = {
            code
            for start_ms, codes_of in found[lab.doc_type]
            if lab.start_ms <= start_ms < lab.end_ms
            for code in codes_of
        }
        codes |= {
            r.code
            for c in changes
            if c.judgement is not None
            and c.incident.doc_type == lab.doc_type
            and lab.start_ms <= c.window_start_ms < lab.end_ms
            for r in c.judgement.reasons
        }
        out[lab] = frozenset(codes)
    return out


def scenario_variants() -> list[Variant]:
    return [variants()[0], variants()[-1]]


def run_family(args: tuple[str, int, int, int]) -> tuple[str, list[FamilyScore]]:
    """Generate one scenario and score every variant on it (a worker process)."""
    family, seed, types, eval_days = args
    sc = make_family_scenario(family, seed, types=types, eval_days=eval_days)
    windows = sc.windows
    out = []
    for v in scenario_variants():
        result = backtest(windows, v.policy, fit_until_ms=sc.eval_start_ms)
        codes = diagnosis_codes(
            windows,
            sc.labels,
            result.baselines if v.per_type else {},
            v.policy,
            result.changes,
            sc.eval_start_ms,
        )
        out.append(
            score_scenario(
                changes_of(result.changes),
                sc.labels,
                types=len(sc.types),
                replay_start_ms=result.replay_start_ms,
                replay_end_ms=sc.eval_end_ms,
                codes_seen=codes,
                window_ms=sc.window_ms,
            )
        )
    return family, out


def labelled(s: FamilyScore) -> bool:
    """Whether the scenarios hold incidents to page on (precision and recall apply)."""
    return bool(s.alert_labels + s.absorb_labels)


def family_checks(family: str, s: FamilyScore) -> dict[str, bool]:
    """The targets of a family, by name: met or not. Without labelled incidents (quiet) only
    the false-page target applies: every alert there is a false page, counted by it."""
    checks: dict[str, bool] = {}
    if labelled(s):
        targets = IID_TARGETS if family == "iid" else SCENARIO_TARGETS
        checks[f"precision >= {targets['precision']}"] = s.precision >= targets["precision"]
        checks[f"recall >= {targets['recall']}"] = s.recall >= targets["recall"]
        if family == "iid":
            delay = q(s.jump_delays, 0.5) or 99
            checks["median jump delay <= 2"] = delay <= IID_TARGETS["jump_median_delay"]
    checks["<= 1 page per type per week on clean stretches"] = (
        s.per_type_week(s.clean_pages) <= SCENARIO_TARGETS["clean_pages_per_week"]
    )
    if s.absorb_labels:
        checks[f"level shifts absorbed >= {ABSORB_TARGET}"] = (
            s.absorbed / s.absorb_labels >= ABSORB_TARGET
        )
    if s.diagnose_labels:
        checks[f"drops and flat lines: no page >= {DIAGNOSE_TARGET}"] = (
            s.diagnose_quiet / s.diagnose_labels >= DIAGNOSE_TARGET
        )
        checks[f"drops and flat lines: diagnosed >= {DIAGNOSE_TARGET}"] = (
            s.diagnosed / s.diagnose_labels >= DIAGNOSE_TARGET
        )
    return checks
