"""Silences and maintenance windows: which incidents are judged and stored but not posted.

A *silence* is made by a person (``anchorwatch alerting silence add``, or the service's
HTTP API): one doc type, or every type when asked for explicitly (``--all``), optionally one
severity, for a bounded time, with an author and a reason. It is stored in the service's
state file, so it survives restarts, and expires at its end or when expired by hand.

A *maintenance window* is configured (``[alerting] maintenance_windows``) and recurs, as
Alertmanager's ``time_intervals``: weekdays and times of day in a time zone.

Both only mute notifications meant for people: the incident is still judged, stored,
counted in the metrics and listed (as silenced), and the downstream drift event still goes
out. Pure logic: the store keeps silences, the engine asks ``Muting`` what is muted now.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from anchorwatch.contracts.models import DocType
from anchorwatch.errors import AnchorwatchError
from anchorwatch.settings import Section

Severity = Literal["warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("warning", "critical")

#: The longest silence: a silence is for a known, bounded event (an upstream fault, a
#: rollout); what should stay quiet for longer belongs in settings (a pinned override).
MAX_SILENCE_S = 30 * 86_400
REASON_MAX_CHARS = 1000
AUTHOR_MAX_CHARS = 200

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_DOC_TYPE = TypeAdapter(DocType)


class SilenceError(AnchorwatchError):
    """A silence that cannot be made or changed; the message says which field and why."""


def parse_duration(text: str) -> int:
    """Seconds in ``2h``, ``90m``, ``1d12h``, ``45s``; raises SilenceError otherwise."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise SilenceError(f"duration: {text!r} is not a duration like 2h, 90m or 1d12h")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


@dataclass(frozen=True)
class Silence:
    silence_id: str
    doc_type: str | None  # None: every doc type (made with --all)
    severity: Severity | None  # None: both
    starts_ms: int
    ends_ms: int
    author: str
    reason: str
    created_ms: int
    expired_ms: int | None = None  # when expired by hand
    expired_by: str | None = None
    # Made by Slack's "Silence until resolved": it mutes that incident alone, and the
    # service ends it when the incident resolves (``SilenceBook.expire_resolved``).
    incident_id: str | None = None

    @property
    def until_ms(self) -> int:
        return self.ends_ms if self.expired_ms is None else min(self.ends_ms, self.expired_ms)

    def active(self, now_ms: int) -> bool:
        return self.starts_ms <= now_ms < self.until_ms

    def matches(self, doc_type: str, severity: str, incident_id: str | None = None) -> bool:
        if self.incident_id is not None and self.incident_id != incident_id:
            return False
        return (self.doc_type is None or self.doc_type == doc_type) and (
            self.severity is None or self.severity == severity
        )

    def describe(self) -> str:
        scope = "every doc type" if self.doc_type is None else f"doc type {self.doc_type!r}"
        if self.incident_id is not None:
            scope += f", incident {self.incident_id} until it resolves"
        return f"silence {self.silence_id} ({scope})"


def new_silence(
    *,
    doc_type: str | None,
    all_types: bool,
    severity: str | None,
    duration_s: int,
    reason: str,
    author: str,
    now_ms: int,
    incident_id: str | None = None,
) -> Silence:
    """A validated silence starting now; SilenceError names the field that is wrong."""
    if doc_type is None and not all_types:
        raise SilenceError(
            "doc_type: a silence names the doc type it mutes; one for every type needs --all"
        )
    if doc_type is not None and all_types:
        raise SilenceError("doc_type: give a doc type or --all, not both")
    if doc_type is not None:
        try:
            doc_type = _DOC_TYPE.validate_python(doc_type)
        except ValidationError as exc:
            raise SilenceError(f"doc_type: {exc.errors()[0]['msg']}") from None
    if severity is not None and severity not in SEVERITIES:
        raise SilenceError(f"severity: {severity!r} is not one of {', '.join(SEVERITIES)}")
    if duration_s <= 0:
        raise SilenceError("duration: a silence needs an end (a positive duration, e.g. 2h)")
    if duration_s > MAX_SILENCE_S:
        raise SilenceError(
            f"duration: at most {MAX_SILENCE_S // 86_400} days; for longer, pin the type's "
            "threshold or mute it in settings"
        )
    reason = reason.strip()
    if not reason:
        raise SilenceError("reason: say why (it is shown to whoever wonders where a page went)")
    if len(reason) > REASON_MAX_CHARS:
        raise SilenceError(f"reason: longer than {REASON_MAX_CHARS} characters")
    author = author.strip()
    if not author or len(author) > AUTHOR_MAX_CHARS:
        raise SilenceError(f"author: 1 to {AUTHOR_MAX_CHARS} characters")
    return Silence(
        silence_id=secrets.token_hex(8),
        doc_type=doc_type,
        severity=severity,
        starts_ms=now_ms,
        ends_ms=now_ms + duration_s * 1000,
        author=author,
        reason=reason,
        created_ms=now_ms,
        incident_id=incident_id,
    )


# --------------------------------------------------------------------------- maintenance

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _weekday_set(items: Sequence[str]) -> frozenset[int]:
    """``["monday:friday", "sunday"]`` -> {0, 1, 2, 3, 4, 6} (ranges as Alertmanager's)."""
    days: set[int] = set()
    for item in items:
        first, _, last = item.strip().lower().partition(":")
        for name in (first, last or first):
            if name not in _WEEKDAYS:
                raise ValueError(f"{item!r}: {name!r} is not a weekday ({', '.join(_WEEKDAYS)})")
        a, b = _WEEKDAYS.index(first), _WEEKDAYS.index(last or first)
        if b < a:
            raise ValueError(f"{item!r}: a range runs forward, e.g. monday:friday")
        days.update(range(a, b + 1))
    return frozenset(days)


def _minute_of_day(text: str, *, end: bool) -> int:
    match = re.fullmatch(r"(\d{2}):(\d{2})", text.strip())
    if match is None:
        raise ValueError(f"{text!r}: a time of day is HH:MM")
    hours, minutes = int(match[1]), int(match[2])
    if minutes > 59 or hours > 24 or (hours == 24 and (minutes or not end)):
        raise ValueError(f"{text!r}: not a time of day (00:00 to 24:00, 24:00 only as an end)")
    return hours * 60 + minutes


class TimeRange(Section):
    start_time: str = Field(description="HH:MM, included.")
    end_time: str = Field(description="HH:MM, excluded (24:00: the end of the day).")

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.start_minute >= self.end_minute:
            raise ValueError(
                f"start_time {self.start_time} must be before end_time {self.end_time} "
                "(a range past midnight is two ranges)"
            )
        return self

    @property
    def start_minute(self) -> int:
        return _minute_of_day(self.start_time, end=False)

    @property
    def end_minute(self) -> int:
        return _minute_of_day(self.end_time, end=True)


class MaintenanceWindow(Section):
    """A recurring window in which the named doc types are not posted."""

    name: str = Field(min_length=1, max_length=100, description="Shown where it mutes.")
    doc_types: list[str] = Field(
        default_factory=list, description="The doc types it mutes (empty: needs all_types)."
    )
    all_types: bool = Field(False, description="Mute every doc type.")
    severity: Severity | None = Field(None, description="Mute only this severity.")
    weekdays: list[str] = Field(
        default_factory=list, description='e.g. ["monday:friday"]; empty: every day.'
    )
    times: list[TimeRange] = Field(default_factory=list, description="Empty: all day.")
    location: str = Field("UTC", description="IANA time zone the weekdays and times are in.")

    @field_validator("weekdays")
    @classmethod
    def _known_days(cls, value: list[str]) -> list[str]:
        _weekday_set(value)
        return value

    @field_validator("location")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (e.g. Europe/Berlin)") from None
        return value

    @model_validator(mode="after")
    def _scoped(self) -> MaintenanceWindow:
        if not self.doc_types and not self.all_types:
            raise ValueError(f"{self.name}: name the doc_types it mutes, or set all_types = true")
        if self.doc_types and self.all_types:
            raise ValueError(f"{self.name}: doc_types or all_types, not both")
        for doc_type in self.doc_types:
            _DOC_TYPE.validate_python(doc_type)
        return self

    def matches(self, doc_type: str, severity: str) -> bool:
        return (self.all_types or doc_type in self.doc_types) and (
            self.severity is None or self.severity == severity
        )

    def active(self, now_ms: int) -> bool:
        local = datetime.fromtimestamp(now_ms / 1000, tz=UTC).astimezone(ZoneInfo(self.location))
        days = _weekday_set(self.weekdays)
        if days and local.weekday() not in days:
            return False
        minute = local.hour * 60 + local.minute
        return not self.times or any(r.start_minute <= minute < r.end_minute for r in self.times)

    def describe(self) -> str:
        return f"maintenance window {self.name!r}"


# --------------------------------------------------------------------------- muting


@dataclass(frozen=True)
class Muting:
    """What mutes notifications at one instant: the active silences and windows."""

    silences: tuple[Silence, ...]
    windows: tuple[MaintenanceWindow, ...]
    now_ms: int

    @classmethod
    def at(
        cls, silences: Iterable[Silence], windows: Iterable[MaintenanceWindow], now_ms: int
    ) -> Muting:
        return cls(
            tuple(s for s in silences if s.active(now_ms)),
            tuple(w for w in windows if w.active(now_ms)),
            now_ms,
        )

    def reason(self, doc_type: str, severity: str, incident_id: str | None = None) -> str | None:
        """What mutes an incident of this type and severity (and id) now (None: nothing)."""
        for silence in self.silences:
            if silence.matches(doc_type, severity, incident_id):
                return silence.describe()
        for window in self.windows:
            if window.matches(doc_type, severity):
                return window.describe()
        return None


@dataclass(frozen=True)
class Hold:
    """What muting does to one change of an incident: who hears of it (``audience``: all
    integrations, or only those carrying the drift event), what the incident keeps holding
    back (``by``, ``kind``: the post people get once nothing mutes it), and the held post to
    make first (``release``)."""

    audience: Literal["all", "events"]
    by: str | None = None
    kind: str | None = None
    release: str | None = None

    @classmethod
    def after(
        cls, change: str, held_by: str | None, held_kind: str | None, muted: str | None
    ) -> Hold:
        """``change``: its kind (opened, reopened, updated, resolved); ``held_by`` and
        ``held_kind``: what the incident holds back so far; ``muted``: what mutes it now."""
        if held_by is None and not (muted and change in ("opened", "reopened")):
            # Posted before (or never muted): a muted update waits, a resolution goes out,
            # so no ticket or thread is left open.
            return cls("events" if muted and change == "updated" else "all")
        kind = held_kind or ("opened" if change == "opened" else "reopened")
        if muted:
            # People hear nothing of it yet; resolved while muted, they never do.
            return cls("events", by=muted, kind=kind)
        # Nothing mutes it any more: the held post goes out now, as the incident stands, and
        # stands for this change too, but for a resolution, which follows it.
        return cls("all" if change == "resolved" else "events", release=kind)
