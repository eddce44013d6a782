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
from itertools import pairwise
from typing import Any, Final

from anchorwatch.alerting.crash import CRASH_POINTS
from anchorwatch.contracts import Verdict, WindowAggregate
from anchorwatch.contracts.models import verdict_id
from anchorwatch.demo.slice import Holders, differences

#: The faults of issues 17, 33 and 35 that the local stack can inject, one per trial, cycled
#: so that N trials cover every kind (N >= 14) in an order shuffled by the campaign seed.
FAULTS: Final = (
    "broker-kill",  # kill -9 of the leader of a snapshots partition; `stack up` after a while
    "broker-pause",  # SIGSTOP of a partition leader past the broker session timeout; SIGCONT
    "taskmanager-kill",  # kill -9 of the TaskManager running the job; `stack up` replaces it
    "ingest-kill",  # kill -9 of one ingest worker with requests in flight; the service restarts
    "alerting-kill",  # SIGKILL of the alerting service (at a crash point or at random)
    # Two alerting instances on one PostgreSQL state (bench/fault_alerting.py):
    "alerting-takeover",  # kill -9 of the leader, its state directory deleted; standby leads
    "alerting-pause",  # SIGSTOP of the leader past its lease; SIGCONT: it must post nothing
    # The two share the verdict partitions (alerting.work_split) instead:
    "alerting-scale",  # a third instance joins mid-run: the partitions rebalance
    "alerting-split-takeover",  # kill -9 of an open incident's owner, its state dir deleted
    "alerting-split-pause",  # SIGSTOP of an open incident's owner past its leases; SIGCONT
    "slack-down",  # Slack answers 503, then 429 with Retry-After, for a while
    "jira-down",  # Jira answers 503 for a while
    # What people do to an incident, with the alerting service crashing where it applies it
    # (bench/fault_operator.py): no journey, verdicts of its own on the campaign's Kafka.
    "silence-expiry",  # a silence ends while the service is down; crashes in its release
    "ack-crash",  # Slack's Acknowledge clicked; crashes before its commit and its Jira comment
)

#: The operator trials as the campaign's output names them (issue 33).
OPERATOR_SCENARIOS: Final = {
    "silence-expiry": "a silence expiring during a restart",
    "ack-crash": "a crash between an acknowledgement and its Jira comment",
}

#: The integrations a crash point can name (``point:integration``); empty: any.
_CRASH_AT: Final = ("", "slack", "jira", "events")

#: The crash points the fault journey passes: a held incident's release needs a silence, an
#: acknowledgement a click in Slack, which the journey does not make (the operator trials,
#: OPERATOR_SCENARIOS, crash at those points).
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
    # Operator trials: one run of the service armed at each, in this order.
    crash_points: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.fault in OPERATOR_SCENARIOS:
            return (
                f"{self.fault}: {OPERATOR_SCENARIOS[self.fault]} "
                f"(crashes at {', '.join(self.crash_points)})"
            )
        what = self.fault
        if self.fault in ("broker-kill", "broker-pause"):
            what += f" (leader of partition {self.partition}, {self.duration_s:.0f}s)"
        elif self.fault == "taskmanager-kill":
            what += f" (replaced after {self.duration_s:.0f}s)"
        elif self.fault == "alerting-kill":
            what += f" ({'at ' + self.crash_point if self.crash_point else 'at random'})"
        elif self.fault in ("slack-down", "jira-down", "alerting-pause", "alerting-split-pause"):
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
            "alerting-pause": rng.uniform(12, 20),  # past the demo's 5 s lease
            "alerting-split-pause": rng.uniform(12, 20),  # past its leases and group session
            "slack-down": rng.uniform(15, 40),
            "jira-down": rng.uniform(15, 40),
        }.get(fault, 0.0)
        crash_point = None
        if fault == "alerting-kill" and rng.random() < 0.7:
            point = rng.choice(_JOURNEY_CRASH_POINTS)
            integration = rng.choice(_CRASH_AT) if point.startswith(("send", "done")) else ""
            nth = rng.randint(1, 3)
            crash_point = f"{point}{':' + integration if integration else ''}@{nth}"
        points: tuple[str, ...] = ()
        if fault in OPERATOR_SCENARIOS:
            points = operator_crash_points(fault, rng)
        out.append(
            TrialSpec(
                index=i,
                seed=rng.randrange(1, 1_000_000),
                fault=fault,
                at=at,
                duration_s=round(duration, 1),
                partition=rng.randrange(partitions),
                crash_point=crash_point,
                crash_points=points,
            )
        )
    return out


def operator_crash_points(fault: str, rng: random.Random) -> tuple[str, ...]:
    """The engine's point of the scenario, then one send point of the notifications it
    caused; each is the first of its kind after the previous crash, so each is reached."""
    step = rng.choice(("send_before", "send_after", "done_in_commit"))
    if fault == "ack-crash":  # between the acknowledgement and its Jira comment
        return ("ack_before_commit@1", f"{step}:jira@1")
    return ("release_before_commit@1", f"{step}:{rng.choice(_OPERATOR_AT)}@1")


_OPERATOR_AT: Final = ("slack", "jira", "pagerduty")


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
    holders: Holders | None = None,
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
            # A top anchor tied between requests may name any of them (``anchor_holders``).
            diff = differences(exp, v.window, (holders or {}).get(key))
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
            # Each update reply carries one chart: one more is a chart posted twice.
            charts = max(0, kinds.count("chart") - kinds.count("Update"))
            repeats = max(0, resolved - 1) + len(texts) - len(set(texts)) + charts
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


# --------------------------------------------------------------------------- operator trials


#: What people get of each incident of an operator trial, in order per integration: the
#: incident silenced from its start, posted when the silence ends (as it stands: a critical
#: parent and page), then its progress update and resolution; the incident acknowledged in
#: Slack after its escalation (no progress update after that); and one nobody touched.
#: PagerDuty is counted by what it did (an alert opened, acknowledged, resolved): an event
#: sent again after a crash is folded into the open alert of its dedup key, as PagerDuty
#: does (docs/alerting.md), and reported apart as absorbed.
OPERATOR_EXPECTED: Final = {
    "silenced": (
        *("slack parent", "slack Update", "slack Resolved"),
        *("jira ticket", "jira Update", "jira Resolved"),
        *("pagerduty trigger", "pagerduty resolve"),
    ),
    "acknowledged": (
        *("slack parent", "slack Update", "slack Acknowledged", "slack Resolved"),
        *("jira ticket", "jira Update", "jira Acknowledged", "jira Resolved"),
        *("pagerduty trigger", "pagerduty acknowledge", "pagerduty resolve"),
    ),
    "untouched": (
        *("slack parent", "slack Update", "slack Update", "slack Resolved"),
        *("jira ticket", "jira Update", "jira Update", "jira Resolved"),
        *("pagerduty trigger", "pagerduty resolve"),
    ),
}


def notification_kinds(
    label: str,
    dedup_key: str,
    messages: Sequence[Mapping[str, Any]],
    issues: Sequence[Mapping[str, Any]],
    pagerduty_alerts: Sequence[Mapping[str, Any]],
) -> list[str]:
    """What the local Slack, Jira and PagerDuty received of the incident of ``label`` (its
    ``aw-`` label) and ``dedup_key``, in order per integration: ``slack parent``, ``slack
    <reply's first word>``, ``jira ticket``, ``jira <comment's first word>``, ``pagerduty
    trigger`` per alert opened and ``pagerduty acknowledge`` / ``resolve`` per change of its
    status (``/_local/alerts``). Found by the incident's own identities, so a second parent,
    ticket or alert shows as one more, not as another incident's."""
    parents = [m for m in messages if not m.get("thread_ts") and _label_of(m) == label]
    threads = {m["ts"] for m in parents}
    kinds = ["slack parent"] * len(parents)
    kinds += [f"slack {_word(_reply_kind(m))}" for m in messages if m.get("thread_ts") in threads]
    tickets = [i for i in issues if label in i.get("fields", {}).get("labels", [])]
    kinds += ["jira ticket"] * len(tickets)
    kinds += [f"jira {_word(str(c))}" for t in tickets for c in t.get("comments", [])]
    for alert in (a for a in pagerduty_alerts if a.get("dedup_key") == dedup_key):
        statuses = list(alert.get("statuses", []))
        changes = [b for a, b in pairwise(statuses) if a != b]
        kinds += ["pagerduty trigger"] + [f"pagerduty {_ACTION[c]}" for c in changes]
    return kinds


_ACTION: Final = {"acknowledged": "acknowledge", "resolved": "resolve", "triggered": "trigger"}


def _label_of(message: Mapping[str, Any]) -> str | None:
    metadata = (message.get("params") or {}).get("metadata")
    return metadata.get("event_payload", {}).get("incident_label") if metadata else None


def _word(text: str) -> str:
    return text.split(" ")[0].rstrip(":,")


@dataclass
class OperatorCount:
    """An operator trial's notifications against what people must get of each incident."""

    incidents: int = 0
    expected: int = 0
    lost: int = 0  # expected and never received
    doubled: int = 0  # received more often than expected
    problems: list[str] = field(default_factory=list)  # one line per incident that is off


def count_operator(
    expected: Mapping[str, Sequence[str]], got: Mapping[str, Sequence[str]]
) -> OperatorCount:
    """``expected`` and ``got``: per incident, the kinds of ``notification_kinds``."""
    out = OperatorCount(incidents=len(expected))
    for name, want in expected.items():
        have = list(got.get(name, ()))
        lost, doubled = multiset_shortfall(want, have)
        out.expected += len(want)
        out.lost += lost
        out.doubled += doubled
        if lost or doubled:
            out.problems.append(f"{name}: lost {lost}, doubled {doubled}: {have}")
        elif have != list(want):
            out.problems.append(f"{name}: out of order: {have}")
    return out
