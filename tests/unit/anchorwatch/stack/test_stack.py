from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from anchorwatch.settings import TopicSettings
from anchorwatch.stack import kafka as kafka_module
from anchorwatch.stack import processes
from anchorwatch.stack.flink import FlinkCluster
from anchorwatch.stack.kafka import KafkaBroker
from anchorwatch.stack.processes import (
    StackError,
    exit_status,
    free_port,
    free_port_block,
    is_alive,
    port_in_use,
    require_free_ports,
    runs,
    start_daemon,
    wait_until,
)
from anchorwatch.stack.topics import topic_specs


def test_busy_port_is_a_clear_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(StackError, match=f"Kafka port {port} on 127.0.0.1 already in use"):
            require_free_ports("127.0.0.1", {"Kafka": port, "other": free_port()})


def test_broker_config_is_single_node_kraft_on_loopback(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path, "127.0.0.1", 19092, 19093, "512m", 3)
    props = dict(line.split("=", 1) for line in broker.server_properties().splitlines() if line)
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert int(props["transaction.max.timeout.ms"]) >= 3_600_000


def test_flink_config_binds_loopback_and_keeps_the_package_jvm_options(tmp_path: Path) -> None:
    cluster = FlinkCluster(tmp_path, "127.0.0.1", 18081, 16123, 2, "1024m", "1536m")
    conf = cluster.config()
    assert conf["rest.port"] == 18081
    assert conf["jobmanager.rpc.port"] == 16123
    assert conf["taskmanager.memory.process.size"] == "1536m"
    assert conf["env.pid.dir"] == str(tmp_path / "pids")
    # The package's file nests these sections; leaving them would set keys twice.
    assert "jobmanager" not in conf
    assert "taskmanager" not in conf
    assert "add-opens" in str(conf["env"])


def test_topic_settings() -> None:
    specs = {s.name: s for s in topic_specs(TopicSettings(partitions=6))}
    baselines = specs["anchorwatch.baselines"]
    assert baselines.config["cleanup.policy"] == "compact"
    assert baselines.partitions == 1
    assert specs["anchorwatch.snapshots"].partitions == 6
    assert len(specs) == 6


def test_pid_liveness_checks_the_command_line() -> None:
    import os

    assert is_alive(os.getpid(), "python")
    assert not is_alive(os.getpid(), "kafka.Kafka")  # a recycled pid is not ours


def test_a_process_just_started_runs_until_it_exits() -> None:

    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert runs(proc.pid)
    finally:
        proc.kill()
    # Exited but not reaped yet (a zombie), then reaped: neither runs.
    deadline = time.monotonic() + 10
    while runs(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runs(proc.pid)
    proc.wait()
    assert not runs(proc.pid)


def test_a_new_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 leads with the six bits 111110, "-" in URL-safe base64: that draw is thrown back.
    draws = iter([uuid.UUID(bytes=b"\xf8" + b"\x01" * 15), uuid.UUID(bytes=b"\x07" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka_module.new_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(b"\x07" * 16).decode().rstrip("=")
    assert len(cluster_id) == 22


def test_free_ports_lie_outside_the_range_outgoing_connections_take_theirs_from() -> None:
    low, high = processes._ephemeral_ports()
    for count in (1, 8):
        for _ in range(20):
            base = free_port_block(count)
            block = range(base, base + count)
            assert all(not low <= port <= high for port in block), (base, low, high)
            assert not any(port_in_use("127.0.0.1", port) for port in block)


def test_a_busy_port_inside_a_block_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        # The first two draws give blocks holding the busy port; later ones are past it.
        draws = iter([busy - 1, busy, *range(busy + 1, busy + 100)])
        monkeypatch.setattr(random, "randint", lambda _a, _b: next(draws))
        monkeypatch.setattr(processes, "_ephemeral_ports", lambda: (busy + 5000, busy + 6000))
        monkeypatch.setattr(processes, "_LOWEST_PRIVATE_PORT", busy - 3000)
        assert free_port_block(2) > busy


def test_exit_status_says_how_a_started_daemon_ended(tmp_path: Path) -> None:
    exited = start_daemon(["sh", "-c", "exit 3"], log_file=tmp_path / "a.log",
                          pid_file=tmp_path / "a.pid")  # fmt: skip
    # Exited before the next daemon starts: the next Popen must not reap it behind our back.
    assert wait_until(lambda: not runs(exited), timeout_s=10)
    killed = start_daemon(["sleep", "30"], log_file=tmp_path / "b.log", pid_file=tmp_path / "b.pid")
    subprocess.run(["true"], check=True)  # another Popen elsewhere in the process, likewise
    assert exit_status(killed, timeout_s=0.2) == "still running"
    os.kill(killed, signal.SIGTERM)
    assert exit_status(exited) == "exit status 3"
    assert exit_status(killed) == "killed by SIGTERM"
    assert exit_status(killed) == "exited"  # reported once: the pid may be recycled after


def test_a_port_is_handed_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing holds a port between its choice and its server's bind: a second draw of the
    # same port (still free) must give another. The pair is taken from a fixed private span,
    # well inside 1..65535, so the draw after it always names a real port.
    first = next(
        port
        for port in range(20000, 30000, 7)
        if port not in processes._handed_out
        and port + 1 not in processes._handed_out
        and not processes.port_in_use("127.0.0.1", port)
        and not processes.port_in_use("127.0.0.1", port + 1)
    )
    draws = iter([first, first, first + 1])
    monkeypatch.setattr(random, "randint", lambda _a, _b: next(draws))
    monkeypatch.setattr(random, "choice", lambda spans: spans[0])
    monkeypatch.setattr(processes, "_ephemeral_ports", lambda: (first + 5000, first + 6000))
    monkeypatch.setattr(processes, "_LOWEST_PRIVATE_PORT", first - 3000)
    assert free_port() == first
    assert free_port() == first + 1
