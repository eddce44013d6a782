"""Settings of the baseline fit and the backtest: the job's settings plus the policy.

The fit reads the job's ``[job]`` section for the window size (a baseline must describe the
same windows the drift job judges) and the ``[policy]`` section for how thresholds follow
from a type's history. ``[baseline]`` holds what only the fit needs.
"""

from __future__ import annotations

from pydantic import Field

from anchorwatch.jobs.settings import JobSettings
from anchorwatch.settings import Section


class BaselineOptions(Section):
    group_id: str = Field(
        "anchorwatch-baseline-fit",
        min_length=1,
        description="Kafka consumer group of the fit's bounded read of the snapshots topic.",
    )
    publish_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="How long the fit waits for Kafka to acknowledge."
    )


class BaselineSettings(JobSettings):
    baseline: BaselineOptions = Field(default_factory=BaselineOptions)
