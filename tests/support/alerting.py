"""Shared by the alerting service's tests (unit and integration) and bench/alerting.py:
verdicts for chosen windows, the incident lifecycle they drive, the policy that opens on
the first critical window, the Slack token and Jira login of the local servers, and checks
of what the local Slack received.

``LocalSlackWithHistory`` is the local Slack (``alerting/fakes/slack.py``), which answers
``conversations.history`` and ``conversations.replies`` as Slack does; the name stays for
the tests that read better with it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.contracts import Verdict, WindowAggregate
from anchorwatch.policy.window import judge_window, verdict_for

T0 = 1_767_621_600_000  # 2026-01-05 14:00 UTC
MINUTE = 60_000

#: Window means of one full incident under the default policy and the static rule
#: (warning above 0.85, critical above 0.9, 6 requests): clean, two warnings (opens),
#: critical (escalates), critical, critical (a progress update with a 2-minute interval),
#: three clean windows (resolves).
LIFECYCLE = (0.5, 0.87, 0.88, 0.95, 0.93, 0.94, 0.5, 0.5, 0.5)

#: The lifecycle escalates on its first critical window: these tests are about delivering
#: an escalation, not about how much evidence one takes (the policy's tests are).
POLICY = {"rules": [{"name": "drift", "open_after_critical": 1}]}


def verdict(
    doc_type: str, minute: int, mean: float, *, requests: int = 50, job_version: str = "j1"
) -> Verdict:
    """The verdict the drift job would write for this window (static rule, no baseline)."""
    start = T0 + minute * MINUTE
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=requests,
        mean_drift=mean,
        p95_drift=min(1.0, mean + 0.04),
    )
    return verdict_for(window, judge_window(window, None), job_version)


def lifecycle(doc_type: str, first_minute: int = 0) -> list[Verdict]:
    return [verdict(doc_type, first_minute + i, m) for i, m in enumerate(LIFECYCLE)]


LocalSlackWithHistory = LocalSlack

#: The bot token the local Slack of the shared fixture asks for, and the Jira login a
#: local Jira asks for when a test wants one (``pytest.mark.local_jira``).
SLACK_TOKEN = "xoxb-test"
JIRA_USER, JIRA_TOKEN = "aw@example.com", "api-token"


# --------------------------------------------------------------------------- checks


def slack_threads(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Parent ts -> its replies in order, for messages posted with a thread."""
    threads: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        if m.get("thread_ts"):
            threads.setdefault(m["thread_ts"], []).append(m)
    return threads


def parents_by_label(messages: list[dict[str, Any]]) -> Counter[str]:
    """How many parent messages each incident label got."""
    return Counter(
        m["params"]["metadata"]["event_payload"]["incident_label"]
        for m in messages
        if not m.get("thread_ts") and isinstance(m.get("params", {}).get("metadata"), dict)
    )


def dq_verdict(doc_type: str, minute: int, mean: float, disabled: float) -> Verdict:
    """A verdict whose window had ``disabled`` of its snapshots disabled (above 0.2: the
    diagnosis snapshot_disabled, a data-quality incident's code)."""
    start = T0 + minute * MINUTE
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=50,
        mean_drift=mean,
        p95_drift=min(1.0, mean + 0.04),
        disabled_share=disabled,
    )
    return verdict_for(window, judge_window(window, None), "j1")
