"""What a run found: its figures and what it saw of each incident (``JourneyReport``), the
checks against the plan once traffic has stopped (``check_results``: every window figure
against an independent computation, every broken entry dead-lettered naming its field, the
incidents raised against the labels), and the end-of-run summary for people.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from anchorwatch.contracts import DeadLetter, Verdict, decode
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo import slice as flow
from anchorwatch.demo.journey_feed import SendStats
from anchorwatch.demo.journey_processes import JourneyError, wait_for
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.kafkaio import read_topic

#: The rule of a group incident (alerting.grouping) and the doc type of the watchdog's
#: notice (alerting.watchdog_post), as the state file holds them.
GROUP_RULE = "group"
WATCHDOG_DOC_TYPE = "anchorwatch:watchdog"


@dataclass
class Seen:
    """What the run observed of one incident."""

    incident_id: str
    doc_type: str
    severity: str
    opened_at_ms: int
    reopened: int = 0
    announced: bool = False
    resolved: bool = False
    slack_latency_s: float | None = None
    reasons: tuple[str, ...] = ()
    rule: str = ""
    state: str = "open"
    group_id: str | None = None  # a member of this group incident
    held_by: str | None = None  # what held its first post (a silence...)
    acked_by: str | None = None
    slack_channel: str | None = None
    slack_ts: str | None = None
    jira_key: str | None = None
    silenced: bool = False  # seen held by a silence
    posted_s: float | None = None  # when Slack had it (wall clock)

    @property
    def is_group(self) -> bool:
        return self.rule == GROUP_RULE

    @property
    def is_watchdog(self) -> bool:
        return self.doc_type == WATCHDOG_DOC_TYPE

    @property
    def judged(self) -> bool:
        """An incident of the drift rules (not a group, not the watchdog's notice)."""
        return not (self.is_group or self.is_watchdog)


@dataclass(frozen=True)
class Check:
    """One of the end checks of what people saw: the alerts naming the model and the anchor
    kind their incidents lived in (``journey_checks.breakdown_checks``), the operator
    features' (``journey_checks.operator_checks``)."""

    name: str
    ok: bool
    detail: str


@dataclass
class JourneyReport:
    plan: jp.Plan
    events_sent: int = 0
    events_accepted: int = 0
    entries_rejected: int = 0
    dead_letters: int = 0
    dead_letter_problems: list[str] = field(default_factory=list)
    failed_batches: int = 0
    verdicts: int = 0
    late_events: int = 0
    comparison: flow.Comparison | None = None
    outcome: jp.Outcome | None = None
    seen: dict[str, Seen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)  # the end checks

    @property
    def ok(self) -> bool:
        return bool(
            all(c.ok for c in self.checks)
            and self.outcome is not None
            and self.outcome.ok
            and self.comparison is not None
            and self.comparison.ok
            and not self.dead_letter_problems
            and not self.failed_batches
        )

    def count(self, stats: SendStats) -> None:
        """Add what one round of sending did to the figures."""
        self.events_sent += stats.sent
        self.events_accepted += stats.accepted
        self.entries_rejected += stats.rejected
        self.failed_batches += stats.failed_batches


def check_results(report: JourneyReport, s: JobSettings, entries: list[jp.Entry]) -> None:
    """The run's outcome, once its traffic is in: the job's windows against an independent
    computation of the entries sent, the dead letters against the broken entries, the
    incidents seen against the plan's labels."""
    plan = report.plan
    # Windows that must have closed: the watermark is watermark_delay behind the newest event,
    # and a window closes once it passes the end.
    closed_by = plan.end_ms - s.job.watermark_delay_ms - s.job.window_size_s * 1000
    events = [e.event for e in entries if e.event is not None]
    expected_all = flow.reference_windows(events, s.job.window_size_s * 1000)
    expected = {k: w for k, w in expected_all.items() if w.window_end_ms <= closed_by}
    verdicts: list[Verdict] = []

    def closed() -> bool:
        nonlocal verdicts
        verdicts = flow.read_verdicts(s)
        have = {(v.window.doc_type, v.window.window_start_ms) for v in verdicts}
        return set(expected) <= have

    # Once traffic stops, a partition whose newest event is older than the others' holds
    # the watermark back until it counts as idle (``idle_timeout_s``): the last windows
    # may close only then.
    with contextlib.suppress(JourneyError):
        wait_for(closed, s.job.idle_timeout_s + 30, "the closed windows", every=1.0)
    # Windows still open at the end (later than closed_by) are compared when present.
    shown = [v.window for v in verdicts]
    comparable = {
        k: w
        for k, w in expected_all.items()
        if k in expected or any((x.doc_type, x.window_start_ms) == k for x in shown)
    }
    holders = flow.anchor_holders(events, s.job.window_size_s * 1000)
    report.comparison = flow.compare(comparable, shown, holders)
    report.verdicts = len(verdicts)
    report.late_events = sum(v.window.late_count or 0 for v in verdicts)

    letters = [
        decode(DeadLetter, m.value or b"")
        for m in read_topic(s.kafka, s.topics.dead_letter)
        if m.value
    ]
    report.dead_letters = len(letters)
    want = sorted(e.broken for e in entries if e.broken)
    got = sorted(_field_root(dl.field) for dl in letters)
    if got != want:
        report.dead_letter_problems.append(
            f"dead letters name {got[:5]}... ({len(got)}), broken entries {want[:5]}... "
            f"({len(want)})"
        )
    raised = [
        jp.Raised(x.incident_id, x.doc_type, x.severity, x.opened_at_ms, x.reopened, x.reasons)
        for x in report.seen.values()
        if x.judged
    ]
    report.outcome = jp.match_alerts(plan.labels, raised)


def _field_root(name: str | None) -> str:
    """The header a dead letter names, without the snapshot log's inner path."""
    text = name or ""
    return text.split("[", 1)[0]


def summary_lines(report: JourneyReport, window_ms: int = jp.MINUTE_MS) -> list[str]:
    """The end-of-run figures, for people."""
    lines = [
        f"events in: {report.events_accepted} accepted of {report.events_sent} Kong entries; "
        f"{report.entries_rejected} rejected, {report.dead_letters} dead letters"
        + (f"; {report.failed_batches} batches failed" if report.failed_batches else ""),
    ]
    for problem in report.dead_letter_problems:
        lines.append(f"  dead letters do not match the broken entries: {problem}")
    c = report.comparison
    if c is not None:
        lines.append(
            f"windows: {report.verdicts} verdicts from Flink, {c.matched} exact against an "
            f"independent computation, {len(c.missing)} missing, {len(c.unexpected)} "
            f"unexpected, {len(c.wrong)} wrong; {report.late_events} late events"
        )
        for key, what in c.wrong[:5]:
            lines.append(f"  wrong {key}: {what}")
        lines.append(breakdown_line(c))
    o = report.outcome
    if o is not None:
        lines.append(
            f"incidents: {len(o.found)} labelled, {len(o.found) - len(o.missed)} "
            f"alerted, {len(o.unlabelled)} unlabelled alerts"
        )
        for f in o.found:
            state = (
                "MISSED"
                if not f.alerts
                else (
                    f"alerted {len(f.alerts)}x"
                    + (" (re-opened)" if any(a.reopened for a in f.alerts) else "")
                )
            )
            delay = f.delay_windows(window_ms)
            lines.append(
                f"  {f.label.kind:<10} {f.label.doc_type:<20} {state}"
                + (f", after {delay} windows" if delay is not None else "")
            )
            if (
                f.label.diagnosis
                and f.alerts
                and not any(f.label.diagnosis in a.reasons for a in f.alerts)
            ):
                lines.append(f"    (the alert does not name {f.label.diagnosis})")
        for a in o.unlabelled:
            start = time.strftime("%H:%M", time.gmtime((a.opened_at_ms - window_ms) / 1000))
            lines.append(f"  UNLABELLED {a.doc_type} {a.severity} opened by the {start} window")
    latencies = [
        s.slack_latency_s
        for s in report.seen.values()
        if s.slack_latency_s is not None and not s.is_watchdog
    ]
    if latencies:
        lines.append(
            "window end to Slack message (replay clock): "
            f"median {jp.quantile(latencies, 0.5):.1f}s, max {max(latencies):.1f}s "
            f"over {len(latencies)} incidents"
        )
    if report.checks:
        passed = sum(c.ok for c in report.checks)
        lines.append(f"end checks: {passed} of {len(report.checks)} passed")
        for check in report.checks:
            mark = "PASS" if check.ok else "FAIL"
            lines.append(f"  {mark} {check.name:<11} {check.detail}")
    return lines


def breakdown_line(c: flow.Comparison) -> str:
    """Whether the windows' breakdown (per anchor kind, worst anchors, per model, latency)
    was compared: a drift job from before it writes none, and that is said, not passed
    over; one that writes it on some windows only is wrong."""
    fields = "per-kind figures, worst anchors, per-model figures, latency p50/p95"
    absent, compared = len(c.without_breakdown), c.matched + len(c.wrong)
    if not absent:
        return f"  breakdown compared on every window: {fields}"
    if not c.breakdown_partial:
        return (
            f"  breakdown NOT compared: none of the {absent} windows carries one ({fields}); "
            "the drift job predates it"
        )
    return f"  breakdown MISSING from {absent} of {compared} windows ({fields})"
