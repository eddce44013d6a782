"""``[watchdog]``: when the alerting service says that anchorwatch cannot see (the watchdog
in ``watchdog.py``, its Kafka probe in ``watchdog_probe.py``, its notice in
``watchdog_post.py``).

The defaults are set for the drift job's own defaults (one-minute windows, a 10 s watermark
delay, checkpoints every 30 s): a snapshot that arrives is judged, at the latest, one window,
the watermark delay, one checkpoint and one check later, about 110 s. ``blind_after_s`` sits
above that, and low enough that a killed job is noticed within 3 minutes.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from anchorwatch.alerting.render import Severity
from anchorwatch.settings import Section


class WatchdogSection(Section):
    enabled: bool = Field(
        True,
        description="Watch for blindness: doc types whose snapshots keep arriving but get no "
        "verdicts, a verdict watermark that stopped while snapshots arrive, the drift job's "
        "consumer group no longer committing while its lag grows. It only ever speaks when "
        "snapshots arrive: with no traffic (or no input topic yet) there is nothing to watch.",
    )
    check_interval_s: float = Field(
        10,
        ge=1,
        le=600,
        description="Wall time between two checks (each reads the tail of every input "
        "partition and the job group's committed offsets: a few hundred records, two admin "
        "requests). A killed job is noticed within blind_after_s + 2 checks.",
    )
    blind_after_s: float = Field(
        140,
        ge=2,
        le=86_400,
        description="A doc type is blind once snapshots of it arrived this long ago with no "
        "verdict of it since (likewise a stalled watermark or consumer). A healthy drift job "
        "judges a snapshot within window + watermark delay + checkpoint interval (60 + 10 + "
        "30 s by default) plus a check: 140 s keeps 30 s of margin and still notices a killed "
        "job within 160 s, under 3 minutes. Raise it with longer windows or checkpoints.",
    )
    tail_records: int = Field(
        200,
        ge=1,
        le=100_000,
        description="Records read per input partition and check, the newest since the last "
        "check (their keys are the doc types): a sample, so at 100k snapshots/s a check reads "
        "a few thousand records, not every snapshot; a rare type is watched once sampled.",
    )
    forget_after_s: float = Field(
        900,
        ge=60,
        le=30 * 86_400,
        description="A blind type not sampled again for this long is dropped from the notice "
        "(it stopped arriving: there is nothing left to see).",
    )
    update_interval_s: float = Field(
        60,
        ge=0,
        le=86_400,
        description="At most one update of the notice per interval as types join or "
        "recover (the opening and the resolution are never held back).",
    )
    job_group_id: str = Field(
        "anchorwatch-drift",
        description="The drift job's Kafka consumer group ([job] group_id), whose committed "
        "offsets show a stopped consumer; empty: that signal is off.",
    )
    severity: Severity = Field(
        "critical",
        description="Severity of the notice: critical reaches PagerDuty with its default "
        "routing, since a blind anchorwatch misses every drift.",
    )
    types_shown: int = Field(
        20,
        ge=1,
        le=200,
        description="Doc types named in the notice; more are counted ('+N more').",
    )

    @model_validator(mode="after")
    def _check_interval(self) -> WatchdogSection:
        if self.blind_after_s < 2 * self.check_interval_s:
            raise ValueError(
                "blind_after_s: must be at least twice check_interval_s "
                f"({self.blind_after_s} < 2 x {self.check_interval_s})"
            )
        if any(c.isspace() for c in self.job_group_id):
            raise ValueError("job_group_id: must not contain whitespace")
        return self
