"""Slack through the real slack_sdk clients against the local Slack on a loopback port,
decoding what the server received. Retries run on a fake clock: no real waiting."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests
from slack_sdk.web import WebClient
from slack_sdk.webhook import WebhookClient

from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.integrations.slack.notifier import (
    SlackNotifier,
    SlackRef,
    SlackWebhookNotifier,
)
from anchorwatch.alerting.integrations.slack.sender import SlackSender
from anchorwatch.alerting.leadership import LostLead
from anchorwatch.alerting.notify import ManualClock, PermanentError, RetryableError, RetryPolicy
from anchorwatch.alerting.payload import notification_payload
from anchorwatch.alerting.render import IncidentView, WindowPoint, incident_label
from anchorwatch.alerting.settings import RoutingSection, SlackSection
from anchorwatch.alerting.store import Action, OutboxEntry, Refs, Store
from tests.support.alerting import SLACK_TOKEN
from tests.support.rendering import HOSTILE, assert_slack_safe, view

# The retry waits below are read as times since 0.
pytestmark = pytest.mark.manual_clock(start=0.0)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def policy(clock: ManualClock, **kwargs: Any) -> RetryPolicy:
    settings: dict[str, Any] = {"max_attempts": 12, "max_elapsed_s": 900, "rand": lambda: 0.0}
    return RetryPolicy(sleep=clock.sleep, clock=clock, **{**settings, **kwargs})


ROUTING = RoutingSection(
    default_channel="#drift-alerts",
    severity_channels={"critical": "#ops-pager"},
    doc_type_channels={"medical_report": "#medical"},
)


def notifier(
    server: LocalSlack, clock: ManualClock, token: str = SLACK_TOKEN, **kwargs: Any
) -> SlackNotifier:
    client = WebClient(token=token, base_url=server.api_url, retry_handlers=[])
    return SlackNotifier(
        client, ROUTING, policy(clock), chart_renderer=lambda points, title: PNG, **kwargs
    )


def history(n: int = 12) -> list[WindowPoint]:
    start = 1_767_621_000_000
    return [
        WindowPoint(start + i * 60_000, start + (i + 1) * 60_000, 0.6 + 0.03 * i, 0.85, 100)
        for i in range(n)
    ]


def received(server: LocalSlack, path: str = "messages") -> Any:
    return requests.get(f"{server.url}/_local/{path}", timeout=5).json()[path]


def fault(server: LocalSlack, spec: dict[str, Any]) -> None:
    response = requests.post(f"{server.url}/_local/faults", json=spec, timeout=5)
    assert response.json()["ok"] is True


def test_thread_open_update_resolve_as_slack_received_it(
    slack: LocalSlack, clock: ManualClock
) -> None:
    n = notifier(slack, clock)
    incident = view()
    ref = n.open(incident)
    result = n.update(ref, replace(incident, state="updated", peak_mean_drift=0.97), history())
    resolved = replace(incident, state="resolved", resolved_at_ms=1_767_623_460_000)
    final = n.resolve(ref, resolved)

    messages = received(slack)
    parent, reply, chart, resolution = messages
    assert parent["channel_name"] == "#ops-pager"  # critical -> severity route
    assert ref == SlackRef(parent["channel"], parent["ts"])
    assert parent["thread_ts"] is None
    assert parent["params"]["unfurl_links"] is False
    metadata = parent["params"]["metadata"]
    assert metadata["event_payload"] == {"incident_label": incident_label("inc-1")}
    # The parent was edited twice: on the update, then to show the resolution.
    assert len(parent["edits"]) == 2
    assert "Drift alert" in parent["edits"][1]["text"]
    assert "Drift resolved" in parent["text"]
    assert "0.970" in json.dumps(parent["edits"][1]["blocks"])  # the updated peak
    # The update and the chart are replies in the thread; the resolution too, broadcast.
    assert reply["thread_ts"] == ref.ts
    assert "mean drift" in reply["text"]
    assert chart["subtype"] == "file_share"
    assert chart["thread_ts"] == ref.ts
    assert resolution["thread_ts"] == ref.ts
    assert resolution["reply_broadcast"] is True
    assert result.reply_ts == reply["ts"]
    assert result.parent_updated
    assert result.chart_uploaded
    assert result.problems == ()
    assert final.parent_updated
    (upload,) = received(slack, "files")
    assert upload["id"] == chart["files"][0]
    assert upload["size"] == len(PNG)
    assert upload["name"].startswith(f"drift-{incident_label('inc-1')}-")
    assert "12 windows" in upload["alt_txt"]
    assert clock.sleeps == []


def test_routing_doc_type_beats_severity_beats_default(
    slack: LocalSlack, clock: ManualClock
) -> None:
    n = notifier(slack, clock)
    n.open(view("medical_report"))
    n.open(view("invoice", severity="warning"))
    assert [m["channel_name"] for m in received(slack)] == ["#medical", "#drift-alerts"]


def outbox_entry(
    incident: IncidentView, action: Action = "open", refs: Refs | None = None
) -> OutboxEntry:
    return OutboxEntry(
        id=1,
        incident_id=incident.incident_id,
        doc_type=incident.doc_type,
        seq=1,
        integration="slack",
        action=action,
        kind="opened",
        payload=notification_payload(incident, []),
        status="pending",
        attempts=0,
        consumed_ms=0,
        first_attempt_ms=None,
        refs=refs or Refs(),
    )


def test_the_senders_rate_key_is_the_channel_its_entry_posts_to(
    slack: LocalSlack, clock: ManualClock, tmp_path: Path
) -> None:
    """The outbox paces Slack per rate key: it must be the channel the entry goes to."""
    sender = SlackSender(notifier(slack, clock), ROUTING)
    sender.bind(Store(tmp_path))
    # Before the parent is posted: the routed channel.
    assert sender.rate_key(outbox_entry(view("medical_report"))) == "#medical"
    assert sender.rate_key(outbox_entry(view("invoice", severity="warning"))) == "#drift-alerts"
    critical = outbox_entry(view("invoice"))
    assert sender.rate_key(critical) == "#ops-pager"
    # The parent posted: Slack names the channel by its id, and so does the key from now on,
    # also for another incident's parent routed there: one channel, one bucket.
    thread = sender.send(critical).refs["slack_channel"]
    assert thread == received(slack)[0]["channel"] != "#ops-pager"
    assert sender.rate_key(outbox_entry(view("receipt", incident_id="inc-2"))) == thread
    # An entry of an incident with a thread: the thread's channel, whatever the routing says.
    update = outbox_entry(view("medical_report"), "update", Refs("C0THREAD1", "1.0"))
    assert sender.rate_key(update) == "C0THREAD1"


@pytest.mark.parametrize(
    ("spec", "sleeps"),
    [
        ({"status": 429, "retry_after": 3, "times": 2}, [3.0, 3.0]),
        ({"status": 429, "retry_after": 0, "times": 1}, [0.0]),
        ({"status": 500, "times": 2}, [1.0, 2.0]),  # HTML body, no Retry-After: backoff
        ({"status": 502, "times": 1, "body": "Bad Gateway"}, [1.0]),
        ({"status": 503, "error": "service_unavailable", "retry_after": 5, "times": 1}, [5.0]),
        ({"status": 200, "error": "internal_error", "times": 1}, [1.0]),  # transient ok:false
        ({"status": 200, "error": "ratelimited", "times": 1}, [1.0]),
        ({"disconnect": True, "times": 2}, [1.0, 2.0]),  # connection dropped
    ],
)
def test_retryable_failures_are_retried_and_post_once(
    slack: LocalSlack, clock: ManualClock, spec: dict[str, Any], sleeps: list[float]
) -> None:
    fault(slack, {"method": "chat.postMessage", **spec})
    ref = notifier(slack, clock).open(view())
    assert clock.sleeps == sleeps
    (message,) = received(slack)
    assert message["ts"] == ref.ts
    calls = [r for r in received(slack, "requests") if r["method"] == "chat.postMessage"]
    assert len(calls) == len(sleeps) + 1


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"status": 200, "error": "channel_not_found"}, "ok:false channel_not_found"),
        ({"status": 200, "error": "not_in_channel"}, "ok:false not_in_channel"),
        (
            {
                "status": 200,
                "body": {"ok": False, "error": "missing_scope", "needed": "chat:write"},
            },
            "missing_scope (needed scope: chat:write)",
        ),
        ({"status": 400, "error": "invalid_arguments"}, "HTTP 400: invalid_arguments"),
        ({"status": 404, "error": "unknown_method"}, "HTTP 404"),
        ({"status": 413, "error": "request_too_large"}, "HTTP 413"),
    ],
)
def test_permanent_failures_stop_at_once_with_slacks_error(
    slack: LocalSlack, clock: ManualClock, spec: dict[str, Any], error: str
) -> None:
    fault(slack, {"method": "chat.postMessage", **spec})
    with pytest.raises(PermanentError, match=error.replace("(", r"\(").replace(")", r"\)")):
        notifier(slack, clock).open(view())
    assert clock.sleeps == []
    assert received(slack) == []


def test_bad_token_is_permanent(slack: LocalSlack, clock: ManualClock) -> None:
    with pytest.raises(PermanentError, match="invalid_auth"):
        notifier(slack, clock, token="xoxb-wrong").open(view())


def test_outage_of_minutes_then_recovery_posts_exactly_once(
    slack: LocalSlack, clock: ManualClock
) -> None:
    # Nine answers of 503 with Retry-After: 30 s: four and a half minutes of outage.
    fault(slack, {"method": "chat.postMessage", "status": 503, "retry_after": 30, "times": 9})
    started = time.monotonic()
    ref = notifier(slack, clock).open(view())
    assert clock.now == pytest.approx(270.0)
    assert clock.sleeps == [30.0] * 9
    assert time.monotonic() - started < 5  # the fake clock did the waiting
    (message,) = received(slack)
    assert message["ts"] == ref.ts


def test_outage_beyond_the_budget_gives_up_with_retry_after_then_a_later_try_posts(
    slack: LocalSlack, clock: ManualClock
) -> None:
    fault(slack, {"method": "chat.postMessage", "status": 429, "retry_after": 120, "times": -1})
    short = SlackNotifier(
        WebClient(token=SLACK_TOKEN, base_url=slack.api_url, retry_handlers=[]),
        ROUTING,
        policy(clock, max_elapsed_s=300),
    )
    with pytest.raises(RetryableError) as raised:
        short.open(view())
    assert raised.value.retry_after_s == 120.0  # what an outbox schedules the next try by
    assert raised.value.attempts == 3
    assert received(slack) == []
    requests.delete(f"{slack.url}/_local/faults", timeout=5)
    short.open(view())
    assert len(received(slack)) == 1


def test_update_keeps_the_reply_when_the_edit_and_the_chart_fail(
    slack: LocalSlack, clock: ManualClock
) -> None:
    n = notifier(slack, clock)
    ref = n.open(view())
    fault(slack, {"method": "chat.update", "status": 200, "error": "cant_update_message"})
    fault(slack, {"method": "upload", "status": 500, "times": -1})
    result = n.update(ref, view(state="updated"), history())
    assert not result.parent_updated
    assert not result.chart_uploaded
    assert len(result.problems) == 2
    assert "cant_update_message" in result.problems[0]
    assert "HTTP 500" in result.problems[1]
    replies = [m for m in received(slack) if m["thread_ts"] == ref.ts]
    assert len(replies) == 1  # the reply went out once; the rest is best effort


def test_chart_upload_is_retried_as_a_whole_and_lands_once(
    slack: LocalSlack, clock: ManualClock
) -> None:
    n = notifier(slack, clock)
    ref = n.open(view())
    fault(slack, {"method": "files.completeUploadExternal", "status": 429, "retry_after": 2})
    fault(slack, {"method": "files.getUploadURLExternal", "disconnect": True})
    result = n.update(ref, view(state="updated"), history())
    assert result.chart_uploaded
    assert clock.sleeps == [1.0, 2.0]
    shares = [m for m in received(slack) if m.get("subtype") == "file_share"]
    assert len(shares) == 1
    assert shares[0]["thread_ts"] == ref.ts


def test_chart_shows_only_the_last_n_windows(slack: LocalSlack, clock: ManualClock) -> None:
    seen: list[int] = []

    def renderer(points: Sequence[WindowPoint], title: str) -> bytes:
        seen.append(len(points))
        return PNG

    client = WebClient(token=SLACK_TOKEN, base_url=slack.api_url, retry_handlers=[])
    n = SlackNotifier(client, ROUTING, policy(clock), chart_windows=5, chart_renderer=renderer)
    n.update(n.open(view()), view(), history(40))
    assert seen == [5]


@pytest.mark.parametrize("doc_type", HOSTILE)
def test_hostile_doc_types_arrive_inert(
    slack: LocalSlack, clock: ManualClock, doc_type: str
) -> None:
    n = notifier(slack, clock)
    incident = view(doc_type[:512])
    ref = n.open(incident)
    n.update(ref, replace(incident, state="updated"), history())
    n.resolve(ref, replace(incident, state="resolved", resolved_at_ms=1_767_623_460_000))
    messages = received(slack)
    assert len(messages) == 4
    for m in messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"], "edits": m["edits"]})


def test_settings_wire_a_real_client_with_the_token_and_no_sdk_retries(
    slack: LocalSlack, clock: ManualClock
) -> None:
    section = SlackSection(mode="bot", api_url=slack.api_url, bot_token=SLACK_TOKEN)
    n = SlackNotifier.from_settings(section, ROUTING, policy(clock))
    fault(slack, {"method": "chat.postMessage", "disconnect": True})
    n.open(view())
    assert clock.sleeps == [1.0]  # our policy retried, not slack_sdk's handler
    assert len(received(slack)) == 1


def test_real_chart_is_uploaded_as_a_png(slack: LocalSlack, clock: ManualClock) -> None:
    client = WebClient(token=SLACK_TOKEN, base_url=slack.api_url, retry_handlers=[])
    n = SlackNotifier(client, ROUTING, policy(clock))
    n.update(n.open(view()), view(), history(30))
    (entry,) = received(slack, "files")
    png = requests.get(f"{slack.url}/_local/files/{entry['id']}", timeout=5).content
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) == entry["size"] > 5_000


# --------------------------------------------------------------------------- webhook


def webhook(server: LocalSlack, clock: ManualClock) -> SlackWebhookNotifier:
    return SlackWebhookNotifier(WebhookClient(server.webhook_url, retry_handlers=[]), policy(clock))


def test_webhook_posts_full_state_messages(slack: LocalSlack, clock: ManualClock) -> None:
    hook = webhook(slack, clock)
    hook.open(view("<!channel>"))
    hook.update(view("<!channel>", state="updated"))
    hook.resolve(view("<!channel>", state="resolved", resolved_at_ms=1_767_623_460_000))
    messages = received(slack)
    assert [m["subtype"] for m in messages] == ["webhook"] * 3
    assert all(m["thread_ts"] is None for m in messages)
    assert "Drift resolved" in messages[2]["text"]
    for m in messages:
        assert_slack_safe({"text": m["text"], "blocks": m["blocks"]})


@pytest.mark.parametrize(
    ("spec", "retried"),
    [
        ({"status": 429, "retry_after": 4}, True),
        ({"status": 500}, True),
        ({"status": 503}, True),
        ({"disconnect": True}, True),
        ({"status": 400, "error": "invalid_payload"}, False),
        ({"status": 403, "error": "action_prohibited"}, False),
        ({"status": 404, "error": "no_service"}, False),
        ({"status": 410, "error": "channel_is_archived"}, False),
    ],
)
def test_webhook_status_table(
    slack: LocalSlack, clock: ManualClock, spec: dict[str, Any], retried: bool
) -> None:
    fault(slack, {"method": "webhook", **spec})
    hook = webhook(slack, clock)
    if retried:
        hook.open(view())
        assert len(received(slack)) == 1
        assert clock.sleeps == [float(spec.get("retry_after", 1.0))]
    else:
        with pytest.raises(PermanentError, match=spec["error"]):
            hook.open(view())
        assert received(slack) == []
        assert clock.sleeps == []


def test_a_slack_that_is_not_there_is_retried_then_reported(clock: ManualClock) -> None:
    with LocalSlack() as gone:
        url = gone.api_url  # a port that was ours and is now closed
    client = WebClient(token=SLACK_TOKEN, base_url=url, retry_handlers=[])
    n = SlackNotifier(client, ROUTING, policy(clock, max_attempts=3))
    with pytest.raises(RetryableError, match="connection error"):
        n.open(view())
    assert clock.sleeps == [1.0, 2.0]


def test_a_chart_whose_send_was_fenced_before_its_share_is_not_in_the_thread(
    slack: LocalSlack, clock: ManualClock
) -> None:
    """The sender's fence runs after the upload, before files.completeUploadExternal: an
    instance that lost the incident while it uploaded (paused past its lease) shares nothing,
    so the chart its successor posts is the thread's only one."""
    n = notifier(slack, clock)
    ref = n.open(view())
    calls: list[str] = []

    def lost() -> None:
        calls.append("fence")
        raise LostLead("another instance took the lead")

    with pytest.raises(LostLead):
        n.upload_chart(ref, view(state="updated"), history(), "chart-1.png", before_share=lost)
    assert calls == ["fence"]
    assert not [m for m in received(slack) if m.get("subtype") == "file_share"]
    n.upload_chart(ref, view(state="updated"), history(), "chart-1.png")
    shares = [m for m in received(slack) if m.get("subtype") == "file_share"]
    assert len(shares) == 1
    assert shares[0]["thread_ts"] == ref.ts
