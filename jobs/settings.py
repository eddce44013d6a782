"""Settings of the Flink jobs: the one object every job reads its options from."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from anchorwatch.policy.config import PolicyConfig
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
    checkpoint_interval_s: int = Field(
        30, ge=1, description="Checkpoint interval (also how often consumer offsets commit)."
    )
    checkpoint_dir: str | None = Field(
        None,
        description="Checkpoint storage URI (file://, s3://...); unset: the cluster's default.",
    )
    state_backend: Literal["hashmap", "rocksdb"] | None = Field(
        None,
        description="Where the job keeps its state (the open windows with their event ids): "
        "'hashmap' on the JVM heap, the fastest; 'rocksdb' in the TaskManager's managed "
        "memory and local disk, with incremental checkpoints (a window counted since the "
        "last checkpoint is on the heap, and is written whole at the next). Unset: the "
        "cluster's configuration (Flink's default: hashmap).",
    )
    deduplicate: bool = Field(
        True,
        description="Count each event_id at most once in its window (a retried batch cannot "
        "skew it) and in its late-tally interval: the job keeps a 16-byte hash of each id "
        "while the window is open.",
    )
    late_report_s: int = Field(
        10, ge=1, description="How often late events are tallied per doc type (processing time)."
    )
    quality_zero_anchor_share: float = Field(
        0.2, ge=0, le=1, description="Diagnose 'no anchors' above this share of requests."
    )
    quality_disabled_share: float = Field(
        0.2, ge=0, le=1, description="Diagnose 'snapshot disabled' above this share of requests."
    )
    quality_resample_share: float = Field(
        0.3, ge=0, le=1, description="Diagnose a 're-sample' burst above this share of anchors."
    )
    quality_mean_kl_divergence: float = Field(
        1.0, ge=0, description="Diagnose a kl_divergence spike above this window mean."
    )
    local_heap_mb: int = Field(
        2048,
        ge=256,
        le=262_144,
        description="Java heap (-Xmx) of the embedded mini-cluster `job run` and the benchmark "
        "start: its operators' state (the open windows with their event ids) lives here.",
    )
    local_direct_mb: int = Field(
        512,
        ge=128,
        le=65_536,
        description="Direct memory (-XX:MaxDirectMemorySize) of the embedded mini-cluster: "
        "network buffers and the Kafka clients' fetch buffers.",
    )
    local_metaspace_mb: int = Field(
        384,
        ge=128,
        le=8_192,
        description="Metaspace (-XX:MaxMetaspaceSize) of the embedded mini-cluster: classes "
        "of the planner and of every job run in the process.",
    )
    python_executable: Path | None = Field(
        None,
        description="Python the Flink workers run the per-window code with; unset: this one.",
    )

    def local_jvm_args(self) -> list[str]:
        """JVM options that bound the embedded mini-cluster's memory (heap, direct memory,
        metaspace); without them the JVM sizes its heap from the machine's RAM and keeps
        what it grew to."""
        return [
            f"-Xmx{self.local_heap_mb}m",
            f"-Xms{min(self.local_heap_mb, 512)}m",
            f"-XX:MaxDirectMemorySize={self.local_direct_mb}m",
            f"-XX:MaxMetaspaceSize={self.local_metaspace_mb}m",
        ]


class JobSettings(ServiceSettings):
    job: JobOptions = Field(default_factory=JobOptions)
    # The static rule for types without a fitted baseline is the policy's fallback, so the
    # job, the backtest and alerting fall back to the same figures.
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
