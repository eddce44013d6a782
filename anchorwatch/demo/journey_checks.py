"""The end checks of what people saw, each a ``Check`` with what was counted: against the
plan's labels, the alerting service's state file and what the local Slack, Jira and
PagerDuty received.

The breakdown (``breakdown_checks``):

- **model**: the alert of the incident that lived in one model version names that version
  (in its Slack parent as first posted, and its Jira description) before any other version
  of its type: the drifting one leads;
- **anchor kind**: the alert of the incident that lived in one anchor kind names that kind
  before any other kind.

The names are matched, not the sentences around them (``alerting.breakdown_text`` words
them). Until the drift job writes a window's breakdown the alerts cannot name either: each
check then says so and does not count.

The operator features (``journey_operator``, ``operator_checks``):

- **silence**: the silenced label's incident is in the state file, judged, held by the
  silence, resolved while muted, and neither Slack nor Jira heard of it;
- **ack**: the clicked incident is acknowledged: its parent says "Acknowledged by", its
  ticket has the acknowledgement comment, and no progress update followed in either;
- **group**: exactly one group incident, one member per type hit by the gateway-wide fault,
  one Slack parent and one Jira ticket for it, none for its members;
- **pagerduty**: every critical incident people were told of reached the local PagerDuty
  once (triggered once, resolved when it resolved), nothing else did, and at least one
  labelled incident was among them;
- **blindness**: the watchdog's notice reached Slack within ``NOTICE_WITHIN_S`` of the kill.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from typing import Any

import requests

from anchorwatch.contracts.breakdown import KINDS
from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo.journey_operator import NOTICE_WITHIN_S, Operator
from anchorwatch.demo.journey_results import Check, JourneyReport, Seen

Get = Callable[[str], Any]


def get_json(url: str) -> Any:
    r = requests.get(url, timeout=10)
    r.raise_for_status()
    return r.json()


def operator_checks(
    report: JourneyReport,
    operator: Operator,
    *,
    slack_url: str,
    jira_url: str,
    pagerduty_url: str,
    outbox: Callable[[str], list[dict[str, Any]]],
    get: Get = get_json,
) -> list[Check]:
    """Every operator feature's check. ``outbox``: an incident's outbox rows."""
    messages = get(f"{slack_url}/_local/messages")["messages"]
    issues = get(f"{jira_url}/_local/issues")["issues"]
    alerts = get(f"{pagerduty_url}/_local/alerts")["alerts"]
    checks = [
        _silence(report, operator, messages, issues, outbox),
        _ack(report, operator, messages, issues, outbox),
        _group(report, messages, issues),
        _paging(report, alerts),
        _blindness(operator),
    ]
    return checks


def breakdown_checks(
    report: JourneyReport, *, slack_url: str, jira_url: str, get: Get = get_json
) -> list[Check]:
    """The model and anchor-kind checks, one per label that names one."""
    scoped = [lab for lab in report.plan.labels if lab.model or lab.anchor_kind]
    if not scoped:
        return []
    c = report.comparison
    if c is not None and c.without_breakdown and not c.breakdown_partial:
        why = "not checked: the drift job wrote no breakdown on its windows (it predates it)"
        return [Check(_check_name(lab), True, f"{lab.doc_type}: {why}") for lab in scoped]
    messages = get(f"{slack_url}/_local/messages")["messages"]
    issues = {i["key"]: i for i in get(f"{jira_url}/_local/issues")["issues"]}
    return [_names(report, lab, messages, issues) for lab in scoped]


def _check_name(label: jp.Label) -> str:
    return "model" if label.model else "anchor kind"


def _names(
    report: JourneyReport,
    label: jp.Label,
    messages: list[dict[str, Any]],
    issues: dict[str, dict[str, Any]],
) -> Check:
    name = label.model or label.anchor_kind or ""
    if label.model:
        profile = next(p for p in report.plan.traffic.profiles if p.name == label.doc_type)
        others = [m for m, _ in profile.models if m != name]
    else:
        others = [k for k in KINDS if k != name]
    alerts = [a for a in _alerts_of(report, label) if a.slack_ts or a.jira_key]
    doc, check = label.doc_type, _check_name(label)
    if len(alerts) != 1:
        return Check(check, False, f"{doc}: {len(alerts)} posted incidents for the label, not 1")
    (seen,) = alerts
    parent = next((m for m in _parents(messages) if m["ts"] == seen.slack_ts), None)
    issue = issues.get(seen.jira_key or "")
    places = {
        "Slack parent": _as_first_posted(parent) if parent is not None else None,
        "Jira description": _wiki_text((issue or {}).get("fields", {}).get("description")),
    }
    problems = []
    for place, text in places.items():
        if text is None:
            problems.append(f"no {place}")
        elif (problem := named_first(text, name, others)) is not None:
            problems.append(f"its {place} {problem}")
    detail = f"{doc}: the alert names {name} first in its Slack parent and Jira description"
    if problems:
        detail = f"{doc} ({name}): " + "; ".join(problems)
    return Check(check, not problems, detail)


def named_first(text: str, name: str, others: Iterable[str]) -> str | None:
    """None when ``text`` names ``name`` (as a whole name: ``SECTION`` is not named by
    ``SECTION_003``, nor ``m-2`` by ``m-2.1``) before any of ``others``; else what it does."""
    found = _first(text, name)
    if found is None:
        return f"does not name {name}"
    earlier = sorted((at, o) for o in others if (at := _first(text, o)) is not None and at < found)
    if earlier:
        return f"names {earlier[0][1]} before {name}"
    return None


def _first(text: str, name: str) -> int | None:
    match = re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", text)
    return match.start() if match else None


def _as_first_posted(message: dict[str, Any]) -> str:
    """A Slack message's text and blocks as first posted (its first edit holds them)."""
    first = (message.get("edits") or [message])[0]
    return f"{first.get('text') or ''} {first.get('blocks') or ''}"


def _wiki_text(description: Any) -> str | None:
    """A Jira description's text with wiki escapes undone (``extractor\\-1.5``)."""
    if not isinstance(description, str):
        return None
    return html.unescape(re.sub(r"\\(.)", r"\1", description))


def _alerts_of(report: JourneyReport, label: jp.Label) -> list[Seen]:
    if report.outcome is None:
        return []
    found = next(f for f in report.outcome.found if f.label == label)
    return [report.seen[a.incident_id] for a in found.alerts]


def _parents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if not m.get("thread_ts") and m.get("subtype") is None]


def _about(doc_type: str, m: dict[str, Any]) -> bool:
    """A parent message of an incident of ``doc_type`` (as first posted or edited since)."""
    texts = [m.get("text") or ""] + [e.get("text") or "" for e in m.get("edits") or []]
    return any(re.match(rf"\[[A-Z]+\] Drift \w+: `{re.escape(doc_type)}`", t) for t in texts)


def _silence(
    report: JourneyReport,
    operator: Operator,
    messages: list[dict[str, Any]],
    issues: list[dict[str, Any]],
    outbox: Callable[[str], list[dict[str, Any]]],
) -> Check:
    lab = operator.targets.silenced
    doc = lab.doc_type
    sid = str(operator.log.silence.get("silence_id", ""))
    if not sid:
        error = operator.log.silence_error
        return Check("silence", False, f"{doc}: no silence was added ({error})")
    alerts = _alerts_of(report, lab)
    if len(alerts) != 1:
        return Check("silence", False, f"{doc}: {len(alerts)} incidents for the label, not 1")
    (seen,) = alerts
    told = sorted({r["integration"] for r in outbox(seen.incident_id)} - {"events"})
    parents = [m for m in _parents(messages) if _about(doc, m)]
    tickets = [i for i in issues if f"Drift Alert: {doc} -" in i["fields"]["summary"]]
    problems = []
    if not (seen.held_by or "").startswith(f"silence {sid}"):
        problems.append(f"held by {seen.held_by!r}, not the silence")
    if seen.state != "resolved":
        problems.append(f"state {seen.state}")
    if told or seen.slack_ts or seen.jira_key:
        problems.append(f"sent to {told}")
    if parents or tickets:
        problems.append(f"{len(parents)} Slack parents, {len(tickets)} Jira tickets")
    detail = (
        f"{doc}: silence {sid}; its incident judged ({seen.severity}), held by the silence, "
        f"{seen.state}; {len(parents)} Slack parents, {len(tickets)} Jira tickets"
    )
    return Check("silence", not problems, detail + ("" if not problems else f": {problems}"))


def after_ack(rows: list[dict[str, Any]]) -> tuple[int, dict[str, int]] | None:
    """What an acknowledged incident's outbox holds after its acknowledgement: progress
    updates (none may follow), and escalations by integration (they still go out, as
    "Update" replies and comments); None when it holds no acknowledgement."""
    at = next((r["id"] for r in rows if r["kind"] == "acknowledged"), None)
    if at is None:
        return None
    later = [r for r in rows if r["id"] > at and r["integration"] in ("slack", "jira")]
    escalations: dict[str, int] = {"slack": 0, "jira": 0}
    for r in later:
        if r["kind"] == "updated":
            escalations[r["integration"]] += 1
    return sum(r["kind"] == "progress" for r in later), escalations


def _ack(
    report: JourneyReport,
    operator: Operator,
    messages: list[dict[str, Any]],
    issues: list[dict[str, Any]],
    outbox: Callable[[str], list[dict[str, Any]]],
) -> Check:
    lab = operator.targets.acked
    doc = lab.doc_type
    alerts = _alerts_of(report, lab)
    if len(alerts) != 1 or operator.log.ack_incident != alerts[0].incident_id:
        return Check("ack", False, f"{doc}: no click on its incident ({operator.log.ack_answer})")
    (seen,) = alerts
    problems = []
    answer = operator.log.ack_answer or {}
    if answer.get("status") != 200:
        problems.append(f"the click was answered {answer}")
    parent = next((m for m in _parents(messages) if m["ts"] == seen.slack_ts), None)
    if parent is None or "Acknowledged by" not in f"{parent['text']} {parent['blocks']}":
        problems.append("the parent does not say Acknowledged by")
    outcome = after_ack(outbox(seen.incident_id))
    progress, escalations = outcome if outcome is not None else (0, {"slack": 0, "jira": 0})
    if outcome is None:
        problems.append("no acknowledgement in its outbox")
    if progress:
        problems.append(f"{progress} progress updates queued after the acknowledgement")
    # What people saw after it: "Update" replies and comments, each an escalation.
    thread = [m for m in messages if m.get("thread_ts") == seen.slack_ts]
    at = next((i for i, m in enumerate(thread) if m["text"].startswith("Acknowledged by")), None)
    if at is None:
        problems.append("no acknowledgement reply in the thread")
    elif (n := sum(m["text"].startswith("Update") for m in thread[at + 1 :])) != escalations[
        "slack"
    ]:
        problems.append(f"{n} Update replies after it, {escalations['slack']} escalations")
    issue = next((i for i in issues if i["key"] == seen.jira_key), None)
    comments = [str(c) for c in (issue or {}).get("comments", [])]
    c_at = next((i for i, c in enumerate(comments) if c.startswith("Acknowledged by")), None)
    if c_at is None:
        problems.append("no acknowledgement comment in Jira")
    elif (n := sum(c.startswith("Update") for c in comments[c_at + 1 :])) != escalations["jira"]:
        problems.append(f"{n} Update comments after it, {escalations['jira']} escalations")
    detail = (
        f"{doc}: acknowledged by {seen.acked_by} from a signed click; parent says "
        f"Acknowledged by, Jira {seen.jira_key} commented; {progress} progress updates after "
        f"it ({escalations['slack']} escalation posted, as documented)"
    )
    return Check("ack", not problems, detail + ("" if not problems else f": {problems}"))


def _group(
    report: JourneyReport, messages: list[dict[str, Any]], issues: list[dict[str, Any]]
) -> Check:
    gateway = [lab for lab in report.plan.labels if lab.kind == "gateway"]
    groups = [s for s in report.seen.values() if s.is_group]
    if len(groups) != 1:
        return Check("group", False, f"{len(groups)} group incidents, not 1")
    (group,) = groups
    members = [s for s in report.seen.values() if s.group_id == group.incident_id]
    member_alerts = [a for lab in gateway for a in _alerts_of(report, lab)]
    problems = []
    if sorted(s.doc_type for s in members) != sorted(lab.doc_type for lab in gateway):
        problems.append(
            f"members {sorted(s.doc_type for s in members)}, types hit "
            f"{sorted(lab.doc_type for lab in gateway)}"
        )
    if any(a.group_id != group.incident_id for a in member_alerts):
        problems.append("a gateway label's incident is not a member")
    parents = [m for m in _parents(messages) if m["ts"] == group.slack_ts]
    tickets = [i for i in issues if i["key"] == group.jira_key]
    if len(parents) != 1 or len(tickets) != 1:
        problems.append(f"{len(parents)} Slack parents and {len(tickets)} Jira tickets for it")
    elif not all(s.doc_type in f"{parents[0]['text']} {parents[0]['blocks']}" for s in members):
        problems.append("its Slack parent does not list every type")
    if any(s.slack_ts or s.jira_key for s in members):
        problems.append("a member has a Slack thread or Jira ticket of its own")
    detail = (
        f"{group.doc_type} ({group.severity}): {len(members)} members of {len(gateway)} types "
        f"hit, {len(parents)} Slack parent, {len(tickets)} Jira ticket ({group.jira_key}), "
        "none for the members"
    )
    return Check("group", not problems, detail + ("" if not problems else f": {problems}"))


def _paging(report: JourneyReport, alerts: list[dict[str, Any]]) -> Check:
    """Critical incidents people were told of (posted on their own: not muted, not a
    member) are paged: one alert each, triggered once, resolved when they resolved."""
    posted = [s for s in report.seen.values() if s.announced and s.severity == "critical"]
    by_key: dict[str, list[dict[str, Any]]] = {}
    for a in alerts:
        by_key.setdefault(str(a["dedup_key"]), []).append(a)
    problems = []
    for s in posted:
        got = by_key.pop(f"anchorwatch/{s.incident_id}", [])
        events = [e for a in got for e in a["events"]]
        resolved = s.resolved  # the watchdog's notice: never (the job stays dead)
        if len(got) != 1 or events.count("trigger") != 1 or events[0] != "trigger":
            problems.append(f"{s.doc_type}: {len(got)} alerts, events {events}")
        elif ("resolve" in events) != resolved:
            problems.append(f"{s.doc_type}: events {events}, {'' if resolved else 'not '}resolved")
    if by_key:
        problems.append(f"paged for other incidents: {sorted(by_key)}")
    labelled = [s for s in posted if s.judged and s.group_id is None]
    if not labelled:
        problems.append("no labelled incident was critical")
    resolves = sum("resolve" in a["events"] for a in alerts)
    detail = (
        f"{len(posted)} critical incidents ({len(labelled)} labelled"
        + (", the group" if any(s.is_group for s in posted) else "")
        + (", the watchdog's notice" if any(s.is_watchdog for s in posted) else "")
        + f"), {len(alerts)} PagerDuty alerts, each triggered once, {resolves} resolved"
    )
    return Check("pagerduty", not problems, detail + ("" if not problems else f": {problems}"))


def _blindness(operator: Operator) -> Check:
    log = operator.log
    if log.killed_at is None:
        return Check("blindness", False, "the drift job was never killed")
    if log.notice_at is None:
        return Check("blindness", False, "no watchdog notice in Slack after the kill")
    took = log.notice_at - log.killed_at
    if took < 0:
        # Blind before the kill: the notice says nothing about noticing a dead job.
        return Check(
            "blindness",
            False,
            f"the watchdog's notice reached Slack {-took:.0f}s before the job was killed",
        )
    return Check(
        "blindness",
        took <= NOTICE_WITHIN_S,
        f"the watchdog's notice reached Slack {took:.0f}s after the job was killed "
        f"(at most {NOTICE_WITHIN_S:.0f}s)",
    )
