"""Silences and maintenance windows (alerting/silences.py, silence_book.py): what each
refuses and why, when each is in force, and what muting does to a change of an incident."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import (
    Hold,
    MaintenanceWindow,
    Muting,
    Silence,
    SilenceError,
    new_silence,
    parse_duration,
)
from anchorwatch.alerting.store import Store, StoreError
from anchorwatch.alerting.store_schema import SCHEMA_VERSION

NOW = 1_767_621_600_000  # 2026-01-05 14:00 UTC, a Monday


def _silence(**given: object) -> Silence:
    args: dict[str, object] = {
        "doc_type": "invoice",
        "all_types": False,
        "severity": None,
        "duration_s": 3600,
        "reason": "OCR vendor outage",
        "author": "ana",
        "now_ms": NOW,
    }
    return new_silence(**{**args, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1d12h", 129_600), ("45s", 45)]
)
def test_durations_read_as_people_write_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "h", "2 hours", "-1h", "1h2d"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(SilenceError, match=r"^duration: .* is not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"doc_type": None}, "^doc_type: .* needs --all"),
        ({"all_types": True}, "^doc_type: give a doc type or --all, not both"),
        ({"doc_type": "a\u202eb"}, r"^doc_type: U\+202E"),
        ({"severity": "page"}, "^severity: 'page' is not one of warning, critical"),
        ({"duration_s": 0}, "^duration: a silence needs an end"),
        ({"duration_s": 31 * 86_400}, "^duration: at most 30 days"),
        ({"reason": "  "}, "^reason: say why"),
        ({"reason": "x" * 1001}, "^reason: longer than 1000"),
        ({"author": ""}, "^author: 1 to 200 characters"),
    ],
)
def test_a_silence_that_would_be_wrong_names_its_field(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(SilenceError, match=message):
        _silence(**given)


def test_a_silence_mutes_its_type_and_severity_while_in_force() -> None:
    one = _silence(severity="warning")
    every = _silence(doc_type=None, all_types=True, duration_s=60)
    assert one.active(NOW)
    assert not one.active(NOW + 3600_000)
    assert not one.active(NOW - 1)
    assert one.matches("invoice", "warning")
    assert not one.matches("invoice", "critical")
    assert not one.matches("receipt", "warning")
    assert every.matches("receipt", "critical")
    muting = Muting.at([one, every], [], NOW + 120_000)  # `every` has ended
    assert muting.reason("invoice", "warning") == f"silence {one.silence_id} (doc type 'invoice')"
    assert muting.reason("invoice", "critical") is None


def _window(**given: object) -> MaintenanceWindow:
    return MaintenanceWindow.model_validate({"name": "nightly", "doc_types": ["invoice"], **given})


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).astimezone(UTC).timestamp() * 1000)


def test_a_maintenance_window_recurs_on_its_days_and_hours_in_its_zone() -> None:
    window = _window(
        weekdays=["monday:wednesday", "saturday"],
        times=[{"start_time": "22:00", "end_time": "24:00"}],
        location="Europe/Berlin",
    )
    # 2026-01-05 is a Monday; Berlin is UTC+1 in January.
    assert window.active(_ms("2026-01-05T21:30:00+00:00"))  # 22:30 Monday in Berlin
    assert not window.active(_ms("2026-01-05T20:30:00+00:00"))  # 21:30 in Berlin
    assert not window.active(_ms("2026-01-08T21:30:00+00:00"))  # a Thursday
    assert window.active(_ms("2026-01-10T22:59:00+00:00"))  # 23:59 Saturday
    assert not window.active(_ms("2026-01-10T23:00:00+00:00"))  # Sunday 00:00 in Berlin
    assert _window().active(NOW)  # no days, no times: always
    assert window.matches("invoice", "critical")
    assert not window.matches("receipt", "warning")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"doc_types": []}, "name the doc_types it mutes, or set all_types"),
        ({"all_types": True}, "doc_types or all_types, not both"),
        ({"weekdays": ["funday"]}, "'funday' is not a weekday"),
        ({"weekdays": ["friday:monday"]}, "a range runs forward"),
        ({"location": "Mars/Olympus"}, "not an IANA time zone"),
        ({"times": [{"start_time": "23:00", "end_time": "01:00"}]}, "must be before end_time"),
        ({"times": [{"start_time": "24:00", "end_time": "24:00"}]}, "24:00 only as an end"),
        ({"times": [{"start_time": "9:00", "end_time": "10:00"}]}, "a time of day is HH:MM"),
    ],
)
def test_a_maintenance_window_that_cannot_be_is_refused(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _window(**given)


@pytest.mark.parametrize(
    ("change", "held_by", "held_kind", "muted", "expected"),
    [
        # Never muted: everyone hears of everything.
        ("opened", None, None, None, Hold("all")),
        # Opened while muted: only the drift event goes out; people's post waits.
        ("opened", None, None, "s1", Hold("events", by="s1", kind="opened")),
        # Posted, then muted: its updates wait, its resolution goes out.
        ("updated", None, None, "s1", Hold("events")),
        ("resolved", None, None, "s1", Hold("all")),
        # Posted and resolved, re-opened while muted: the re-open waits.
        ("reopened", None, None, "s1", Hold("events", by="s1", kind="reopened")),
        # Held, still muted: still held (resolved: people never hear of it).
        ("updated", "s1", "opened", "w1", Hold("events", by="w1", kind="opened")),
        ("resolved", "s1", "opened", "s1", Hold("events", by="s1", kind="opened")),
        # Held, nothing mutes it now: the held post goes out and stands for the change,
        # but for a resolution, which follows it.
        ("updated", "s1", "opened", None, Hold("events", release="opened")),
        ("resolved", "s1", "reopened", None, Hold("all", release="reopened")),
    ],
)
def test_what_muting_does_to_each_change(
    change: str, held_by: str | None, held_kind: str | None, muted: str | None, expected: Hold
) -> None:
    assert Hold.after(change, held_by, held_kind, muted) == expected


# --------------------------------------------------------------------------- the book


def test_silences_are_kept_listed_and_expired(alerting_state: Path | StateLocation) -> None:
    Store(alerting_state).close()
    book = SilenceBook(alerting_state)
    one, other = _silence(), _silence(doc_type="receipt", duration_s=60)
    book.add(one)
    book.add(other)
    assert [s.silence_id for s in book.active(NOW)] == [one.silence_id, other.silence_id]
    assert [s.silence_id for s in book.active(NOW + 60_000)] == [one.silence_id]
    ended = book.expire(one.silence_id, by="bo", now_ms=NOW + 1000)
    assert (ended.expired_ms, ended.expired_by) == (NOW + 1000, "bo")
    assert book.active(NOW + 2000) == [other]
    book.close()
    reopened = SilenceBook(alerting_state)  # survives a restart
    assert reopened.get(one.silence_id) == ended
    assert {s.silence_id for s in reopened.all()} == {one.silence_id, other.silence_id}
    with pytest.raises(SilenceError, match="has already ended"):
        reopened.expire(one.silence_id, by="bo", now_ms=NOW + 3000)
    with pytest.raises(SilenceError, match="no silence 'nope'"):
        reopened.expire("nope", by="bo", now_ms=NOW)
    reopened.close()


def test_a_state_file_of_the_first_schema_is_brought_up_to_date(tmp_path: Path) -> None:
    Store(tmp_path).close()
    db = sqlite3.connect(tmp_path / "alerting.sqlite3")
    db.executescript(
        "ALTER TABLE incidents DROP COLUMN held_by; ALTER TABLE incidents DROP COLUMN held_kind;"
        "DROP TABLE silences; UPDATE meta SET value = '1' WHERE key = 'schema_version';"
    )
    db.close()
    with pytest.raises(StoreError, match="has schema 1: start the service once"):
        SilenceBook(tmp_path)
    store = Store(tmp_path)  # what the service does at start
    assert store.meta_get("schema_version") == str(SCHEMA_VERSION)
    store.close()
    book = SilenceBook(tmp_path)
    book.add(_silence())
    book.close()
