"""The local stack against real processes: Kafka, topics, Flink, stopping without orphans."""

from __future__ import annotations

import os
import socket
import zipfile
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from anchorwatch.stack.flink import JOBMANAGER_CLASS, TASKMANAGER_CLASS
from anchorwatch.stack.jvm import fetch
from anchorwatch.stack.kafka import MAIN_CLASS, KafkaBroker, KafkaCluster, new_cluster_id
from anchorwatch.stack.processes import StackError, free_port, free_port_block, is_alive
from anchorwatch.stack.stack import Stack, StackSettings

pytestmark = pytest.mark.integration


def test_topics_exist_with_their_settings(stack: Stack) -> None:
    admin = AdminClient({"bootstrap.servers": stack.kafka.bootstrap})
    topics = stack.settings.topics
    metadata = admin.list_topics(timeout=10).topics
    assert len(metadata[topics.snapshots].partitions) == topics.partitions
    assert len(metadata[topics.baselines].partitions) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, topics.baselines)
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert config["cleanup.policy"].value == "compact"


def test_status_reports_what_runs(stack: Stack) -> None:
    status = {c.name: c for c in stack.status()}
    assert status["kafka"].running
    assert status["kafka"].address == stack.kafka.bootstrap
    assert status["flink-jobmanager"].running
    assert status["flink-taskmanager"].running
    overview = stack.flink.overview()
    assert overview is not None
    assert overview["slots-total"] == stack.settings.stack.flink_slots


def test_up_again_is_idempotent(stack: Stack) -> None:
    report = stack.up(with_flink=True)
    assert report["kafka"] == "already running"
    assert report["flink"] == "already running"
    topics = report["topics"]
    assert isinstance(topics, dict)
    assert set(topics.values()) == {"exists"}


def test_a_second_stack_on_a_busy_port_gets_a_clear_error(stack: Stack, tmp_path: Path) -> None:
    other = Stack(
        StackSettings.load(
            stack={
                "state_dir": tmp_path,
                "kafka_port": stack.settings.stack.kafka_port,
                "controller_port": free_port(),
            }
        )
    )
    with pytest.raises(StackError, match=f"Kafka port {stack.settings.stack.kafka_port}"):
        other.up(with_flink=False)
    assert other.kafka.pid() is None


@pytest.mark.slow
def test_down_stops_exactly_what_up_started(tmp_path: Path) -> None:
    settings = StackSettings.load(
        stack={
            "state_dir": tmp_path,
            "kafka_port": free_port(),
            "controller_port": free_port(),
            "flink_rest_port": free_port(),
            "flink_rpc_port": free_port(),
            "flink_slots": 1,
            "flink_taskmanager_memory": "1024m",
        }
    )
    s = Stack(settings)
    try:
        s.up(with_flink=True)
        pids = {c.name: c.pids for c in s.status()}
        assert all(pids.values()), pids
        # A restart of Kafka reuses the formatted storage (no second format).
        meta = (tmp_path / "kafka" / "data" / "meta.properties").read_text()
    finally:
        assert s.down() == {"flink": "stopped", "kafka": "stopped"}
    for name, marker in (
        ("kafka", "kafka.Kafka"),
        ("flink-jobmanager", JOBMANAGER_CLASS),
        ("flink-taskmanager", TASKMANAGER_CLASS),
    ):
        for pid in pids[name]:
            assert not is_alive(pid, marker), f"{name} pid {pid} survived down"
    assert not any(c.running for c in s.status())
    assert s.down() == {"flink": "not running", "kafka": "not running"}
    try:
        s.up(with_flink=False)
        assert (tmp_path / "kafka" / "data" / "meta.properties").read_text() == meta
    finally:
        s.down()


def test_warm_jvm_cache_needs_no_maven(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # The session stack already filled the cache; without mvn on PATH (so no network
    # fetch is even possible) a second fetch must still succeed from the cache.
    monkeypatch.setenv("PATH", os.path.dirname(os.__file__))
    artifacts, fetched = fetch(stack.settings.jvm.cache_dir)
    assert not fetched
    with zipfile.ZipFile(artifacts.flink_jobs_jar()) as jar:
        factories = jar.read("META-INF/services/org.apache.flink.table.factories.Factory")
    # One jar with the Kafka connector's factories and the project's format.
    assert b"dev.anchorwatch.flink.AnchorwatchJsonFormatFactory" in factories
    assert b"KafkaDynamicTableFactory" in factories
    assert "kafka_2.13-4.2.0.jar" in artifacts.kafka_classpath()


def test_a_cluster_id_that_starts_with_a_dash_formats_and_starts(
    stack: Stack, tmp_path: Path
) -> None:
    """An id of URL-safe base64 starts with "-" once in 64 draws: the storage tool must take
    it as the id, not as an option (it once failed "expected one argument")."""
    artifacts, _ = fetch(stack.settings.jvm.cache_dir)
    broker = KafkaBroker(tmp_path, "127.0.0.1", free_port(), free_port(), "256m", 1)
    pid = broker.launch(artifacts, "-XjKJ2_PQmuCvHEpESUk5A")
    try:
        broker.wait_ready(pid, timeout_s=60)
        meta = (tmp_path / "data" / "meta.properties").read_text()
        assert "cluster.id=-XjKJ2_PQmuCvHEpESUk5A" in meta.splitlines()
    finally:
        broker.stop()


def test_a_node_that_exits_during_start_says_how_and_why(stack: Stack, tmp_path: Path) -> None:
    """Kafka writes why it stopped to its own log, not to its stdout: the error quotes that
    log's errors and the process's exit status."""
    artifacts, _ = fetch(stack.settings.jvm.cache_dir)
    with socket.socket() as holder:
        port = free_port()
        holder.bind(("127.0.0.1", port))
        holder.listen()
        broker = KafkaBroker(tmp_path, "127.0.0.1", port, free_port(), "256m", 1)
        pid = broker.launch(artifacts)
        try:
            with pytest.raises(StackError) as raised:
                broker.wait_ready(pid, timeout_s=60)
        finally:
            broker.stop()
    message = str(raised.value)
    assert "Kafka (kafka) exited during start (exit status 1)" in message, message
    assert "Address already in use" in message, message


def test_a_node_that_never_answers_says_so_and_quotes_its_log(stack: Stack, tmp_path: Path) -> None:
    """One node of a three-node quorum started alone runs but never becomes a broker."""
    artifacts, _ = fetch(stack.settings.jvm.cache_dir)
    base = free_port_block(6)
    lone = KafkaCluster(tmp_path, "127.0.0.1", base, base + 1, "256m", 1, size=3).node(1)
    pid = lone.launch(artifacts, new_cluster_id())
    try:
        with pytest.raises(StackError) as raised:
            lone.wait_ready(pid, timeout_s=10)
        assert is_alive(pid, MAIN_CLASS)
    finally:
        lone.stop()
    message = str(raised.value)
    assert f"Kafka did not answer on {lone.bootstrap} within 10s" in message, message
    assert f"last errors in {lone.log_file.parent / 'server.log'}:" in message, message
