"""The local Slack and Jira themselves: wire formats, strict JQL, error bodies, controls."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.jql import JqlError, parse_jql
from anchorwatch.alerting.fakes.slack import LocalSlack

# These tests are about the servers themselves: a Slack taking any bot token.
pytestmark = pytest.mark.local_slack(token=None)


def api(slack: LocalSlack, method: str, bearer: str | None = "xoxb-1", **params: Any) -> Any:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    return requests.post(f"{slack.api_url}{method}", json=params, headers=headers, timeout=5)


@pytest.mark.parametrize(
    ("params", "token", "error"),
    [
        ({"channel": "#a", "text": "x"}, None, "not_authed"),
        ({"text": "x"}, "xoxb-1", "channel_not_found"),
        ({"channel": "#a"}, "xoxb-1", "no_text"),
        ({"channel": "#a", "text": "x" * 40_001}, "xoxb-1", "msg_too_long"),
        ({"channel": "#a", "blocks": [{"type": "nope"}]}, "xoxb-1", "invalid_blocks"),
        (
            {"channel": "#a", "blocks": [{"type": "section", "text": {"type": "mrkdwn",
             "text": "x" * 3001}}]},
            "xoxb-1",
            "invalid_blocks",
        ),
        ({"channel": "#a", "text": "x", "thread_ts": "1.000009"}, "xoxb-1", "thread_not_found"),
    ],
)  # fmt: skip
def test_slack_answers_errors_as_200_ok_false(
    slack: LocalSlack, params: dict[str, Any], token: str | None, error: str
) -> None:
    response = api(slack, "chat.postMessage", token, **params)
    assert response.status_code == 200
    assert response.json() == {"ok": False, "error": error}


def test_slack_form_encoded_calls_and_unknown_methods(slack: LocalSlack) -> None:
    form = {"channel": "C0123456", "text": "hi", "blocks": json.dumps([{"type": "divider"}])}
    response = requests.post(f"{slack.api_url}chat.postMessage", data=form,
                             headers={"Authorization": "Bearer t"}, timeout=5)  # fmt: skip
    assert response.json()["channel"] == "C0123456"
    assert api(slack, "chat.delete").status_code == 404
    assert api(slack, "chat.update", channel="C0123456", ts="9.9", text="x").json()["error"] == (
        "message_not_found"
    )


def test_slack_upload_flow_checks_sizes_and_ids(slack: LocalSlack) -> None:
    got = api(slack, "files.getUploadURLExternal", filename="a.png", length=3).json()
    assert requests.post(got["upload_url"], data=b"ab", timeout=5).text == "OK - 2"
    done = api(slack, "files.completeUploadExternal", files=json.dumps([{"id": got["file_id"]}]))
    assert done.json()["error"] == "file_upload_size_mismatch"
    missing = api(slack, "files.completeUploadExternal", files=json.dumps([{"id": "F404"}]))
    assert missing.json()["error"] == "file_not_found"
    assert api(slack, "files.getUploadURLExternal", filename="a.png").json()["error"] == (
        "invalid_arguments"
    )


def test_slack_faults_are_validated_served_and_counted_down(slack: LocalSlack) -> None:
    bad = requests.post(f"{slack.url}/_local/faults", json={"status": 99}, timeout=5)
    assert bad.status_code == 400
    bad = requests.post(f"{slack.url}/_local/faults", json={"colour": "red"}, timeout=5)
    assert "unknown fault field" in bad.json()["error"]
    spec: dict[str, Any] = {"method": "auth.test", "status": 429, "retry_after": 1.5, "times": 2}
    assert requests.post(f"{slack.url}/_local/faults", json=spec, timeout=5).json()["ok"]
    first = api(slack, "auth.test")
    assert first.status_code == 429
    assert first.headers["Retry-After"] == "1.5"
    assert first.json() == {"ok": False, "error": "ratelimited"}
    assert api(slack, "auth.test").status_code == 429
    assert api(slack, "auth.test").json()["ok"] is True
    assert requests.get(f"{slack.url}/_local/faults", timeout=5).json()["faults"] == []


def test_slack_page_shows_messages_escaped(slack: LocalSlack) -> None:
    api(slack, "chat.postMessage", channel="#ops", text="<script>alert(1)</script> &lt;!here&gt;")
    page = requests.get(f"{slack.url}/", timeout=5).text
    assert "&lt;script&gt;" in page
    assert "<script>" not in page
    assert "#ops" in page
    assert requests.post(f"{slack.url}/_local/reset", timeout=5).json()["ok"]
    assert "No messages yet" in requests.get(f"{slack.url}/", timeout=5).text


def test_slack_webhook_plain_text_answers(slack: LocalSlack) -> None:
    assert requests.post(slack.webhook_url, json={"text": "hi"}, timeout=5).text == "ok"
    no_text = requests.post(slack.webhook_url, json={"blocks": []}, timeout=5)
    assert (no_text.status_code, no_text.text) == (400, "no_text")
    bad = requests.post(slack.webhook_url, data=b"{nope", timeout=5)
    assert (bad.status_code, bad.text) == (400, "invalid_payload")
    # Legacy attachments alone are a message (Alertmanager's slack_configs send only them).
    legacy = {"attachments": [{"title": "[FIRING:1] X", "text": "summary", "color": "danger"}]}
    assert requests.post(slack.webhook_url, json=legacy, timeout=5).text == "ok"
    assert slack.messages[-1]["text"] == "[FIRING:1] X\nsummary"
    empty = requests.post(slack.webhook_url, json={"attachments": [{"color": "x"}]}, timeout=5)
    assert (empty.status_code, empty.text) == (400, "no_text")
    wrong = requests.post(slack.webhook_url, json={"attachments": "x"}, timeout=5)
    assert (wrong.status_code, wrong.text) == (400, "invalid_attachments")


# --------------------------------------------------------------------------- Jira


def rest(jira: LocalJira, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, f"{jira.url}/rest/api/{path}", timeout=5, **kwargs)


@pytest.mark.parametrize(
    ("jql", "message"),
    [
        ("labels = order", "The word 'order' is a reserved JQL word"),
        ("labels = AND", "The word 'AND' is a reserved JQL word"),
        ('labels = "open', "The quoted string 'open' has not been completed"),
        ("labels = a.b", "The character '.' is a reserved JQL character"),
        ("labels = x y", "Expecting either 'OR' or 'AND'"),
        ("labels", "Expecting operator"),
        ('labels = "a\\qb"', "The escape sequence '\\q'"),
        ("nosuchfield = x", "Field 'nosuchfield' does not exist"),
        ("project = NOPE", "The value 'NOPE' does not exist for the field 'project'"),
        ("created >= tomorrowish", "Date value 'tomorrowish' for field 'created' is invalid"),
    ],
)
def test_jira_rejects_bad_jql_like_jira(jira: LocalJira, jql: str, message: str) -> None:
    response = rest(jira, "GET", "2/search", params={"jql": jql})
    assert response.status_code == 400
    body = response.json()
    assert body["errors"] == {}
    assert body["errorMessages"][0].startswith("Error in the JQL Query: ")
    assert message in body["errorMessages"][0]


def test_jql_grammar() -> None:
    where, order = parse_jql(
        'project = "OPS" AND (labels IN ("a", b) OR NOT status = Done) AND resolution IS EMPTY '
        "ORDER BY created DESC, key"
    )
    assert order == [("created", True), ("key", False)]
    assert where is not None
    assert parse_jql("ORDER BY created") == (None, [("created", False)])
    with pytest.raises(JqlError):
        parse_jql("labels IN (a, b")


def create(jira: LocalJira, version: str = "2", **fields: Any) -> requests.Response:
    base = {"project": {"key": "OPS"}, "issuetype": {"name": "Task"}, "summary": "s"}
    return rest(jira, "POST", f"{version}/issue", json={"fields": {**base, **fields}})


@pytest.mark.parametrize(
    ("fields", "errors"),
    [
        ({"summary": ""}, {"summary": "You must specify a summary of the issue."}),
        ({"summary": "a\nb"}, {"summary": "The summary is invalid because it contains newline characters."}),  # noqa: E501
        ({"summary": "x" * 256}, {"summary": "Summary must be less than 255 characters."}),
        ({"summary": "🚨" * 128}, {"summary": "Summary must be less than 255 characters."}),
        ({"labels": ["two words"]}, {"labels": "The label 'two words' contains spaces which is invalid."}),  # noqa: E501
        ({"priority": {"name": "Urgent"}}, {"priority": "Priority name 'Urgent' is not valid"}),
        ({"project": {"key": "NOPE"}}, {"project": "valid project is required"}),
        ({"issuetype": {"name": "Saga"}}, {"issuetype": "valid issue type is required"}),
        ({"description": "d" * 32_768}, {"description": "The entered text is too long. It exceeds the allowed limit of 32,767 characters."}),  # noqa: E501
        ({"description": {"type": "doc"}}, {"description": "Operation value must be a string"}),
        ({"assignee": {"name": "x"}}, {"assignee": "Field 'assignee' cannot be set. It is not on the appropriate screen, or unknown."}),  # noqa: E501
    ],
)  # fmt: skip
def test_jira_field_errors_come_in_jiras_error_body(
    jira: LocalJira, fields: dict[str, Any], errors: dict[str, str]
) -> None:
    response = create(jira, **fields)
    assert response.status_code == 400
    assert response.json() == {"errorMessages": [], "errors": errors}


def test_jira_v3_takes_atlassian_documents(jira: LocalJira) -> None:
    assert create(jira, "3", description="plain").status_code == 400
    doc = {"type": "doc", "version": 1, "content": [{"type": "paragraph",
           "content": [{"type": "text", "text": "hello"}]}]}  # fmt: skip
    created = create(jira, "3", description=doc)
    assert created.status_code == 201
    key = created.json()["key"]
    assert rest(jira, "GET", f"2/issue/{key}").json()["fields"]["description"] == "hello"
    assert rest(jira, "GET", f"3/issue/{key}").json()["fields"]["description"]["type"] == "doc"


def test_jira_workflow_and_unknown_issues(jira: LocalJira) -> None:
    key = create(jira).json()["key"]
    names = [
        t["name"] for t in rest(jira, "GET", f"2/issue/{key}/transitions").json()["transitions"]
    ]
    assert names == ["Start Progress", "Done"]
    bad = rest(jira, "POST", f"2/issue/{key}/transitions", json={"transition": {"id": "41"}})
    assert bad.json()["errorMessages"] == ["Transition id '41' is not valid for this issue."]
    assert (
        rest(
            jira, "POST", f"2/issue/{key}/transitions", json={"transition": {"id": "31"}}
        ).status_code
        == 204
    )
    issue = rest(jira, "GET", f"2/issue/{key}").json()
    assert issue["fields"]["status"]["statusCategory"]["key"] == "done"
    assert issue["fields"]["resolutiondate"] is not None
    missing = rest(jira, "GET", "2/issue/OPS-999")
    assert missing.status_code == 404
    assert missing.json()["errorMessages"] == [
        "Issue does not exist or you do not have permission to see it."
    ]


def test_jira_search_finds_by_labels_and_relative_resolution_dates(jira: LocalJira) -> None:
    a = create(jira, labels=["drift-alert", "aw-1"]).json()["key"]
    create(jira, labels=["drift-alert", "aw-2"])
    rest(jira, "POST", f"2/issue/{a}/transitions", json={"transition": {"id": "31"}})
    found = rest(
        jira, "GET", "2/search", params={"jql": 'labels = "aw-1" AND resolutiondate >= -10m'}
    )
    assert [i["key"] for i in found.json()["issues"]] == [a]
    jira.advance(3600)
    found = rest(
        jira, "GET", "2/search", params={"jql": 'labels = "aw-1" AND resolutiondate >= -10m'}
    )
    assert found.json()["issues"] == []
    open_ = rest(
        jira, "POST", "2/search", json={"jql": 'statusCategory != "Done"', "fields": ["labels"]}
    )
    assert [i["fields"] for i in open_.json()["issues"]] == [{"labels": ["drift-alert", "aw-2"]}]


def test_jira_cloud_has_no_plain_search_and_session_endpoints_answer() -> None:
    with LocalJira(deployment="Cloud") as cloud:
        gone = rest(cloud, "GET", "2/search", params={"jql": ""})
        assert gone.status_code == 410
        ok = rest(cloud, "GET", "3/search/jql", params={"jql": ""})
        assert ok.json() == {"issues": [], "isLast": True}
        info = rest(cloud, "GET", "2/serverInfo").json()
        assert info["deploymentType"] == "Cloud"
        session = requests.get(f"{cloud.url}/rest/auth/1/session", timeout=5).json()
        assert session["name"] == "anchorwatch"


def test_jira_credentials_are_checked_when_configured() -> None:
    with LocalJira(credentials=("", "pat")) as server:
        denied = rest(server, "GET", "2/myself")
        assert denied.status_code == 401
        assert "not authenticated" in denied.json()["errorMessages"][0]
        ok = rest(server, "GET", "2/myself", headers={"Authorization": "Bearer pat"})
        assert ok.status_code == 200


def test_jira_page_and_reset(jira: LocalJira) -> None:
    create(jira, summary="<b>bold</b>")
    page = requests.get(f"{jira.url}/", timeout=5).text
    assert ">OPS-1</a></td><td>&lt;b&gt;bold&lt;/b&gt;</td>" in page
    assert "<b>bold</b>" not in page
    assert requests.post(f"{jira.url}/_local/reset", timeout=5).json()["ok"]
    assert create(jira).json()["key"] == "OPS-1"
    moved = requests.post(f"{jira.url}/_local/clock", json={"advance_s": 60}, timeout=5).json()
    assert "now" in moved
