"""Jira through the real `jira.JIRA` client against the local Jira on a loopback port,
decoding the tickets the server holds. Retries run on a fake clock."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.jql import parse_jql
from anchorwatch.alerting.integrations.jira.notifier import JiraNotifier, connect, find_jql
from anchorwatch.alerting.integrations.jira.render import doc_type_label
from anchorwatch.alerting.notify import ManualClock, PermanentError, RetryableError, RetryPolicy
from anchorwatch.alerting.render import incident_label
from anchorwatch.alerting.settings import JiraSection
from tests.support.alerting import JIRA_TOKEN, JIRA_USER
from tests.support.rendering import HOSTILE, view

pytestmark = pytest.mark.local_jira(credentials=(JIRA_USER, JIRA_TOKEN))


def section(server: LocalJira, **kwargs: Any) -> JiraSection:
    return JiraSection(
        enabled=True,
        url=server.url,
        user=JIRA_USER,
        api_token=JIRA_TOKEN,
        **kwargs,
    )


def notifier(
    server: LocalJira, clock: ManualClock, *, max_elapsed_s: float = 900, **kwargs: Any
) -> JiraNotifier:
    settings = section(server, **kwargs)
    retry = RetryPolicy(
        max_attempts=12, max_elapsed_s=max_elapsed_s, sleep=clock.sleep, clock=clock,
        rand=lambda: 0.0,
    )  # fmt: skip
    return JiraNotifier(lambda: connect(settings), settings, retry, clock_ms=clock.ms)


def issues(server: LocalJira) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = requests.get(f"{server.url}/_local/issues", timeout=5).json()[
        "issues"
    ]
    return found


def calls(server: LocalJira) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = requests.get(f"{server.url}/_local/requests", timeout=5).json()[
        "requests"
    ]
    return found


def fault(server: LocalJira, spec: dict[str, Any]) -> None:
    assert requests.post(f"{server.url}/_local/faults", json=spec, timeout=5).json()["ok"]


def test_one_ticket_with_summary_labels_priority_and_evidence(
    jira: LocalJira, clock: ManualClock
) -> None:
    ticket = notifier(jira, clock).open_or_reopen(view())
    assert ticket.key == "OPS-1"
    assert ticket.action == "created"
    (issue,) = issues(jira)
    f = issue["fields"]
    assert f["summary"] == "[URGENT] Drift Alert: purchase_contract - Score 0.912"
    assert f["labels"] == [
        "drift-alert",
        doc_type_label("purchase_contract"),
        incident_label("inc-1"),
    ]
    assert re.fullmatch(r"doc-purchase_contract-[0-9a-f]{16}", f["labels"][1])
    assert f["priority"]["name"] == "Highest"
    assert f["issuetype"]["name"] == "Task"
    assert f["status"]["name"] == "To Do"
    description = f["description"]
    for evidence in ("0.912", "0.850", "baseline b\\-1", "above\\_critical", "h4. Windows"):
        assert evidence in description
    assert "[Dashboard|https://grafana.example.com/d/aw?var-doc_type=x]" in description
    # What the real client did: serverInfo on construction, the field list, one search.
    assert [c["op"] for c in calls(jira)] == ["serverInfo", "field", "search", "create"]


def test_warning_gets_its_own_priority_and_extra_labels(
    jira: LocalJira, clock: ManualClock
) -> None:
    n = notifier(jira, clock, extra_labels=["team-llm"], summary_template="{doc_type} {severity}")
    n.open_or_reopen(view(severity="warning"))
    (issue,) = issues(jira)
    assert issue["fields"]["priority"]["name"] == "High"
    assert issue["fields"]["labels"][-1] == "team-llm"
    assert issue["fields"]["summary"] == "purchase_contract warning"


def test_a_lost_local_state_finds_the_open_ticket_again(
    jira: LocalJira, clock: ManualClock
) -> None:
    first = notifier(jira, clock).open_or_reopen(view())
    again = notifier(jira, clock).open_or_reopen(view())  # a fresh process, no memory
    assert again.key == first.key
    assert again.action == "existing"
    assert len(issues(jira)) == 1


def test_a_create_whose_answer_was_lost_is_not_repeated(
    jira: LocalJira, clock: ManualClock
) -> None:
    # Jira creates the ticket, then the connection drops before the answer arrives.
    fault(jira, {"method": "create", "disconnect": True, "after": True})
    ticket = notifier(jira, clock).open_or_reopen(view())
    assert len(issues(jira)) == 1
    assert ticket.key == "OPS-1"
    assert clock.sleeps == [1.0]


def test_a_reopened_incident_reopens_its_own_ticket(jira: LocalJira, clock: ManualClock) -> None:
    n = notifier(jira, clock)
    first = n.open_or_reopen(view())
    assert n.resolve(
        first.key, view(state="resolved", resolved_at_ms=1_767_623_460_000)
    ).transitioned
    jira.advance(1800)
    again = n.open_or_reopen(view())  # the policy re-opened the same incident
    assert (again.key, again.action) == (first.key, "reopened")
    (issue,) = issues(jira)
    assert issue["fields"]["status"]["name"] == "To Do"
    assert issue["fields"]["resolution"] is None
    assert [t["transition"] for t in issue["transitions"]] == ["Done", "Reopen"]


def test_a_new_incident_of_the_same_type_never_takes_a_resolved_ticket(
    jira: LocalJira, clock: ManualClock
) -> None:
    # Tickets are found by the incident's own hash label only: a new incident of the same
    # doc type, however soon after, gets its own ticket; the resolved one stays as it was.
    n = notifier(jira, clock)
    first = n.open_or_reopen(view())
    n.resolve(first.key, view(state="resolved", resolved_at_ms=1_767_623_460_000))
    before = {i["key"]: i for i in issues(jira)}[first.key]
    jira.advance(60)
    second = n.open_or_reopen(view(incident_id="inc-2"))
    assert (second.key, second.action) == ("OPS-2", "created")
    assert {i["key"]: i for i in issues(jira)}[first.key] == before


def test_another_incidents_open_ticket_is_never_shared(jira: LocalJira, clock: ManualClock) -> None:
    # Two incidents of one type open at once (two rules, or the first one's resolution not
    # delivered yet): a shared ticket would be closed by the first resolution while the
    # second is still open. Each gets its own.
    n = notifier(jira, clock)
    first = n.open_or_reopen(view())
    second = n.open_or_reopen(view(incident_id="inc-2"))
    assert (second.key, second.action) == ("OPS-2", "created")
    n.resolve(first.key, view(state="resolved", resolved_at_ms=1_767_623_460_000))
    by_key = {i["key"]: i for i in issues(jira)}
    assert by_key[first.key]["fields"]["status"]["name"] == "Done"
    assert by_key[second.key]["fields"]["status"]["name"] == "To Do"
    assert by_key[second.key]["comments"] == []
    assert incident_label("inc-2") not in by_key[first.key]["fields"]["labels"]


def test_missing_reopen_transition_is_logged_and_a_new_ticket_opened(
    jira: LocalJira, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    n = notifier(jira, clock)
    first = n.open_or_reopen(view())
    n.resolve(first.key, view(state="resolved", resolved_at_ms=1_767_623_460_000))
    fault(jira, {"hide_transition": "Reopen", "times": -1})
    with caplog.at_level(logging.ERROR, logger="anchorwatch.alerting"):
        second = n.open_or_reopen(view())  # the same incident, re-opened by the policy
    assert (second.key, second.action) == ("OPS-2", "created")
    assert "reopen transition missing" in caplog.text


def test_comments_are_rate_limited_and_a_severity_change_always_comments(
    jira: LocalJira, clock: ManualClock
) -> None:
    n = notifier(jira, clock, comment_interval_s=900)
    key = n.open_or_reopen(view(severity="warning")).key
    warning = view(severity="warning", state="updated")
    assert not n.comment(key, warning)  # right after the ticket was created
    clock.now += 600
    assert not n.comment(key, warning)
    clock.now += 301
    assert n.comment(key, warning)
    assert not n.comment(key, warning)
    assert n.comment(key, replace(warning, severity="critical"))  # escalation: at once
    # A caller that keeps the time itself (e.g. across restarts) decides.
    assert not notifier(jira, clock).comment(key, warning, last_comment_ms=clock.ms() - 60_000)
    assert notifier(jira, clock).comment(key, warning, last_comment_ms=clock.ms() - 901_000)
    (issue,) = issues(jira)
    assert len(issue["comments"]) == 3
    assert issue["fields"]["priority"]["name"] == "Highest"  # raised with the severity


def test_resolve_comments_then_transitions_and_a_second_resolve_is_silent(
    jira: LocalJira, clock: ManualClock
) -> None:
    n = notifier(jira, clock)
    key = n.open_or_reopen(view()).key
    resolved = view(state="resolved", resolved_at_ms=1_767_623_460_000)
    result = n.resolve(key, resolved)
    assert (result.commented, result.transitioned, result.error) == (True, True, None)
    again = notifier(jira, clock).resolve(key, resolved)
    assert again.already_resolved
    assert not again.commented
    (issue,) = issues(jira)
    assert issue["fields"]["status"]["name"] == "Done"
    assert issue["fields"]["resolution"] == {"name": "Done"}
    assert len(issue["comments"]) == 1
    assert issue["comments"][0].startswith("Resolved 2026-01-05 14:31 UTC after 30 min")


def test_a_missing_resolve_transition_is_a_logged_error_not_a_crash(
    jira: LocalJira, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    n = notifier(jira, clock, resolve_transition="Close Issue")
    key = n.open_or_reopen(view()).key
    with caplog.at_level(logging.ERROR, logger="anchorwatch.alerting"):
        result = n.resolve(key, view(state="resolved", resolved_at_ms=1_767_623_460_000))
    assert result.commented
    assert not result.transitioned
    assert result.error is not None
    assert "'Close Issue' not available on OPS-1" in result.error
    assert "Start Progress" in result.error  # what is available, to fix the setting
    assert "resolve transition missing" in caplog.text
    assert issues(jira)[0]["fields"]["status"]["name"] == "To Do"


def test_a_transition_hidden_by_the_server_is_reported(jira: LocalJira, clock: ManualClock) -> None:
    n = notifier(jira, clock)
    key = n.open_or_reopen(view()).key
    fault(jira, {"hide_transition": "Done", "times": -1})
    result = n.resolve(key, view(state="resolved", resolved_at_ms=1_767_623_460_000))
    assert result.error is not None
    assert "'Done' not available" in result.error


@pytest.mark.parametrize(
    ("spec", "sleeps"),
    [
        ({"method": "create", "status": 429, "retry_after": 2, "times": 2}, [2.0, 2.0]),
        ({"method": "create", "status": 503, "times": 1}, [1.0]),
        ({"method": "create", "status": 500, "body": "<html>oops</html>"}, [1.0]),
        ({"method": "search", "status": 502, "times": 2}, [1.0, 2.0]),
        ({"method": "search", "disconnect": True}, [1.0]),
        ({"method": "serverInfo", "status": 503, "retry_after": 5}, [5.0]),
        ({"method": "field", "status": 429, "retry_after": 1}, [1.0]),
    ],
)
def test_retryable_jira_failures(
    jira: LocalJira, clock: ManualClock, spec: dict[str, Any], sleeps: list[float]
) -> None:
    fault(jira, spec)
    notifier(jira, clock).open_or_reopen(view())
    assert clock.sleeps == sleeps
    assert len(issues(jira)) == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"method": "create", "status": 400, "body": {"errorMessages": [],
             "errors": {"customfield_10010": "Team is required."}}},
            "HTTP 400: Team is required.",
        ),
        (
            {"method": "create", "status": 403, "error": "You do not have permission to create issues in this project."},  # noqa: E501
            "HTTP 403: You do not have permission",
        ),
        ({"method": "search", "status": 404, "error": "No project"}, "HTTP 404: No project"),
        ({"method": "search", "status": 400, "error": "Error in the JQL"}, "HTTP 400: Error in"),
    ],
)  # fmt: skip
def test_other_4xx_stop_with_jiras_message(
    jira: LocalJira, clock: ManualClock, spec: dict[str, Any], message: str
) -> None:
    fault(jira, spec)
    with pytest.raises(PermanentError, match=message):
        notifier(jira, clock).open_or_reopen(view())
    assert clock.sleeps == []
    assert issues(jira) == []


def test_field_errors_from_jira_itself_are_permanent(jira: LocalJira, clock: ManualClock) -> None:
    with pytest.raises(PermanentError, match="Priority name 'Urgent' is not valid"):
        notifier(jira, clock, priorities={"critical": "Urgent"}).open_or_reopen(view())
    with pytest.raises(PermanentError, match="valid issue type is required"):
        notifier(jira, clock, issue_type="Epic Saga").open_or_reopen(view())
    with pytest.raises(PermanentError, match="does not exist for the field 'project'"):
        notifier(jira, clock, project="NOPE").open_or_reopen(view())


def test_wrong_credentials_are_permanent(jira: LocalJira, clock: ManualClock) -> None:
    settings = JiraSection(enabled=True, url=jira.url, user=JIRA_USER, api_token="wrong")
    retry = RetryPolicy(sleep=clock.sleep, clock=clock)
    with pytest.raises(PermanentError, match="HTTP 401: You are not authenticated"):
        JiraNotifier(lambda: connect(settings), settings, retry).open_or_reopen(view())


def test_jira_outage_of_minutes_then_recovery_creates_one_ticket(
    jira: LocalJira, clock: ManualClock
) -> None:
    fault(jira, {"method": "create", "status": 503, "retry_after": 60, "times": 4})
    notifier(jira, clock).open_or_reopen(view())
    assert clock.sleeps == [60.0] * 4
    assert len(issues(jira)) == 1


def test_an_outage_beyond_the_budget_is_retryable_for_the_caller(
    jira: LocalJira, clock: ManualClock
) -> None:
    fault(jira, {"method": "*", "status": 503, "retry_after": 120, "times": -1})
    with pytest.raises(RetryableError) as raised:
        notifier(jira, clock, max_elapsed_s=300).open_or_reopen(view())
    assert raised.value.retry_after_s == 120.0


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_hostile_doc_types_make_valid_jql_labels_and_summaries(
    jira: LocalJira, clock: ManualClock, doc_type: str
) -> None:
    n = notifier(jira, clock)
    incident = view(doc_type[:512])
    first = n.open_or_reopen(incident)
    assert n.open_or_reopen(incident).key == first.key  # the JQL search found it
    assert n.resolve(first.key, replace(incident, state="resolved")).transitioned
    second = n.open_or_reopen(incident)  # re-opened by the policy
    assert (second.key, second.action) == (first.key, "reopened")
    (issue,) = issues(jira)
    assert issue["fields"]["labels"][1] == doc_type_label(doc_type[:512])
    assert len(issue["fields"]["summary"]) <= 255
    assert all(c["status"] < 400 for c in calls(jira))


def test_the_search_jql_is_quoted_and_parses() -> None:
    jql = find_jql("OPS", view('AND "x" \\ order'))
    where, order = parse_jql(jql)
    assert order == [("created", True)]
    assert where is not None
    # The incident's own hash label is the only label searched: no doc-type label.
    assert re.findall(r'labels = "([^"]*)"', jql) == [incident_label("inc-1")]


def test_cloud_sites_are_searched_with_search_jql(clock: ManualClock) -> None:
    with LocalJira(deployment="Cloud") as cloud:
        n = notifier(cloud, clock)
        first = n.open_or_reopen(view())
        assert n.open_or_reopen(view()).key == first.key
        paths = [c["path"] for c in calls(cloud) if c["op"] == "search"]
    assert paths == ["/rest/api/2/search/jql"] * 2


def test_from_settings_uses_bearer_token_without_user(clock: ManualClock) -> None:
    with LocalJira(credentials=("", "pat-123")) as server:
        settings = JiraSection(enabled=True, url=server.url, api_token="pat-123")
        n = JiraNotifier.from_settings(settings, RetryPolicy(sleep=clock.sleep, clock=clock))
        assert n.open_or_reopen(view()).action == "created"


def test_a_jira_that_is_not_there_is_retried_then_reported(clock: ManualClock) -> None:
    with LocalJira() as gone:
        settings = JiraSection(enabled=True, url=gone.url)
    retry = RetryPolicy(max_attempts=3, sleep=clock.sleep, clock=clock, rand=lambda: 0.0)
    n = JiraNotifier(lambda: connect(settings), settings, retry)  # built lazily: no error yet
    with pytest.raises(RetryableError, match="connection error"):
        n.open_or_reopen(view())
    assert clock.sleeps == [1.0, 2.0]


def test_a_type_spelling_another_types_old_label_cannot_touch_its_ticket(
    jira: LocalJira, clock: ManualClock
) -> None:
    # "victim_two-658958e2" is what "victim two!" sanitised to, with its hash, under the old
    # labels: they shared the label, so the crafted type's incident took over the victim's
    # open ticket and its resolution closed it.
    n = notifier(jira, clock)
    victim = n.open_or_reopen(view("victim two!", incident_id="inc-victim"))
    before = {i["key"]: i for i in issues(jira)}[victim.key]
    crafted = view("victim_two-658958e2", incident_id="inc-crafted")
    ticket = n.open_or_reopen(crafted)
    assert (ticket.key, ticket.action) != (victim.key, "existing")
    assert n.resolve(ticket.key, replace(crafted, state="resolved")).transitioned
    # A new incident of the crafted type does not find the victim's ticket either.
    again = n.open_or_reopen(replace(crafted, incident_id="inc-crafted-2"))
    assert again.key != victim.key
    after = {i["key"]: i for i in issues(jira)}[victim.key]
    assert after == before  # open, same labels, no comment, no transition
    assert after["fields"]["status"]["name"] == "To Do"
