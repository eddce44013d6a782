"""The local Slack and Jira pages: hostile text stays text, permalinks highlight their
thread, the ticket list filters."""

from __future__ import annotations

from typing import Any

import requests

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.pages import mrkdwn, wiki
from anchorwatch.alerting.fakes.slack import LocalSlack


def _api(slack: LocalSlack, method: str, **params: Any) -> dict[str, Any]:
    r = requests.post(f"{slack.api_url}{method}", json=params,
                      headers={"Authorization": "Bearer xoxb-t"}, timeout=5)  # fmt: skip
    return dict(r.json())


def test_mrkdwn_and_wiki_escape_everything_they_do_not_render() -> None:
    assert mrkdwn("`<!channel>` *x* &lt;script&gt; <https://e.x/a?b=1&c=2|dash>") == (
        "<code>&lt;!channel&gt;</code> <b>x</b> &lt;script&gt; "
        "<a href='https://e.x/a?b=1&amp;c=2'>dash</a>"
    )
    assert wiki("h4. Windows\n||a||b||\n|1|<i>|\n* *x\\_y*: &#92;&#58;") == (
        "<h4>Windows</h4><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>&lt;i&gt;</td>"
        "</tr></table><ul><li><b>x_y</b>: \\:</li></ul>"
    )


def test_slack_permalink_opens_the_channel_with_the_thread_highlighted() -> None:
    with LocalSlack() as slack:
        first = _api(slack, "chat.postMessage", channel="#drift", text="one <b>")
        second = _api(slack, "chat.postMessage", channel="#drift", text="two")
        ts = str(second["ts"])
        _api(slack, "chat.postMessage", channel="#drift", thread_ts=ts, text="Resolved: ok")
        _api(slack, "chat.update", channel=str(second["channel"]), ts=ts, text="two, edited")
        url = f"{slack.url}/archives/{second['channel']}/p{ts.replace('.', '')}"
        page = requests.get(url, timeout=5).text
    assert f"<article class='thread focus' id='p{ts.replace('.', '')}'" in page
    assert page.count("<article class='thread'") == 1  # the other thread, not highlighted
    assert "one &lt;b&gt;" in page
    assert "edited 1x" in page
    assert "<div class='reply resolution'" in page
    assert first["ts"] != ts


def test_jira_list_filters_by_status_and_doc_type() -> None:
    with LocalJira() as jira:
        for doc in ("a", "b"):
            label = f"doc-{doc}-{'0' * 16}"
            fields: dict[str, Any] = {"project": {"key": "OPS"}, "summary": f"drift {doc}",
                      "issuetype": {"name": "Task"}, "labels": [label]}  # fmt: skip
            body = {"fields": fields}
            requests.post(f"{jira.url}/rest/api/2/issue", json=body, timeout=5).raise_for_status()
        both = requests.get(f"{jira.url}/", timeout=5).text
        only_b = requests.get(f"{jira.url}/", params={"doc": f"doc-b-{'0' * 16}"}, timeout=5).text
        none = requests.get(f"{jira.url}/", params={"status": "resolved"}, timeout=5).text
        ticket = requests.get(f"{jira.url}/browse/OPS-2", timeout=5).text
    assert both.count("<tr class='ticket'") == 2
    assert only_b.count("<tr class='ticket'") == 1
    assert "drift b" in only_b
    assert "No tickets match" in none
    assert "<span class='summary'>drift b</span>" in ticket
    assert "<td>created</td><td>To Do</td>" in ticket
