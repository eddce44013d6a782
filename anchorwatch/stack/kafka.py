"""KRaft Kafka on loopback, run from the pinned jars: one node by default, or a cluster.

A cluster's nodes each take both roles, broker and controller ("combined" mode), and form a
static quorum of all of them (``controller.quorum.voters``). Combined rather than split
roles: three JVMs instead of six on a two-core machine, and any one node can die (kill -9,
SIGSTOP) while the other two keep both a controller majority and an in-sync replica set of
two, so producers with acks=all go on (topics get replication factor 3 and
min.insync.replicas=2). Killing a node kills a broker and a voter at once, the harder case
for the fault trials. Production separates the roles so a busy broker cannot starve the
quorum; locally the isolation is not what is under test.

Node ``i`` (1-based) listens on ``port + 2 * (i - 1)`` for clients and on
``controller_port + 2 * (i - 1)`` for the quorum (defaults: 9092/9093, 9094/9095, 9096/9097)
and keeps its state in ``<state>/kafka-<i>``; a single node keeps the layout it always had
(``<state>/kafka``, a dynamic quorum of itself).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from anchorwatch.stack.jvm import JvmArtifacts
from anchorwatch.stack.processes import (
    StackError,
    exit_status,
    is_alive,
    read_pid,
    runs,
    start_daemon,
    stop_pid,
    tail,
    wait_until,
)
from anchorwatch.stack.topics import replication_for

log = logging.getLogger(__name__)

MAIN_CLASS = "kafka.Kafka"

_LOG4J2 = """\
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = SizeBasedTriggeringPolicy
appender.file.policies.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass(frozen=True)
class KafkaBroker:
    """One KRaft node. ``voters`` lists (node id, controller port) of every node of a
    cluster; empty for the single node, which is a dynamic quorum of itself."""

    state_dir: Path  # <stack state>/kafka, or <stack state>/kafka-<node id> in a cluster
    host: str
    port: int
    controller_port: int
    heap: str
    default_partitions: int
    max_message_bytes: int = 16 * 1024 * 1024  # topics.max_message_bytes
    node_id: int = 1
    voters: tuple[tuple[int, int], ...] = field(default=())

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}" if self.voters else "kafka"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "kafka.out"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()

    def pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        return pid if pid is not None and is_alive(pid, MAIN_CLASS) else None

    def server_properties(self) -> str:
        h = self.host
        brokers = max(len(self.voters), 1)
        factor, min_isr = replication_for(brokers)
        if self.voters:
            quorum = {"controller.quorum.voters": ",".join(f"{n}@{h}:{p}" for n, p in self.voters)}
        else:
            quorum = {"controller.quorum.bootstrap.servers": f"{h}:{self.controller_port}"}
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            **quorum,
            "listeners": f"PLAINTEXT://{h}:{self.port},CONTROLLER://{h}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{h}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.default_partitions),
            # Internal topics as replicated as the data topics (one node: not at all).
            "default.replication.factor": str(factor),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(factor),
            "transaction.state.log.replication.factor": str(factor),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(factor),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created on purpose, with their settings, by `stack up`.
            "auto.create.topics.enable": "false",
            # Flink's exactly-once Kafka sink defaults to a 1 h transaction timeout, above
            # the broker's 15 min default; allow it rather than fail at job start.
            "transaction.max.timeout.ms": "3600000",
            # The largest record batch: topics get the same max.message.bytes explicitly;
            # this covers topics created without it.
            "message.max.bytes": str(self.max_message_bytes),
            # After a kill -9 the logs of every partition are recovered before the node
            # serves; one thread per core instead of one.
            "num.recovery.threads.per.data.dir": "2",
        }
        if self.voters:
            # A dead node keeps its partitions' leadership (and, acks=all, holds back every
            # write to them) until the controller fences it: 9 s by default. 6 s still
            # leaves a loaded two-core machine room for GC and scheduling pauses.
            props["broker.session.timeout.ms"] = str(BROKER_SESSION_TIMEOUT_MS)
            props["broker.heartbeat.interval.ms"] = str(BROKER_SESSION_TIMEOUT_MS // 4)
            # `stack down` stops every node at once: the last one's controlled shutdown
            # waits for a quorum that is gone, and was killed after a minute with its logs
            # unclean. Without it all three stop cleanly in about 7 s; a node stopped alone
            # hands over its partitions when fenced (above), as a killed one does.
            props["controlled.shutdown.enable"] = "false"
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise StackError("`java` (17 or newer) is not on PATH; Kafka 4 needs it")
        return java

    def _jvm_args(self, artifacts: JvmArtifacts, heap: str) -> list[str]:
        return [
            self._java(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.log_file.parent}",
            "-cp",
            artifacts.kafka_classpath(),
        ]

    def launch(self, artifacts: JvmArtifacts, cluster_id: str | None = None) -> int:
        """Start the node without waiting for it (a cluster's nodes need each other to
        become ready); formats its storage on first start."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "server.properties"
        config.write_text(self.server_properties())
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)
        if not self.formatted:
            self._format(artifacts, config, cluster_id or new_cluster_id())
        pid = start_daemon(
            [*self._jvm_args(artifacts, self.heap), MAIN_CLASS, str(config)],
            log_file=self.log_file,
            pid_file=self.pid_file,
        )
        log.info("kafka starting", extra={"pid": pid, "bootstrap": self.bootstrap})
        return pid

    def start(self, artifacts: JvmArtifacts, *, timeout_s: float) -> int:
        pid = self.launch(artifacts)
        self.wait_ready(pid, timeout_s=timeout_s)
        return pid

    def _format(self, artifacts: JvmArtifacts, config: Path, cluster_id: str) -> None:
        # A static quorum (voters in the config) is formatted as it is; a single node
        # bootstraps a dynamic quorum of itself.
        quorum = [] if self.voters else ["--standalone"]
        cmd = [
            *self._jvm_args(artifacts, "256m"),
            "kafka.tools.StorageTool",
            "format",
            # One argument, so that no id is read as an option (ids made before
            # new_cluster_id avoided a leading "-" may have one).
            f"--cluster-id={cluster_id}",
            "-c",
            str(config),
            *quorum,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def wait_ready(self, pid: int, *, timeout_s: float) -> None:
        """Block until this node is a registered, unfenced broker: it answers a metadata
        request and lists itself (not a sleep)."""
        # Quiet: connection refusals are expected until the broker is up.
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

        def answers() -> bool:
            if not runs(pid):
                raise StackError(
                    f"Kafka ({self.name}) exited during start ({exit_status(pid)}); last lines "
                    f"of {self.log_file}:\n{tail(self.log_file)}\n{self._errors()}"
                )
            try:
                metadata = admin.list_topics(timeout=2)
            except Exception:  # KafkaException while the broker is still coming up
                return False
            return self.node_id in metadata.brokers

        if not wait_until(answers, timeout_s=timeout_s, interval_s=0.3):
            raise StackError(
                f"Kafka did not answer on {self.bootstrap} within {timeout_s:.0f}s; "
                f"see {self.log_file}:\n{tail(self.log_file)}\n{self._errors()}"
            )

    def _errors(self) -> str:
        """The last errors of the node's own log, where Kafka writes why it stopped (its
        stdout holds the JVM's and log4j's own messages only)."""
        server_log = self.log_file.parent / "server.log"
        try:
            lines = server_log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {server_log})"
        # An error's cause ("Caused by: java.net.BindException: ...") is in its stack trace.
        errors = [
            line
            for line in lines
            if " ERROR " in line or " FATAL " in line or line.startswith("Caused by:")
        ]
        return f"last errors in {server_log}:\n" + "\n".join(errors[-8:] or ["(none)"])

    def stop(self) -> bool:
        """Stop the broker if we started it; True if something was running."""
        pid = read_pid(self.pid_file)
        if pid is None:
            return False
        running = is_alive(pid, MAIN_CLASS)
        if running:
            # SIGTERM makes Kafka shut down cleanly (no log recovery on the next start).
            stop_pid(pid, MAIN_CLASS, grace_s=60)
        self.pid_file.unlink(missing_ok=True)
        return running

    def send_signal(self, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to the running node (a fault: SIGKILL, SIGSTOP, SIGCONT); its pid."""
        pid = self.pid()
        if pid is None:
            raise StackError(f"{self.name} is not running")
        os.kill(pid, sig)
        return pid


def new_cluster_id() -> str:
    """A random cluster id as Kafka's own ``Uuid.randomUuid`` makes one: URL-safe base64 of
    16 random bytes, drawn again when it starts with "-" (a command line would take it for
    an option: one draw in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


#: How long a dead node of a cluster keeps its partitions before the controller fences it.
BROKER_SESSION_TIMEOUT_MS = 6000


@dataclass(frozen=True)
class KafkaCluster:
    """``size`` KRaft nodes (one by default) and what the stack does with all of them."""

    state_dir: Path  # the stack's state directory
    host: str
    port: int  # node 1's; node i adds 2 * (i - 1)
    controller_port: int
    heap: str
    default_partitions: int
    max_message_bytes: int = 16 * 1024 * 1024
    size: int = 1

    @property
    def nodes(self) -> list[KafkaBroker]:
        if self.size == 1:
            return [self._node(1, self.state_dir / "kafka", ())]
        voters = tuple((i, self.controller_port + 2 * (i - 1)) for i in range(1, self.size + 1))
        return [self._node(i, self.state_dir / f"kafka-{i}", voters) for i, _ in voters]

    def _node(self, node_id: int, state: Path, voters: tuple[tuple[int, int], ...]) -> KafkaBroker:
        step = 2 * (node_id - 1)
        return KafkaBroker(state, self.host, self.port + step, self.controller_port + step,
                           self.heap, self.default_partitions, self.max_message_bytes,
                           node_id, voters)  # fmt: skip

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def ports(self, nodes: list[KafkaBroker]) -> dict[str, int]:
        """The ports of ``nodes``, named for an error message."""
        out = {}
        for n in nodes:
            suffix = f" ({n.name})" if self.size > 1 else ""
            out[f"Kafka{suffix}"] = n.port
            out[f"KRaft controller{suffix}"] = n.controller_port
        return out

    def pid(self) -> int | None:
        """A live node's pid (the first), or None when no node runs."""
        return next((p for p in (n.pid() for n in self.nodes) if p is not None), None)

    def pids(self) -> dict[int, int | None]:
        return {n.node_id: n.pid() for n in self.nodes}

    def leader_of(self, topic: str, partition: int = 0, *, timeout_s: float = 10) -> int:
        """The node id leading ``topic``'s ``partition`` (-1 while it has no leader)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        metadata = admin.list_topics(topic, timeout=timeout_s)
        return int(metadata.topics[topic].partitions[partition].leader)

    def under_replicated(self, *, timeout_s: float = 10) -> list[tuple[str, int]]:
        """(topic, partition) of every partition whose in-sync replicas are fewer than its
        replicas: after a node comes back, its copies catch up before this is empty."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        metadata = admin.list_topics(timeout=timeout_s)
        return sorted(
            (name, p.id)
            for name, t in metadata.topics.items()
            for p in t.partitions.values()
            if len(p.isrs) < len(p.replicas)
        )

    def wait_in_sync(self, *, timeout_s: float = 120) -> None:
        """Block until no partition is under-replicated (every copy caught up)."""

        def in_sync() -> bool:
            try:
                return not self.under_replicated()
            except Exception:  # KafkaException while a node is still coming up
                return False

        if not wait_until(in_sync, timeout_s=timeout_s, interval_s=0.5):
            raise StackError(f"partitions still under-replicated: {self.under_replicated()}")

    def check_layout(self) -> None:
        """Refuse to start a cluster of another size over formatted storage: the quorum's
        voters are written into it."""
        found = formatted_size(self.state_dir)
        if found is not None and found != self.size:
            raise StackError(
                f"{self.state_dir} holds a {found}-node Kafka; start it with --brokers {found}, "
                "or `anchorwatch stack down` and use another --state-dir (or delete it) for "
                f"{self.size} node(s)"
            )

    def start_missing(self, artifacts: JvmArtifacts, *, timeout_s: float) -> list[str]:
        """Start every node that is not running, then wait until each is a registered
        broker; returns the names of the nodes started."""
        self.check_layout()
        nodes = [n for n in self.nodes if n.pid() is None]
        if not nodes:
            return []
        # Every node of a new cluster is formatted with one id.
        cluster_id = self._cluster_id()
        launched = [(n, n.launch(artifacts, cluster_id)) for n in nodes]
        deadline = time.monotonic() + timeout_s
        for n, pid in launched:
            n.wait_ready(pid, timeout_s=max(deadline - time.monotonic(), 1.0))
        return [n.name for n, _ in launched]

    def _cluster_id(self) -> str:
        for n in self.nodes:
            meta = n.data_dir / "meta.properties"
            if meta.exists():
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        return new_cluster_id()

    def stop(self) -> bool:
        """Stop every node (all at once: a node waits for its quorum to shut down cleanly);
        True if any was running."""
        stopped = False
        for n in self.nodes:
            pid = n.pid()
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        for n in self.nodes:
            stopped = n.stop() or stopped
        return stopped


def formatted_size(state_dir: Path) -> int | None:
    """How many nodes the Kafka storage under ``state_dir`` was formatted for (None: none)."""
    if (state_dir / "kafka" / "data" / "meta.properties").exists():
        return 1
    for node in sorted(state_dir.glob("kafka-*/data/meta.properties")):
        config = node.parent.parent / "server.properties"
        for line in config.read_text().splitlines() if config.exists() else []:
            if line.startswith("controller.quorum.voters="):
                return len(line.split("=", 1)[1].split(","))
    return None
