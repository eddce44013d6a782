"""`anchorwatch stack up | down | status`: a real local Kafka (and optionally Flink)."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from pydantic import Field

from anchorwatch.settings import Section, ServiceSettings
from anchorwatch.stack.flink import JOBMANAGER_CLASS, TASKMANAGER_CLASS, FlinkCluster
from anchorwatch.stack.jvm import fetch
from anchorwatch.stack.kafka import KafkaBroker
from anchorwatch.stack.processes import free_port, require_free_ports
from anchorwatch.stack.topics import ensure_topics

log = logging.getLogger(__name__)


class StackOptions(Section):
    state_dir: Path = Field(
        Path(".anchorwatch/stack"), description="Pids, logs, Kafka data and Flink state."
    )
    host: str = Field("127.0.0.1", description="Loopback address every service binds to.")
    kafka_port: int = Field(9092, ge=1, le=65535, description="Kafka client listener port.")
    controller_port: int = Field(9093, ge=1, le=65535, description="KRaft controller port.")
    kafka_heap: str = Field("512m", pattern=r"^\d+[mg]$", description="Kafka JVM heap (-Xmx).")
    flink: bool = Field(False, description="Also start a Flink standalone session cluster.")
    flink_rest_port: int = Field(8081, ge=1, le=65535, description="Flink REST/web UI port.")
    flink_rpc_port: int = Field(6123, ge=1, le=65535, description="Flink JobManager RPC port.")
    flink_slots: int = Field(2, ge=1, le=64, description="Task slots of the TaskManager.")
    flink_jobmanager_memory: str = Field(
        "1024m", pattern=r"^\d+[mg]$", description="JobManager process memory."
    )
    flink_taskmanager_memory: str = Field(
        "1728m", pattern=r"^\d+[mg]$", description="TaskManager process memory."
    )
    startup_timeout_s: float = Field(120, gt=0, description="How long to wait for readiness.")


class StackSettings(ServiceSettings):
    stack: StackOptions = Field(default_factory=StackOptions)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    running: bool
    pids: list[int]
    address: str
    log: Path


class Stack:
    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        o = settings.stack
        root = o.state_dir.resolve()
        self.kafka = KafkaBroker(
            state_dir=root / "kafka",
            host=o.host,
            port=o.kafka_port,
            controller_port=o.controller_port,
            heap=o.kafka_heap,
            default_partitions=settings.topics.partitions,
            max_message_bytes=settings.topics.max_message_bytes,
        )
        self.flink = FlinkCluster(
            state_dir=root / "flink",
            host=o.host,
            rest_port=o.flink_rest_port,
            rpc_port=o.flink_rpc_port,
            slots=o.flink_slots,
            jobmanager_memory=o.flink_jobmanager_memory,
            taskmanager_memory=o.flink_taskmanager_memory,
        )

    def up(self, *, with_flink: bool | None = None) -> dict[str, object]:
        """Start what is not running yet; returns what happened, with timings."""
        o = self.settings.stack
        with_flink = o.flink if with_flink is None else with_flink
        report: dict[str, object] = {}
        artifacts, fetched = fetch(self.settings.jvm.cache_dir)
        report["jvm_artifacts"] = "fetched" if fetched else "cached"
        started = time.monotonic()
        if self.kafka.pid() is None:
            require_free_ports(
                o.host, {"Kafka": o.kafka_port, "KRaft controller": o.controller_port}
            )
            self.kafka.start(artifacts, timeout_s=o.startup_timeout_s)
            report["kafka"] = f"started in {time.monotonic() - started:.1f}s"
        else:
            report["kafka"] = "already running"
        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        report["topics"] = ensure_topics(admin, self.settings.topics)
        if with_flink:
            t = time.monotonic()
            if not any(self.flink.pids().values()):
                require_free_ports(
                    o.host, {"Flink REST": o.flink_rest_port, "Flink RPC": o.flink_rpc_port}
                )
                self.flink.start(timeout_s=o.startup_timeout_s)
                report["flink"] = f"started in {time.monotonic() - t:.1f}s"
            else:
                report["flink"] = "already running"
        report["ready_after_s"] = round(time.monotonic() - started, 1)
        return report

    def down(self) -> dict[str, str]:
        # Flink first: its jobs may still be talking to Kafka.
        return {
            "flink": "stopped" if self.flink.stop() else "not running",
            "kafka": "stopped" if self.kafka.stop() else "not running",
        }

    def status(self) -> list[ComponentStatus]:
        kafka_pid = self.kafka.pid()
        flink = self.flink.pids()
        return [
            ComponentStatus(
                "kafka",
                kafka_pid is not None,
                [kafka_pid] if kafka_pid else [],
                self.kafka.bootstrap,
                self.kafka.log_file,
            ),
            ComponentStatus(
                "flink-jobmanager",
                bool(flink[JOBMANAGER_CLASS]),
                flink[JOBMANAGER_CLASS],
                self.flink.rest_url,
                self.flink.log_dir,
            ),
            ComponentStatus(
                "flink-taskmanager",
                bool(flink[TASKMANAGER_CLASS]),
                flink[TASKMANAGER_CLASS],
                self.flink.host,
                self.flink.log_dir,
            ),
        ]


@contextmanager
def private_kafka(bootstrap: str | None = None, *, heap: str = "1g") -> Iterator[str]:
    """``bootstrap`` if given; otherwise a Kafka of its own on free ports in a temporary
    directory, stopped on exit (for benchmarks that must not touch a running stack)."""
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="anchorwatch-bench-") as tmp:
        stack = Stack(StackSettings.load(stack={
            "state_dir": Path(tmp), "kafka_port": free_port(), "controller_port": free_port(),
            "kafka_heap": heap}))  # fmt: skip
        try:
            stack.up(with_flink=False)
            yield stack.kafka.bootstrap
        finally:
            stack.down()
