"""The ``[grouping]`` section: when data-quality incidents of several doc types are posted as
one group incident, and when a data-quality incident holds back the drift pages of its type
(see ``grouping.py``)."""

from __future__ import annotations

from typing import Final

from pydantic import Field, field_validator

from anchorwatch.settings import Section

#: The diagnosis codes of ``anchorwatch.policy.window.diagnose``: data quality, not drift.
QUALITY_CODES: Final = (
    "zero_anchors",
    "snapshot_disabled",
    "kl_divergence_spike",
    "resample_burst",
)


class GroupingSection(Section):
    enabled: bool = Field(
        True,
        description="Group data-quality incidents of many doc types into one Slack thread and "
        "Jira ticket, and hold back a type's drift pages while its data-quality incident is "
        "open. Off: every incident is posted on its own, as before.",
    )
    codes: list[str] = Field(
        default_factory=lambda: list(QUALITY_CODES),
        description="The diagnosis codes that make an incident a data-quality one (a reason "
        "of the window that opened it); the first listed wins when a window has several. "
        "Default: every diagnosis of the policy's data-quality checks.",
    )
    min_types: int = Field(
        3,
        ge=2,
        le=1000,
        description="Doc types the same code must open incidents for, together, to be "
        "grouped. 3: two types failing together may be chance, three are a gateway-wide fault.",
    )
    within_s: int = Field(
        300,
        ge=0,
        le=86_400,
        description="How far apart (event time) the windows that opened them may be to count "
        "as together. 300 (five one-minute windows): types need different numbers of windows "
        "to open, and a gateway fault reaches them within minutes.",
    )
    wait_s: int = Field(
        10,
        ge=0,
        le=600,
        description="How long (wall clock) a data-quality incident waits for others before "
        "the decision, as Alertmanager's group_wait. 10: the drift job writes a minute's "
        "verdicts of every type within seconds; longer only delays the page.",
    )

    @field_validator("codes")
    @classmethod
    def _known_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if code not in QUALITY_CODES:
                raise ValueError(
                    f"{code!r} is not a data-quality code ({', '.join(QUALITY_CODES)})"
                )
        if len(set(value)) != len(value):
            raise ValueError("each code once")
        return value
