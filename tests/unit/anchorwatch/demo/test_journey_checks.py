"""The demo's end checks: the watchdog's notice counts only when it follows the kill; the
alerts of the incidents living in one model version or one anchor kind name it first."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo.journey_checks import _blindness, breakdown_checks, named_first
from anchorwatch.demo.journey_operator import NOTICE_WITHIN_S, OperatorLog
from anchorwatch.demo.journey_results import JourneyReport, Seen
from anchorwatch.demo.slice import Comparison


def _operator(killed_at: float | None, notice_at: float | None) -> SimpleNamespace:
    log = OperatorLog()
    log.killed_at, log.notice_at = killed_at, notice_at
    return SimpleNamespace(log=log)


def test_a_notice_within_the_limit_after_the_kill_passes() -> None:
    check = _blindness(_operator(1000.0, 1000.0 + NOTICE_WITHIN_S - 1))  # type: ignore[arg-type]
    assert check.ok, check.detail


def test_a_notice_before_the_kill_fails_whatever_its_distance() -> None:
    check = _blindness(_operator(1000.0, 960.0))  # type: ignore[arg-type]
    assert not check.ok
    assert "40s before the job was killed" in check.detail


def test_a_late_notice_and_none_fail() -> None:
    assert not _blindness(_operator(1000.0, 1000.0 + NOTICE_WITHIN_S + 1)).ok  # type: ignore[arg-type]
    assert not _blindness(_operator(1000.0, None)).ok  # type: ignore[arg-type]
    assert not _blindness(_operator(None, None)).ok  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the breakdown

NOW = 1_767_600_000_000


def test_a_name_counts_whole_and_first() -> None:
    text = "worst `SECTION_003` · `claude-docs-3.6` 0.93 over 50%; `claude-docs-3.5` 0.41"
    assert named_first(text, "claude-docs-3.6", ["claude-docs-3.5"]) is None
    assert named_first(text, "claude-docs-3.5", ["claude-docs-3.6"]) == (
        "names claude-docs-3.6 before claude-docs-3.5"
    )
    # SECTION_003 names no kind; a version is not named by a longer one.
    assert named_first(text, "SECTION", []) == "does not name SECTION"
    assert named_first("m-2.1 0.9", "m-2", []) == "does not name m-2"
    assert named_first("concentrated in m-2.", "m-2", ["m-1"]) is None
    where = "TABLE anchors 0.91 against 0.35; SECTION, ENTITY steady"
    assert named_first(where, "TABLE", ["SECTION", "ENTITY"]) is None


def _report(
    plan: jp.Plan, messages: list[Any], issues: list[Any], *, with_breakdown: bool = True
) -> tuple[JourneyReport, Callable[[str], Any]]:
    report = JourneyReport(plan)
    raised, seen = [], {}
    for i, lab in enumerate(plan.labels):
        iid = f"inc-{i}"
        raised.append(jp.Raised(iid, lab.doc_type, "warning", lab.start_ms + 2 * jp.MINUTE_MS))
        seen[iid] = Seen(iid, lab.doc_type, "warning", lab.start_ms + 2 * jp.MINUTE_MS,
                         slack_ts=f"{i}.0", jira_key=f"AW-{i}")  # fmt: skip
    report.seen = seen
    report.outcome = jp.match_alerts(plan.labels, raised)
    # A job before the breakdown: none of the windows compared carries one.
    report.comparison = Comparison(10, [], [], [], [] if with_breakdown else [("x", 0)] * 10)
    pages = {"/_local/messages": {"messages": messages}, "/_local/issues": {"issues": issues}}

    def get(url: str) -> Any:
        return pages[url.removeprefix("http://local")]

    return report, get


def _posted(plan: jp.Plan, said: dict[str, str]) -> tuple[list[Any], list[Any]]:
    """A first-posted Slack parent (edited since) and a Jira ticket per label, saying
    ``said[kind]`` (wiki-escaped in Jira) or nothing."""
    messages: list[Any] = []
    issues: list[Any] = []
    for i, lab in enumerate(plan.labels):
        text = said.get(lab.kind, "")
        first = {"text": f"[WARNING] Drift alert: `{lab.doc_type}`", "blocks": [{"text": text}]}
        messages.append({"ts": f"{i}.0", "text": "[WARNING] Drift resolved", "blocks": [],
                         "edits": [first]})  # fmt: skip
        wiki = text.replace("-", "\\-").replace("_", "\\_").replace("`", "")
        issues.append({"key": f"AW-{i}", "fields": {"description": f"* Which model: {wiki}"}})
    return messages, issues


def test_the_breakdown_checks_read_what_slack_and_jira_got() -> None:
    plan = jp.make_plan(NOW, history_minutes=60, live_minutes=25)
    labels = {lab.kind: lab for lab in plan.labels}
    model, kind = labels["model_jump"], labels["kind_jump"]
    profile = next(p for p in plan.traffic.profiles if p.name == model.doc_type)
    (other,) = [m for m, _ in profile.models if m != model.model]
    good = {
        "model_jump": f"`{model.model}` 0.93 over 50%; `{other}` 0.41: concentrated",
        "kind_jump": f"{kind.anchor_kind} anchors 0.9 against 0.4; LIST steady · `LIST_001`",
    }
    report, get = _report(plan, *_posted(plan, good))
    checks = breakdown_checks(report, slack_url="http://local", jira_url="http://local", get=get)
    assert [(c.name, c.ok) for c in checks] == [("model", True), ("anchor kind", True)], checks
    # The other version named first, the kind not at all: both fail, saying where.
    bad = {"model_jump": f"`{other}` 0.9; `{model.model}` 0.4", "kind_jump": "LIST steady"}
    report, get = _report(plan, *_posted(plan, bad))
    checks = breakdown_checks(report, slack_url="http://local", jira_url="http://local", get=get)
    assert [c.ok for c in checks] == [False, False]
    assert f"its Slack parent names {other} before {model.model}" in checks[0].detail
    assert f"its Jira description does not name {kind.anchor_kind}" in checks[1].detail


def test_without_a_breakdown_from_the_job_the_checks_say_so() -> None:
    plan = jp.make_plan(NOW, history_minutes=60, live_minutes=25)
    report, get = _report(plan, [], [], with_breakdown=False)
    checks = breakdown_checks(report, slack_url="http://local", jira_url="http://local", get=get)
    assert [c.ok for c in checks] == [True, True]
    assert all("not checked: the drift job wrote no breakdown" in c.detail for c in checks)
