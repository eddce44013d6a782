"""The fault campaign's pure parts (no I/O, no clock): which fault each trial injects and
when, and how a trial's outcome is counted against its ground truth.

A trial is reproducible from ``(campaign seed, index)``: its traffic seed, its fault, the
moment it strikes and every choice the fault makes derive from them (see ``plan_trials``).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from anchorwatch.alerting.crash import CRASH_POINTS
from anchorwatch.contracts import Verdict, WindowAggregate
from anchorwatch.contracts.models import verdict_id
from anchorwatch.demo.slice import differences

#: The faults of issue 17 that the local stack can inject, one per trial, cycled so that N
#: trials cover every kind (N >= 7) in an order shuffled by the campaign seed.
FAULTS: Final = (
    "broker-kill",  # kill -9 of the leader of a snapshots partition; `stack up` after a while
    "broker-pause",  # SIGSTOP of a partition leader past the broker session timeout; SIGCONT
    "taskmanager-kill",  # kill -9 of the TaskManager running the job; `stack up` replaces it
    "ingest-kill",  # kill -9 of one ingest worker with requests in flight; the service restarts
    "alerting-kill",  # SIGKILL of the alerting service (at a crash point or at random)
    "slack-down",  # Slack answers 503, then 429 with Retry-After, for a while
    "jira-down",  # Jira answers 503 for a while
)

#: The integrations a crash point can name (``point:integration``); empty: any.
_CRASH_AT: Final = ("", "slack", "jira", "events")

#: The crash points the fault journey passes: a held incident's release needs a silence, an
#: acknowledgement a click in Slack, which the journey does not make (the unit crash trials
#: cover those points).
_JOURNEY_CRASH_POINTS = tuple(
    p for p in CRASH_POINTS if p not in ("release_before_commit", "ack_before_commit")
)


@dataclass(frozen=True)
class TrialSpec:
    index: int
    seed: int  # the traffic's seed, and the seed of every choice below
    fault: str
    at: float  # share of the live span (wall time) after which the fault strikes
    duration_s: float  # how long the fault lasts (a dead part stays dead this long)
    partition: int = 0  # broker faults: the snapshots partition whose leader is hit
    crash_point: str | None = None  # alerting-kill: a crash point spec, else a kill at `at`

    def describe(self) -> str:
        what = self.fault
        if self.fault in ("broker-kill", "broker-pause"):
            what += f" (leader of partition {self.partition}, {self.duration_s:.0f}s)"
        elif self.fault == "taskmanager-kill":
            what += f" (replaced after {self.duration_s:.0f}s)"
        elif self.fault == "alerting-kill":
            what += f" ({'at ' + self.crash_point if self.crash_point else 'at random'})"
        elif self.fault in ("slack-down", "jira-down"):
            what += f" ({self.duration_s:.0f}s)"
        return f"{what} at {self.at:.0%} of the live span"


def plan_trials(
    trials: int, seed: int, *, partitions: int = 4, only: Sequence[str] = ()
) -> list[TrialSpec]:
    """The campaign's trials: fault kinds cycled (shuffled by ``seed``), each trial's
    choices drawn from its own generator so that one trial can be rerun alone."""
    kinds = list(only or FAULTS)
    random.Random(seed).shuffle(kinds)
    out = []
    for i in range(trials):
        rng = random.Random(f"{seed}-{i}")
        fault = kinds[i % len(kinds)]
        at = round(rng.uniform(0.1, 0.55), 3)
        duration = {
            "broker-kill": rng.uniform(3, 20),
            "broker-pause": rng.uniform(10, 25),  # past the 6 s broker session timeout
            "taskmanager-kill": rng.uniform(1, 10),
            "slack-down": rng.uniform(15, 40),
            "jira-down": rng.uniform(15, 40),
        }.get(fault, 0.0)
        crash_point = None
        if fault == "alerting-kill" and rng.random() < 0.7:
            point = rng.choice(_JOURNEY_CRASH_POINTS)
            integration = rng.choice(_CRASH_AT) if point.startswith(("send", "done")) else ""
            nth = rng.randint(1, 3)
            crash_point = f"{point}{':' + integration if integration else ''}@{nth}"
        out.append(
            TrialSpec(
                index=i,
                seed=rng.randrange(1, 1_000_000),
                fault=fault,
                at=at,
                duration_s=round(duration, 1),
                partition=rng.randrange(partitions),
                crash_point=crash_point,
            )
        )
    return out


# --------------------------------------------------------------------------- counting


WindowKey = tuple[str, int]


@dataclass
class WindowCount:
    """Closed windows against an independent computation over the acknowledged events."""

    compared: int = 0
    lost: int = 0  # events acknowledged but not counted in their window
    doubled: int = 0  # events counted more often than acknowledged
    wrong: list[str] = field(default_factory=list)  # one line per wrong window
    repeated_verdicts: int = 0  # identical copies of a verdict (at-least-once sink)


def count_windows(
    expected: Mapping[WindowKey, WindowAggregate],
    verdicts: Iterable[Verdict],
    *,
    closed_by_ms: int,
) -> WindowCount:
    """Each expected window that must have closed (ends by ``closed_by_ms``), and each later
    one the job did emit, against the job's verdicts. Copies of one window's verdict with
    the same figures are repeats (the sink is at-least-once, ids are deterministic); a copy
    that differs is a wrong window."""
    by_key: dict[WindowKey, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        by_key[(v.window.doc_type, v.window.window_start_ms)].append(v)
    out = WindowCount()
    for key, exp in sorted(expected.items()):
        copies = by_key.get(key, [])
        if not copies and exp.window_end_ms > closed_by_ms:
            continue  # still open when the traffic ended
        out.compared += 1
        if not copies:
            out.lost += exp.request_count
            out.wrong.append(f"{key}: missing ({exp.request_count} events)")
            continue
        out.repeated_verdicts += len(copies) - len({v.verdict_id for v in copies})
        # The id a fault-free run gives this window: deterministic from the window alone.
        odd = [v.verdict_id for v in copies if v.verdict_id != verdict_id(*key, v.job_version)]
        if odd:
            out.wrong.append(f"{key}: verdict ids {odd} are not the window's own")
        for v in copies:
            diff = differences(exp, v.window)
            if diff:
                got = v.window.request_count
                out.lost += max(0, exp.request_count - got)
                out.doubled += max(0, got - exp.request_count)
                out.wrong.append(f"{key}: {'; '.join(diff)}")
                break
    for key, copies in sorted(by_key.items()):
        if key not in expected:
            out.doubled += copies[0].window.request_count
            out.wrong.append(f"{key}: unexpected window ({copies[0].window.request_count})")
    return out


@dataclass
class Notifications:
    """What Slack and Jira received, against the incidents the alerting service holds."""

    incidents: int = 0
    duplicates: int = 0  # extra parents, tickets, resolutions, update replies, alerts
    problems: list[str] = field(default_factory=list)  # missing or out of order


def count_notifications(
    incidents: Sequence[tuple[str, str | None, str | None]],
    messages: Sequence[Mapping[str, Any]],
    issues: Sequence[Mapping[str, Any]],
    alert_events: Mapping[str, Mapping[str, str]],
) -> Notifications:
    """``incidents``: (incident id, Slack parent ts, Jira key) of each incident;
    ``alert_events``: per incident id, the severity of each distinct ANCHOR_DRIFT_ALERT id
    (drift events are at-least-once with deterministic ids: consumers keep one per id; an
    escalation is an alert of its own, at the new severity)."""
    out = Notifications(incidents=len(incidents))
    parents = [m for m in messages if not m.get("thread_ts") and m.get("subtype") is None]
    known_ts = {ts for _, ts, _ in incidents if ts}
    known_keys = {key for _, _, key in incidents if key}
    extra_parents = [m["ts"] for m in parents if m["ts"] not in known_ts]
    extra_tickets = [i["key"] for i in issues if i["key"] not in known_keys]
    out.duplicates += len(extra_parents) + len(extra_tickets)
    if extra_parents:
        out.problems.append(f"Slack parents of no incident: {extra_parents}")
    if extra_tickets:
        out.problems.append(f"Jira tickets of no incident: {extra_tickets}")
    by_key = {i["key"]: i for i in issues}
    for incident_id, ts, key in incidents:
        if not ts:
            out.problems.append(f"{incident_id}: no Slack parent")
        else:
            thread = [m for m in messages if m.get("thread_ts") == ts]
            kinds = [_reply_kind(m) for m in thread]
            texts = [m.get("text", "") for m in thread if _reply_kind(m) == "Update"]
            resolved = kinds.count("Resolved:")
            repeats = max(0, resolved - 1) + len(texts) - len(set(texts))
            if repeats:
                out.duplicates += repeats
                out.problems.append(f"{incident_id}: {repeats} repeated Slack replies: {kinds}")
            updates = kinds[:-1] if kinds and kinds[-1] == "Resolved:" else kinds
            if resolved != 1 or kinds[-1:] != ["Resolved:"]:
                out.problems.append(f"{incident_id}: Slack thread does not end resolved: {kinds}")
            if updates != ["Update", "chart"] * (len(updates) // 2):
                out.problems.append(f"{incident_id}: Slack replies out of order: {kinds}")
        if not key or key not in by_key:
            out.problems.append(f"{incident_id}: no Jira ticket")
        else:
            comments = [str(c).split(" ")[0] for c in by_key[key].get("comments", [])]
            if comments.count("Resolved") > 1:
                out.duplicates += comments.count("Resolved") - 1
                out.problems.append(f"{incident_id}: Jira resolved {comments.count('Resolved')}x")
            if comments[-1:] != ["Resolved"]:
                out.problems.append(f"{incident_id}: Jira comments do not end resolved")
        severities = Counter(alert_events.get(incident_id, {}).values())
        repeated = sum(n - 1 for n in severities.values())
        if repeated:
            out.duplicates += repeated
            out.problems.append(f"{incident_id}: ANCHOR_DRIFT_ALERT ids {dict(severities)}")
        if not severities:
            out.problems.append(f"{incident_id}: no ANCHOR_DRIFT_ALERT")
    return out


def _reply_kind(message: Mapping[str, Any]) -> str:
    if message.get("subtype") == "file_share":
        return "chart"
    return str(message.get("text", "")).split(" ")[0]


def multiset_shortfall(want: Iterable[str], got: Iterable[str]) -> tuple[int, int]:
    """(items of ``want`` missing from ``got``, extra copies in ``got``), as multisets."""
    w, g = Counter(want), Counter(got)
    return sum((w - g).values()), sum((g - w).values())
