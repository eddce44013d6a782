"""The multi-node parts of the local stack without starting Kafka or Flink: node layout and
configuration, replication, and finding (and stopping) the processes a TaskManager leaves
behind, against real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anchorwatch.settings import TopicSettings
from anchorwatch.stack.flink import FlinkCluster
from anchorwatch.stack.kafka import KafkaCluster, formatted_size
from anchorwatch.stack.processes import (
    StackError,
    is_alive,
    processes_with_env,
    stop_pid,
    stop_pids,
    wait_until,
)
from anchorwatch.stack.stack import Stack, StackSettings
from anchorwatch.stack.topics import replication_for, topic_specs


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_three_nodes_are_a_static_quorum_of_combined_nodes(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, "127.0.0.1", 29092, 29093, "512m", 4, size=3)
    nodes = cluster.nodes
    assert [n.name for n in nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    assert [(n.port, n.controller_port) for n in nodes] == [
        (29092, 29093), (29094, 29095), (29096, 29097)]  # fmt: skip
    assert [n.state_dir for n in nodes] == [tmp_path / f"kafka-{i}" for i in (1, 2, 3)]
    assert cluster.bootstrap == "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096"
    p = props(nodes[1].server_properties())
    assert p["node.id"] == "2"
    assert p["process.roles"] == "broker,controller"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:29093,2@127.0.0.1:29095,3@127.0.0.1:29097"
    assert "controller.quorum.bootstrap.servers" not in p
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:29094,CONTROLLER://127.0.0.1:29095"
    assert p["log.dirs"] == str(tmp_path / "kafka-2" / "data")
    # Internal topics survive a node too; a dead node is fenced sooner than the default 9 s.
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor"):  # fmt: skip
        assert p[key] == "3", key
    assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
    assert int(p["broker.session.timeout.ms"]) < 9000
    # Stopping all nodes at once: the last would wait for a quorum that is gone.
    assert p["controlled.shutdown.enable"] == "false"


def test_one_node_keeps_its_layout(tmp_path: Path) -> None:
    (node,) = KafkaCluster(tmp_path, "127.0.0.1", 9092, 9093, "512m", 4).nodes
    assert node.state_dir == tmp_path / "kafka"
    assert node.name == "kafka"
    p = props(node.server_properties())
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:9093"
    assert p["offsets.topic.replication.factor"] == "1"
    assert "broker.session.timeout.ms" not in p
    assert "controlled.shutdown.enable" not in p


def test_a_formatted_cluster_keeps_its_size(tmp_path: Path) -> None:
    assert formatted_size(tmp_path) is None
    three = KafkaCluster(tmp_path, "127.0.0.1", 29092, 29093, "512m", 4, size=3)
    for node in three.nodes:
        node.data_dir.mkdir(parents=True)
        (node.data_dir / "meta.properties").write_text("cluster.id=x\n")
        (node.state_dir / "server.properties").write_text(node.server_properties())
    assert formatted_size(tmp_path) == 3
    three.check_layout()
    one = KafkaCluster(tmp_path, "127.0.0.1", 29092, 29093, "512m", 4, size=1)
    with pytest.raises(StackError, match="holds a 3-node Kafka; start it with --brokers 3"):
        one.check_layout()
    # Without --brokers, the stack takes the size its storage was formatted for.
    stack = Stack(StackSettings.load(stack={"state_dir": tmp_path}))
    assert stack.kafka.size == 3
    assert stack.topics.replication_factor == 3


@pytest.mark.parametrize(
    ("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))]
)
def test_replication_follows_the_node_count(brokers: int, expected: tuple[int, int]) -> None:
    assert replication_for(brokers) == expected


def test_topics_with_three_replicas_need_two_in_sync() -> None:
    for factor, min_isr in ((1, "1"), (3, "2")):
        specs = topic_specs(TopicSettings(replication_factor=factor))
        assert {s.config["min.insync.replicas"] for s in specs} == {min_isr}


def test_flink_keeps_its_temporary_files_and_recovery_tuning_in_its_state(tmp_path: Path) -> None:
    cluster = FlinkCluster(tmp_path, "127.0.0.1", 18081, 16123, 1, "1024m", "1536m", 2)
    conf = cluster.config()
    # The Python workers' python-dist-* directories land here, where `down` removes them.
    assert conf["io.tmp.dirs"] == str(tmp_path / "tmp")
    assert conf["heartbeat.interval"] < 10_000
    assert conf["restart-strategy.type"] == "exponential-delay"
    assert conf["restart-strategy.exponential-delay.max-backoff"] == "5 s"


def test_taskmanager_count_is_remembered(tmp_path: Path) -> None:
    (tmp_path / "flink").mkdir()
    (tmp_path / "flink" / "taskmanagers").write_text("2\n")
    assert Stack(StackSettings.load(stack={"state_dir": tmp_path})).flink.taskmanagers == 2
    explicit = StackSettings.load(stack={"state_dir": tmp_path, "flink_taskmanagers": 3})
    assert Stack(explicit).flink.taskmanagers == 3


def _fake_taskmanager(cluster: FlinkCluster) -> tuple[subprocess.Popen[bytes], int]:
    """A process named like a TaskManager, started as the scripts start one (FLINK_CONF_DIR
    in its environment), that starts a 'Python worker' of its own and prints its pid."""
    for d in (cluster.pid_dir, cluster.tmp_dir / "python-dist-0123"):
        d.mkdir(parents=True, exist_ok=True)
    code = (
        "import subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(w.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "FLINK_CONF_DIR": str(cluster.conf_dir)}
    tm = subprocess.Popen(
        [sys.executable, "-c", code, "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"],
        env=env,
        stdout=subprocess.PIPE,
    )
    assert tm.stdout is not None
    worker = int(tm.stdout.readline())
    (cluster.pid_dir / "flink-test-taskexecutor.pid").write_text(f"{tm.pid}\n")
    return tm, worker


def test_a_worker_orphaned_by_a_killed_taskmanager_is_found_and_stopped(tmp_path: Path) -> None:
    cluster = FlinkCluster(tmp_path, "127.0.0.1", 18081, 16123, 1, "1024m", "1536m")
    tm, worker = _fake_taskmanager(cluster)
    try:
        assert cluster.python_workers() == [worker]
        assert cluster.orphaned_workers() == []  # its TaskManager lives
        tm.kill()
        tm.wait()
        # The worker outlives its TaskManager, out of its process tree, still found.
        assert is_alive(worker, "time.sleep(600)")
        assert cluster.orphaned_workers() == [worker]
        assert cluster.stop()
        assert wait_until(lambda: not is_alive(worker, "time.sleep(600)"), timeout_s=10)
        assert not cluster.tmp_dir.exists()
    finally:
        tm.kill()
        stop_pids([worker], grace_s=1)


def _execed(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """``proc`` once its new program's environment is readable. Popen returns when the
    child's close-on-exec pipe closes, which the kernel does before it sets up the new
    environment: /proc/<pid>/environ can read empty for a moment after."""
    environ = Path(f"/proc/{proc.pid}/environ")
    assert wait_until(lambda: bool(environ.read_bytes()), timeout_s=10, interval_s=0.01)
    return proc


def test_stale_python_dists_go_and_used_ones_stay(tmp_path: Path) -> None:
    cluster = FlinkCluster(tmp_path, "127.0.0.1", 18081, 16123, 1, "1024m", "1536m")
    used, stale = cluster.tmp_dir / "python-dist-used", cluster.tmp_dir / "python-dist-stale"
    for d in (used, stale):
        d.mkdir(parents=True)
    env = {**os.environ, "FLINK_CONF_DIR": str(cluster.conf_dir)}
    worker = _execed(subprocess.Popen(["sleep", "600"], cwd=used, env=env))
    try:
        assert cluster.remove_stale_python_dists(min_age_s=0) == [stale]
        assert used.exists()
    finally:
        worker.kill()
        worker.wait()


def test_processes_are_found_by_environment_and_stopped_with_their_start_time() -> None:
    marker = f"aw-test-{time.time_ns()}"
    env = {**os.environ, "AW_TEST_MARKER": marker}
    procs = [_execed(subprocess.Popen(["sleep", "600"], env=env)) for _ in range(2)]
    ignores_term = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
         "signal.SIG_IGN); print(flush=True); time.sleep(600)"],
        env=env, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert ignores_term.stdout is not None
    ignores_term.stdout.readline()  # its handler is in place
    try:
        found = processes_with_env("AW_TEST_MARKER", marker)
        assert found == sorted([p.pid for p in procs] + [ignores_term.pid])
        stop_pids(found, grace_s=1)  # SIGTERM, then SIGKILL for the one that ignores it
        for p in [*procs, ignores_term]:
            assert p.wait(timeout=5) in (-signal.SIGTERM, -signal.SIGKILL)
        assert ignores_term.returncode == -signal.SIGKILL
        assert processes_with_env("AW_TEST_MARKER", marker) == []
    finally:
        for p in [*procs, ignores_term]:
            p.kill()


@pytest.mark.parametrize("stop", ["stop_pid", "stop_pids"])
def test_stopping_waits_until_the_process_has_exited_not_until_its_cmdline_changes(
    stop: str,
) -> None:
    # An exiting JVM reads with an empty cmdline while it still unmaps its heap; here the
    # process loses its marker on SIGTERM by exec'ing a short sleep (same pid, same start).
    marker = f"aw-test-{time.time_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, "
         "lambda *_: os.execvp('sleep', ['sleep', '1.5'])); print(flush=True); time.sleep(600)",
         marker],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.readline()
    try:
        if stop == "stop_pid":
            assert stop_pid(proc.pid, marker, grace_s=10) is False  # SIGTERM was enough
        else:
            stop_pids([proc.pid], grace_s=10, marker=marker)
        assert proc.poll() == 0, "stop returned while the process still ran"
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_without_the_marker_is_not_ours_to_stop() -> None:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        stop_pids([proc.pid], grace_s=1, marker="aw-test-not-in-its-cmdline")
        assert stop_pid(proc.pid, "aw-test-not-in-its-cmdline") is False
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_caller_and_its_shell_are_never_taken_for_workers(tmp_path: Path) -> None:
    # A shell that exported FLINK_CONF_DIR to use Flink's CLI against this cluster, running
    # the lookup (as `stack down` would run in it): neither is a worker to stop.
    cluster = FlinkCluster(tmp_path, "127.0.0.1", 18081, 16123, 1, "1024m", "1536m")
    code = (
        "import os; from pathlib import Path; from anchorwatch.stack.flink import FlinkCluster; "
        f"c = FlinkCluster(Path({str(tmp_path)!r}), '127.0.0.1', 1, 2, 1, '1g', '1g'); "
        "print(os.getppid(), os.getpid(), c.python_workers())"
    )
    env = {**os.environ, "FLINK_CONF_DIR": str(cluster.conf_dir)}
    out = subprocess.run(
        ["bash", "-c", f"{sys.executable} -c {code!r}; true"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split(maxsplit=2)  # fmt: skip
    shell, caller, workers = int(out[0]), int(out[1]), out[2].strip()
    assert shell != caller
    assert workers == "[]"
