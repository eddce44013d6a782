"""Silences and maintenance windows in the running service (without Kafka: the harness of
tests/support/alerting_harness.py, the real Slack and Jira clients against the local
servers): a muted incident is judged, stored, counted and sent downstream as a drift event,
but people hear of it only once nothing mutes it, and then exactly once."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import Silence, new_silence
from anchorwatch.cli.alerting import alerting
from anchorwatch.contracts.models import ModelFigures
from tests.support.alerting import LocalSlackWithHistory, lifecycle, parents_by_label
from tests.support.alerting_harness import (
    Crash,
    Harness,
    assert_one_clean_lifecycle,
    issues,
    posted,
    settings_for,
)


def _silence(h: Harness, doc_type: str = "invoice", minutes: int = 60) -> Silence:
    made = new_silence(
        doc_type=doc_type,
        all_types=False,
        severity=None,
        duration_s=minutes * 60,
        reason="OCR vendor outage",
        author="ana",
        now_ms=h.clock.ms(),
    )
    book = SilenceBook(h.settings.alerting.state_dir)
    book.add(made)
    book.close()
    return made


def _expire(h: Harness, silence: Silence) -> None:
    book = SilenceBook(h.settings.alerting.state_dir)
    book.expire(silence.silence_id, by="ana", now_ms=h.clock.ms())
    book.close()


def _row(h: Harness, doc_type: str):  # type: ignore[no-untyped-def]
    (listing,) = [
        r for r in h.store.list_incidents(open_only=False, limit=100) if r.row.doc_type == doc_type
    ]
    return listing.row


def test_an_incident_opened_while_silenced_is_posted_once_when_the_silence_ends(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    silence = _silence(h)
    h.publish(lifecycle("invoice")[:5] + lifecycle("receipt")[:5])
    h.run()
    # Judged, stored, counted and sent downstream; not posted.
    assert _row(h, "invoice").held_by == f"silence {silence.silence_id} (doc type 'invoice')"
    assert _row(h, "invoice").state == "open"
    assert h.value("anchorwatch_alerting_incidents_open", severity="critical") == 2
    assert h.value("anchorwatch_alerting_incidents_silenced") == 1
    assert [e["doc_type"] for e in h.events.sent].count("invoice") == 2  # opened, escalated
    assert list(parents_by_label(posted(slack))) == [
        m for m in parents_by_label(posted(slack)) if "invoice" not in m
    ]
    assert len(parents_by_label(posted(slack))) == 1  # receipt's only
    assert len(issues(jira)) == 1
    assert h.engine.release_held(h.clock.ms()) == 0  # still in force

    _expire(h, silence)
    assert h.engine.release_held(h.clock.ms()) == 1
    assert h.engine.release_held(h.clock.ms()) == 0
    assert h.value("anchorwatch_alerting_incidents_silenced") == 0
    h.drain()
    assert len(parents_by_label(posted(slack))) == 2
    assert len(issues(jira)) == 2
    invoice_parent = next(m for m in posted(slack) if not m["thread_ts"] and "invoice" in m["text"])
    assert invoice_parent["text"].startswith("[CRITICAL]")  # as it stands now, escalated
    assert _row(h, "invoice").held_by is None

    # From then on it lives as any other: updates, then its resolution, in its one thread.
    h.publish(lifecycle("invoice")[5:])
    h.run()
    assert len(parents_by_label(posted(slack))) == 2
    assert invoice_parent["ts"] in {m["thread_ts"] for m in posted(slack) if m["thread_ts"]}
    ticket = next(i for i in issues(jira) if "invoice" in i["fields"]["summary"])
    assert ticket["fields"]["status"]["name"] == "Done"


def test_an_incident_resolved_under_its_silence_never_reaches_people(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    silence = _silence(h)
    h.publish(lifecycle("invoice"))
    h.run()
    _expire(h, silence)
    assert h.engine.release_held(h.clock.ms()) == 0
    h.drain()
    assert posted(slack) == []
    assert issues(jira) == []
    row = _row(h, "invoice")
    assert row.state == "resolved"
    assert row.held_by is not None  # listed as silenced
    assert [e["event_type"] for e in h.events.sent] == [
        "ANCHOR_DRIFT_ALERT",
        "ANCHOR_DRIFT_ALERT",
        "ANCHOR_DRIFT_RESOLVED",
    ]


def test_a_posted_incident_silenced_later_keeps_quiet_but_still_resolves(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira, update_interval_s=60), clock)
    h.publish(lifecycle("invoice")[:4])  # opened and escalated: posted
    h.run()
    before = [m["text"].split(" ")[0] for m in posted(slack)]
    _silence(h)
    h.publish(lifecycle("invoice")[4:])  # two progress-worthy windows, then the resolution
    h.run()
    after = [m["text"].split(" ")[0] for m in posted(slack)][len(before) :]
    assert after == ["Resolved:"]  # no progress updates while silenced
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"


def test_a_silence_ending_across_a_crash_posts_exactly_once(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock, crash="release_before_commit")
    silence = _silence(h)
    h.publish(lifecycle("invoice")[:5])
    h.run()
    _expire(h, silence)
    with pytest.raises(Crash):  # the process dies there
        h.engine.release_held(h.clock.ms())
    h.restart()
    assert h.engine.release_held(h.clock.ms()) == 1
    h.restart()
    assert h.engine.release_held(h.clock.ms()) == 0
    h.publish(lifecycle("invoice")[5:])
    h.run()
    assert list(parents_by_label(posted(slack)).values()) == [1]
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"


def test_a_maintenance_window_mutes_while_it_lasts(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    window = {"name": "all day", "all_types": True, "severity": "warning"}
    h = Harness(settings_for(tmp_path, slack, jira, maintenance_windows=[window]), clock)
    h.publish(lifecycle("invoice")[:3])  # opened as a warning: muted
    h.run()
    assert posted(slack) == []
    assert _row(h, "invoice").held_by == "maintenance window 'all day'"
    h.publish(lifecycle("invoice")[3:4])  # escalated to critical: the window no longer mutes
    h.run()
    assert len(parents_by_label(posted(slack))) == 1
    h.publish(lifecycle("invoice")[4:])
    h.run()
    assert_one_clean_lifecycle_but_the_first_update(h, slack, jira)


def assert_one_clean_lifecycle_but_the_first_update(
    h: Harness, slack: LocalSlackWithHistory, jira: LocalJira
) -> None:
    """Posted first as it stood (critical): its escalation is in that post, not a reply."""
    parents = [m for m in posted(slack) if not m["thread_ts"]]
    assert len(parents) == 1
    replies = [m["text"].split(" ")[0] for m in posted(slack) if m["thread_ts"]]
    assert replies == ["Update", "Resolved:"]
    (ticket,) = issues(jira)
    assert ticket["fields"]["status"]["name"] == "Done"


def test_without_silences_the_lifecycle_is_as_before(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    _silence(h, doc_type="another")
    h.publish(lifecycle("invoice"))
    h.run()
    assert_one_clean_lifecycle(h, slack, jira, "invoice")


def test_the_incidents_command_says_what_is_silenced(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    silence = _silence(h)
    h.publish(lifecycle("invoice")[:5])
    h.run()
    state = str(h.settings.alerting.state_dir)
    table = CliRunner().invoke(alerting, ["incidents", "--state-dir", state])
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[1].startswith("silenced critical")
    listed = CliRunner().invoke(alerting, ["incidents", "--state-dir", state, "--json"])
    (record,) = [orjson.loads(line) for line in listed.output.splitlines()]
    assert record["silenced_by"] == f"silence {silence.silence_id} (doc type 'invoice')"
    _expire(h, silence)
    h.engine.release_held(h.clock.ms())
    table = CliRunner().invoke(alerting, ["incidents", "--state-dir", state])
    assert table.output.splitlines()[1].startswith("open     critical")


def test_a_post_released_by_a_silences_end_still_says_which_model(
    tmp_path: Path, slack: LocalSlackWithHistory, jira: LocalJira, clock: ManualClock
) -> None:
    """The window history keeps drift and latency only: the held row keeps the breakdown of
    the last window it was held with, so the released post names the model."""
    h = Harness(settings_for(tmp_path, slack, jira), clock)
    silence = _silence(h)
    models = [
        ModelFigures(model="summarizer-2.1", request_count=40, mean_drift=0.97),
        ModelFigures(model="summarizer-2.0", request_count=60, mean_drift=0.31),
    ]
    held = [
        v.model_copy(update={"window": v.window.model_copy(update={"models": models})})
        for v in lifecycle("invoice")[:5]
    ]
    h.publish(held)
    h.run()
    assert not parents_by_label(posted(slack))
    _expire(h, silence)
    assert h.engine.release_held(h.clock.ms()) == 1
    h.run()
    (parent,) = [m for m in posted(slack) if not m.get("thread_ts")]
    text = orjson.dumps(parent).decode()
    assert "summarizer-2.1" in text
    assert "summarizer-2.0" in text
