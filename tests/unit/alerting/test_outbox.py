"""The outbox drainer on its own: a real state file, a manual clock and in-process senders
standing for the remote side (the Slack and Jira wire protocols are tested through the
drainer in test_service.py). What is pinned here: how each kind of result finishes an
entry, the integration's backoff and when it starts again from its base, the wait
``drain_once`` returns, where the crash points fall, and what the structured log lines and
metrics say. Its rates: test_outbox_rates.py; its sender thread: test_outbox_thread.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.integrations.base import Delivered
from tests.support.alerting_outbox import START_S, Batches, OneByOne, World, permanent, retryable


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# --------------------------------------------------------------------- batch senders


def test_a_batch_finishes_each_entry_by_its_own_result(world: World) -> None:
    world.add("events", "ok", "later", "never")
    sender = Batches(
        answers={"later": [retryable("503", retry_after_s=30)], "never": [permanent("bad")]}
    )
    drainer = world.drainer(sender)
    # The retryable entry pauses the integration by the server's Retry-After.
    assert drainer.drain_once() == pytest.approx(30.0)
    assert sender.batches == [["ok", "later", "never"]]
    rows = world.rows()
    assert (rows["ok", 1]["status"], rows["ok", 1]["outcome"]) == ("done", "sent")
    assert rows["ok", 1]["finished_ms"] == world.now_ms()
    assert rows["later", 1]["status"] == "attempting"
    assert rows["later", 1]["next_attempt_ms"] == world.now_ms() + 30_000
    assert rows["later", 1]["error"] == "remote post: 503"
    assert (rows["never", 1]["status"], rows["never", 1]["error"]) == ("failed", "remote post: bad")
    assert [world.count("events", o) for o in ("sent", "retry", "failed")] == [1, 1, 1]
    # Paused: nothing is sent before the retry is due, then it is.
    world.clock.now += 29.5
    assert drainer.drain_once() == 0.5
    assert len(sender.batches) == 1
    world.clock.now += 0.5
    assert drainer.drain_once() is None
    assert sender.batches[1:] == [["later"]]
    assert world.rows()["later", 1]["outcome"] == "sent"


def test_a_batch_backoff_grows_per_failed_batch_and_starts_again_after_a_clean_one(
    world: World,
) -> None:
    world.add("events", "a")
    sender = Batches(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    assert drainer.drain_once() == 1.0
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    world.clock.now += 2.0
    assert drainer.drain_once() is None  # delivered: the outage is over
    world.add("events", "b")
    sender.answers["b"] = [retryable()]
    assert drainer.drain_once() == 1.0  # a new outage starts from the base delay again


# --------------------------------------------------------------------- one entry at a time


def test_one_failure_pauses_the_round_and_the_backoff_starts_again_after_a_success(
    world: World,
) -> None:
    world.add("slack", "a", "b", "c")
    sender = OneByOne(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    # "a" fails: b and c are not tried while the integration is paused.
    assert drainer.drain_once() == 1.0
    assert sender.sent == [("a", 1)]
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    assert sender.sent == [("a", 1), ("a", 1)]
    world.clock.now += 2.0
    assert drainer.drain_once() is None
    assert sorted(sender.sent[2:]) == [("a", 1), ("b", 1), ("c", 1)]
    # The second try of "a" reconciled first (it may have landed), found nothing, sent.
    assert sender.reconciled == ["a", "a"]
    a = world.rows()["a", 1]
    # Three attempts; the first one's time is kept, the finish is the last one's.
    assert (a["attempts"], a["first_attempt_ms"]) == (3, int(START_S * 1000))
    assert a["finished_ms"] == world.now_ms() == int(START_S * 1000) + 3_000
    world.add("slack", "d")
    sender.answers["d"] = [retryable()]
    assert drainer.drain_once() == 1.0


def test_a_reconciled_entry_resets_the_backoff_and_is_not_sent_again(world: World) -> None:
    world.add("slack", "a")
    sender = OneByOne(answers={"a": [retryable(), retryable()]})
    drainer = world.drainer(sender)
    assert drainer.drain_once() == 1.0
    world.clock.now += 1.0
    assert drainer.drain_once() == 2.0
    world.clock.now += 2.0
    sender.found["a"] = Delivered("reconciled", {"slack_ts": "9.9"})
    assert drainer.drain_once() is None
    assert sender.sent == [("a", 1), ("a", 1)]
    assert world.rows()["a", 1]["outcome"] == "reconciled"
    (listing,) = world.store.list_incidents(open_only=True, limit=5)
    assert listing.refs.slack_ts == "9.9"  # what reconciling found is kept
    world.add("slack", "b")
    sender.answers["b"] = [retryable()]
    assert drainer.drain_once() == 1.0


def test_an_unexpected_error_backs_off_and_keeps_its_type_and_text(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.add("slack", "a")
    sender = OneByOne(answers={"a": [KeyError("ts")]})
    drainer = world.drainer(sender)
    with caplog.at_level(logging.WARNING, logger="anchorwatch.alerting.outbox"):
        assert drainer.drain_once() == 1.0
    assert world.rows()["a", 1]["error"] == "KeyError: 'ts'"
    (failed,) = [r for r in caplog.records if r.getMessage() == "sending failed unexpectedly"]
    assert (failed.integration, failed.incident_id) == ("slack", "a")  # type: ignore[attr-defined]
    assert failed.exc_info is not None


def test_a_permanent_failure_ends_the_entry_and_the_next_one_goes(world: World) -> None:
    world.add("slack", "a", seqs=2)
    sender = OneByOne(answers={"a": [permanent()]})
    assert world.drainer(sender).drain_once() is None
    assert sender.sent == [("a", 1), ("a", 2)]
    rows = world.rows()
    assert (rows["a", 1]["status"], rows["a", 2]["status"]) == ("failed", "done")
    assert world.count("slack", "failed") == 1


def test_a_stop_during_a_round_leaves_the_rest_pending(world: World) -> None:
    world.add("slack", "a", "b", "c")
    stop = threading.Event()
    sender = OneByOne(on_send=stop.set)
    assert world.drainer(sender).drain_once(stop) is None
    assert len(sender.sent) == 1
    assert world.store.pending_counts(["slack"]) == {"slack": 2}


# --------------------------------------------------------------------- the wait returned


def test_drain_once_returns_the_wait_until_the_next_entry_is_due(world: World) -> None:
    drainer = world.drainer(OneByOne())
    assert drainer.drain_once() is None  # nothing at all
    world.add("slack", "a")
    (e,) = world.store.due("slack", world.now_ms(), 10)
    world.store.reschedule([e.id], world.now_ms() + 2_500, "503")
    assert drainer.drain_once() == 2.5
    world.clock.now += 2.5
    assert drainer.drain_once() is None


# --------------------------------------------------------------------- crash points


def test_crash_points_fall_around_the_send_and_inside_the_done_commit(world: World) -> None:
    world.add("slack", "a")
    world.add("events", "b")
    seen: list[tuple[str, str]] = []
    world.drainer(OneByOne(), crash=lambda point, i: seen.append((point, i))).drain_once()
    world.drainer(Batches(), crash=lambda point, i: seen.append((point, i))).drain_once()
    assert seen == [
        ("send_before", "slack"),
        ("send_after", "slack"),
        ("done_in_commit", "slack"),
        ("send_before", "events"),
        ("send_after", "events"),
        ("done_in_commit", "events"),
    ]


class Died(BaseException):
    """The process dying at a crash point."""


@pytest.mark.parametrize(
    ("point", "sent", "outcome"),
    [("send_before", [], None), ("send_after", [("a", 1)], "reconciled")],
)
def test_a_crash_around_the_send_leaves_the_entry_to_be_reconciled(
    world: World, point: str, sent: list[tuple[str, int]], outcome: str | None
) -> None:
    world.add("slack", "a")
    sender = OneByOne()

    def die(at: str, integration: str) -> None:
        if at == point:
            raise Died

    with pytest.raises(Died):
        world.drainer(sender, crash=die).drain_once()
    assert sender.sent == sent
    assert (world.rows()["a", 1]["status"], world.rows()["a", 1]["attempts"]) == ("attempting", 1)
    # After the restart, the entry is asked about before anything is sent again.
    if outcome:
        sender.found["a"] = Delivered("reconciled")
    world.drainer(sender).drain_once()
    assert sender.reconciled == ["a"]
    assert world.rows()["a", 1]["outcome"] == (outcome or "sent")
    assert len(sender.sent) == 1


# --------------------------------------------------------------------- metrics and logs


def test_latency_is_measured_from_consumption_for_what_was_delivered(world: World) -> None:
    world.add("slack", "a", "b")
    sender = OneByOne(answers={"b": [Delivered("suppressed")]})
    world.drainer(sender).drain_once()
    labels = {"integration": "slack"}
    name = "anchorwatch_alerting_notification_latency_seconds"
    # Only "a" was delivered; it was consumed 2 s before.
    assert world.registry.get_sample_value(f"{name}_count", labels) == 1
    assert world.registry.get_sample_value(f"{name}_sum", labels) == pytest.approx(2.0)
    assert world.count("slack", "suppressed") == 1


def extra(records: list[logging.LogRecord], message: str) -> dict[str, Any]:
    """The structured fields of the one record with ``message`` (what the JSON log adds)."""
    (record,) = [r for r in records if r.getMessage() == message]
    standard = {*vars(logging.makeLogRecord({})), "message", "asctime"}
    return {k: v for k, v in vars(record).items() if k not in standard}


def test_log_lines_name_the_entry_the_outcome_and_the_error(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.add("slack", "a", "b")
    world.add("slack", "c", seqs=2)
    world.store.mark_done([world.store.due("slack", world.now_ms(), 10)[2].id], "sent", 1)
    sender = OneByOne(
        answers={"a": [permanent("channel_not_found")], "c": [retryable("429", 7.25)]}
    )
    with caplog.at_level(logging.INFO, logger="anchorwatch.alerting.outbox"):
        world.drainer(sender).drain_once()
    assert extra(caplog.records, "notification failed for good") == {
        "integration": "slack",
        "action": "open",
        "incident_id": "a",
        "seq": 1,
        "error": "remote post: channel_not_found",
    }
    assert extra(caplog.records, "notification") == {
        "integration": "slack",
        "action": "open",
        "kind": "opened",
        "incident_id": "b",
        "seq": 1,
        "outcome": "sent",
    }
    assert extra(caplog.records, "notification rescheduled") == {
        "integration": "slack",
        "entries": 1,
        "retry_in_s": 7.25,
        "error": "remote post: 429",
    }
    assert sender.sent == [("a", 1), ("b", 1), ("c", 2)]
