"""A single-node KRaft Kafka broker on loopback, run from the pinned jars."""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from anchorwatch.stack.jvm import JvmArtifacts
from anchorwatch.stack.processes import (
    StackError,
    is_alive,
    read_pid,
    start_daemon,
    stop_pid,
    tail,
    wait_until,
)

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
    state_dir: Path  # <stack state>/kafka
    host: str
    port: int
    controller_port: int
    heap: str
    default_partitions: int
    max_message_bytes: int = 16 * 1024 * 1024  # topics.max_message_bytes

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / "kafka.out"

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    def pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        return pid if pid is not None and is_alive(pid, MAIN_CLASS) else None

    def server_properties(self) -> str:
        h = self.host
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"{h}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{h}:{self.port},CONTROLLER://{h}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{h}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.default_partitions),
            # One node: internal topics cannot be replicated.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Topics are created on purpose, with their settings, by `stack up`.
            "auto.create.topics.enable": "false",
            # Flink's exactly-once Kafka sink defaults to a 1 h transaction timeout, above
            # the broker's 15 min default; allow it rather than fail at job start.
            "transaction.max.timeout.ms": "3600000",
            # The largest record batch: topics get the same max.message.bytes explicitly;
            # this covers topics created without it.
            "message.max.bytes": str(self.max_message_bytes),
        }
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

    def start(self, artifacts: JvmArtifacts, *, timeout_s: float) -> int:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "server.properties"
        config.write_text(self.server_properties())
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)
        if not (self.data_dir / "meta.properties").exists():
            self._format(artifacts, config)
        pid = start_daemon(
            [*self._jvm_args(artifacts, self.heap), MAIN_CLASS, str(config)],
            log_file=self.log_file,
            pid_file=self.pid_file,
        )
        log.info("kafka starting", extra={"pid": pid, "bootstrap": self.bootstrap})
        self.wait_ready(pid, timeout_s=timeout_s)
        return pid

    def _format(self, artifacts: JvmArtifacts, config: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        cmd = [
            *self._jvm_args(artifacts, "256m"),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(config),
            "--standalone",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def wait_ready(self, pid: int, *, timeout_s: float) -> None:
        """Block until the broker answers a metadata request (not a sleep)."""
        # Quiet: connection refusals are expected until the broker is up.
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

        def answers() -> bool:
            if not is_alive(pid, MAIN_CLASS):
                raise StackError(
                    f"Kafka exited during start; last lines of {self.log_file}:\n"
                    f"{tail(self.log_file)}"
                )
            try:
                metadata = admin.list_topics(timeout=2)
            except Exception:  # KafkaException while the broker is still coming up
                return False
            return bool(metadata.brokers)

        if not wait_until(answers, timeout_s=timeout_s, interval_s=0.3):
            raise StackError(
                f"Kafka did not answer on {self.bootstrap} within {timeout_s:.0f}s; "
                f"see {self.log_file}:\n{tail(self.log_file)}"
            )

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
