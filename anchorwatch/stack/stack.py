"""`anchorwatch stack up | down | status`: a real local Kafka of one or more nodes (and
optionally Flink)."""

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

from anchorwatch.settings import Section, ServiceSettings, TopicSettings
from anchorwatch.stack.flink import JOBMANAGER_CLASS, FlinkCluster
from anchorwatch.stack.jvm import fetch
from anchorwatch.stack.kafka import KafkaCluster, formatted_size
from anchorwatch.stack.processes import free_port, require_free_ports
from anchorwatch.stack.topics import ensure_topics, replication_for, topic_specs, wait_served

log = logging.getLogger(__name__)


class StackOptions(Section):
    state_dir: Path = Field(
        Path(".anchorwatch/stack"), description="Pids, logs, Kafka data and Flink state."
    )
    host: str = Field("127.0.0.1", description="Loopback address every service binds to.")
    kafka_port: int = Field(
        9092, ge=1, le=65535, description="Kafka client port (of node 1; node i adds 2(i-1))."
    )
    controller_port: int = Field(
        9093, ge=1, le=65535, description="KRaft controller port (of node 1; node i adds 2(i-1))."
    )
    brokers: int | None = Field(
        None,
        ge=1,
        le=9,
        description="Kafka nodes (combined broker and controller roles); from 3 on, topics get "
        "3 replicas with 2 in sync. Unset: as many as the state directory was formatted for, "
        "else 1.",
    )
    kafka_heap: str = Field("512m", pattern=r"^\d+[mg]$", description="Kafka JVM heap (-Xmx).")
    flink: bool = Field(False, description="Also start a Flink standalone session cluster.")
    flink_rest_port: int = Field(8081, ge=1, le=65535, description="Flink REST/web UI port.")
    flink_rpc_port: int = Field(6123, ge=1, le=65535, description="Flink JobManager RPC port.")
    flink_slots: int = Field(2, ge=1, le=64, description="Task slots of each TaskManager.")
    flink_taskmanagers: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Flink TaskManagers. Unset: as many as the last `stack up` of this state "
        "directory started, else 1.",
    )
    flink_jobmanager_memory: str = Field(
        "1024m", pattern=r"^\d+[mg]$", description="JobManager process memory."
    )
    flink_taskmanager_memory: str = Field(
        "1728m", pattern=r"^\d+[mg]$", description="Process memory of each TaskManager."
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
    detail: str = ""


class Stack:
    """The local stack of one state directory: a KRaft Kafka of one or more nodes and,
    optionally, a Flink session cluster. ``up`` starts whatever part is not running, so it
    also heals a stack that lost a broker or a TaskManager."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        o = settings.stack
        root = o.state_dir.resolve()
        self.kafka = KafkaCluster(
            state_dir=root,
            host=o.host,
            port=o.kafka_port,
            controller_port=o.controller_port,
            heap=o.kafka_heap,
            default_partitions=settings.topics.partitions,
            max_message_bytes=settings.topics.max_message_bytes,
            size=o.brokers or formatted_size(root) or 1,
        )
        self.flink = FlinkCluster(
            state_dir=root / "flink",
            host=o.host,
            rest_port=o.flink_rest_port,
            rpc_port=o.flink_rpc_port,
            slots=o.flink_slots,
            jobmanager_memory=o.flink_jobmanager_memory,
            taskmanager_memory=o.flink_taskmanager_memory,
            taskmanagers=o.flink_taskmanagers or _remembered(root / "flink" / _TASKMANAGERS) or 1,
        )

    @property
    def topics(self) -> TopicSettings:
        """The topic settings ``up`` creates topics with: replicated as the cluster allows
        unless a replication factor was set."""
        topics = self.settings.topics
        if topics.replication_factor != 1:
            return topics
        return topics.model_copy(update={"replication_factor": replication_for(self.kafka.size)[0]})

    def up(self, *, with_flink: bool | None = None) -> dict[str, object]:
        """Start what is not running yet (any broker, the JobManager, TaskManagers up to the
        configured count); returns what happened, with timings. Without ``with_flink``,
        Flink is started if the settings ask for it or part of it runs already."""
        o = self.settings.stack
        if with_flink is None:
            with_flink = o.flink or any(self.flink.pids().values())
        report: dict[str, object] = {}
        artifacts, fetched = fetch(self.settings.jvm.cache_dir)
        report["jvm_artifacts"] = "fetched" if fetched else "cached"
        started = time.monotonic()
        self.kafka.check_layout()
        down = [n for n in self.kafka.nodes if n.pid() is None]
        if down:
            require_free_ports(o.host, self.kafka.ports(down))
            names = self.kafka.start_missing(artifacts, timeout_s=o.startup_timeout_s)
            report["kafka"] = f"started {', '.join(names)} in {time.monotonic() - started:.1f}s"
        else:
            report["kafka"] = "already running"
        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        report["topics"] = ensure_topics(admin, self.topics)
        # Every node, not just the one that answered: a client may bootstrap from any.
        partitions = {spec.name: spec.partitions for spec in topic_specs(self.topics)}
        for node in self.kafka.nodes:
            node_admin = AdminClient({"bootstrap.servers": node.bootstrap, "log_level": 0})
            wait_served(node_admin, partitions, timeout_s=o.startup_timeout_s)
        if with_flink:
            t = time.monotonic()
            if not any(self.flink.pids().values()):
                require_free_ports(
                    o.host, {"Flink REST": o.flink_rest_port, "Flink RPC": o.flink_rpc_port}
                )
            done = self.flink.ensure(timeout_s=o.startup_timeout_s)
            _remember(self.flink.state_dir / _TASKMANAGERS, self.flink.taskmanagers)
            if done:
                what = ", ".join(f"{k} {v}" for k, v in done.items())
                report["flink"] = f"{what} in {time.monotonic() - t:.1f}s"
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
        rows = []
        for node in self.kafka.nodes:
            pid = node.pid()
            rows.append(
                ComponentStatus(
                    node.name,
                    pid is not None,
                    [pid] if pid else [],
                    node.bootstrap,
                    node.log_file,
                    f"node {node.node_id}",
                )
            )
        flink = self.flink.pids()
        rows.append(
            ComponentStatus(
                "flink-jobmanager",
                bool(flink[JOBMANAGER_CLASS]),
                flink[JOBMANAGER_CLASS],
                self.flink.rest_url,
                self.flink.log_dir,
            )
        )
        registered = self.flink.registered() if flink[JOBMANAGER_CLASS] else set()
        live = self.flink.task_managers()
        count = max(self.flink.taskmanagers, len(live))
        for i in range(count):
            tm = live[i] if i < len(live) else None
            name = f"flink-taskmanager-{i + 1}" if count > 1 else "flink-taskmanager"
            detail = ""
            if tm is not None:
                state = "registered" if tm.resource_id in registered else "not registered"
                detail = f"{tm.resource_id} {state}"
            rows.append(
                ComponentStatus(
                    name,
                    tm is not None,
                    [tm.pid] if tm else [],
                    self.flink.host,
                    self.flink.log_dir,
                    detail,
                )
            )
        orphans = self.flink.orphaned_workers()
        if orphans:
            rows.append(
                ComponentStatus(
                    "flink-orphaned-python-workers",
                    True,
                    orphans,
                    "",
                    self.flink.log_dir,
                    "left by a dead TaskManager; `stack up` or `stack down` stops them",
                )
            )
        return rows


_TASKMANAGERS = "taskmanagers"


def _remembered(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _remember(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


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
