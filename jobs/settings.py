"""Settings of the Flink jobs: the one object every job reads its options from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from anchorwatch.settings import Section, ServiceSettings


class JobOptions(Section):
    window_size_s: int = Field(60, ge=1, le=86_400, description="Tumbling window size.")
    watermark_delay_ms: int = Field(
        10_000, ge=0, le=3_600_000, description="Allowed out-of-orderness of event time."
    )
    idle_timeout_s: int = Field(
        30, ge=1, description="A partition silent this long no longer holds back the watermark."
    )
    parallelism: int = Field(1, ge=1, le=1024, description="Default operator parallelism.")
    group_id: str = Field("anchorwatch-drift", min_length=1, description="Kafka consumer group.")
    startup_mode: Literal["earliest-offset", "latest-offset", "group-offsets"] = Field(
        "group-offsets", description="Where a job without state starts reading the snapshots."
    )


class JobSettings(ServiceSettings):
    job: JobOptions = Field(default_factory=JobOptions)
