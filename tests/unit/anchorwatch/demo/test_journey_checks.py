"""The demo's blindness check: the watchdog's notice counts only when it follows the kill."""

from __future__ import annotations

from types import SimpleNamespace

from anchorwatch.demo.journey_checks import NOTICE_WITHIN_S, _blindness
from anchorwatch.demo.journey_operator import OperatorLog


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
