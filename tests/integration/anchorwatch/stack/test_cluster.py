"""The local stack as a cluster, against real processes: three Kafka nodes of which one is
killed -9 while acks=all writes go on, two TaskManagers of which one is killed -9 under a
running drift job, `stack up` bringing back each lost part, and `stack down` leaving no
process (Python workers included) and no python-dist directory behind.

Each test starts a stack of its own (the session stack is one broker); run this file alone
on a two-core machine. Recovery times are printed (-s) for docs/run-locally.md.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from anchorwatch.demo import slice as flow
from anchorwatch.jobs import cluster, drift_job
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.flink import TASKMANAGER_CLASS
from anchorwatch.stack.kafka import MAIN_CLASS
from anchorwatch.stack.processes import (
    cmdline,
    free_port_block,
    is_alive,
    parent_pids,
    processes_with_env,
    wait_until,
)
from anchorwatch.stack.stack import Stack, StackSettings
from tests.support.drift_job import MIN, T0, has, minute, publish, wait_for
from tests.support.flink import latest_checkpoint_ms
from tests.support.waiting import wait_until as wait_for_condition

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _stack(state: Path, **options: object) -> Stack:
    # One block for all: ports drawn one by one could land inside the brokers' block.
    base = free_port_block(8)
    return Stack(StackSettings.load(stack={
        "state_dir": state, "kafka_port": base, "controller_port": base + 1,
        "flink_rest_port": base + 6, "flink_rpc_port": base + 7, **options}))  # fmt: skip


@pytest.fixture
def three_brokers(tmp_path: Path) -> Iterator[Stack]:
    s = _stack(tmp_path, brokers=3)
    try:
        s.up(with_flink=False)
        yield s
    finally:
        s.down()


def _running(s: Stack) -> dict[str, bool]:
    return {c.name: c.running for c in s.status()}


def test_three_brokers_keep_acks_all_writes_through_a_killed_node_and_up_restores_it(
    three_brokers: Stack,
) -> None:
    s = three_brokers
    topic = s.settings.topics.snapshots
    assert {k: v for k, v in _running(s).items() if k.startswith("kafka")} == {
        "kafka-1": True, "kafka-2": True, "kafka-3": True}  # fmt: skip
    # `up` returns once every node serves the topic: any of them may be a client's bootstrap.
    for node in s.kafka.nodes:
        served = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
        partitions = served.topics[topic].partitions
        assert len(partitions) == s.settings.topics.partitions
        assert {len(p.replicas) for p in partitions.values()} == {3}
        assert all(p.leader >= 0 for p in partitions.values())
    admin = AdminClient({"bootstrap.servers": s.kafka.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert config["min.insync.replicas"].value == "2"

    # The leader of partition 0 dies without a word.
    leader = s.kafka.leader_of(topic, 0)
    victim = s.kafka.node(leader)
    pid = victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: not is_alive(pid, MAIN_CLASS), timeout_s=10)
    assert not _running(s)[victim.name]

    # Every partition, including the dead node's, takes acks=all writes: two copies remain.
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap, "acks": "all",
                         "enable.idempotence": True, "log_level": 0})  # fmt: skip
    sent = [f"{uuid.uuid4()}".encode() for _ in range(2000)]
    errors: list[str] = []
    first_ack: list[float] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        elif not first_ack:
            first_ack.append(time.monotonic())

    for i, value in enumerate(sent):
        producer.produce(topic, value, partition=i % len(partitions), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(90) == 0
    assert errors == []
    failover = time.monotonic() - killed
    consumer = Consumer({"bootstrap.servers": s.kafka.bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 90
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.add(msg.value() or b"")
    consumer.close()
    assert got == set(sent)
    assert s.kafka.leader_of(topic, 0) != leader

    # `stack up` brings back exactly the dead node; its copies catch up.
    t = time.monotonic()
    report = s.up(with_flink=False)
    restart = time.monotonic() - t
    assert report["kafka"].startswith(f"started {victim.name} in"), report  # type: ignore[attr-defined]
    assert all(v for k, v in _running(s).items() if k.startswith("kafka"))
    s.kafka.wait_in_sync(timeout_s=120)
    in_sync = time.monotonic() - t
    print(f"\nbroker kill -9: all {len(sent)} acks=all writes done {failover:.1f}s after the kill; "
          f"`stack up` restarted {victim.name} in {restart:.1f}s, all replicas in sync after "
          f"{in_sync:.1f}s")  # fmt: skip


def _job_settings(s: Stack, tmp_path: Path, parallelism: int = 1) -> JobSettings:
    base = JobSettings.load(kafka={"bootstrap_servers": s.kafka.bootstrap})
    return base.model_copy(update={"job": base.job.model_copy(update={
        "watermark_delay_ms": 5_000, "idle_timeout_s": 2, "checkpoint_interval_s": 3,
        "startup_mode": "earliest-offset", "group_id": f"aw-{tmp_path.name}",
        "parallelism": parallelism})})  # fmt: skip


def _python_workers_by_tree(taskmanagers: list[int]) -> set[int]:
    """Descendants of the TaskManagers whose command line is PyFlink's worker (found
    without the stack's own lookup)."""
    parents = parent_pids()
    out = set()
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor and ancestor not in taskmanagers and ancestor > 1:
            ancestor = parents.get(ancestor)
        if ancestor in taskmanagers and "pyflink" in cmdline(pid):
            out.add(pid)
    return out


def test_a_killed_taskmanager_is_replaced_by_up_the_job_recovers_and_down_leaves_nothing(
    tmp_path: Path,
) -> None:
    s = _stack(tmp_path, flink_taskmanagers=2, flink_slots=1)
    everything: set[int] = set()
    try:
        s.up(with_flink=True)
        status = {c.name: c for c in s.status()}
        for name in ("flink-taskmanager-1", "flink-taskmanager-2"):
            assert status[name].running
            assert status[name].detail.endswith(" registered"), status[name]
        # Two slots, one per TaskManager: the job needs both, so losing one stops it until
        # a TaskManager is back (the case `stack up` used to miss).
        settings = _job_settings(s, tmp_path, parallelism=2)
        jar = flow.fetch_artifacts(settings).flink_jobs_jar()
        rest = cluster.FlinkRest(s.flink.address)
        env = {drift_job.SETTINGS_ENV: settings.model_dump_json()}
        job = cluster.submit(s.flink.address, jar, env=env)
        # The watermark reaches 1:58: window 0 closes.
        part1 = [e for m in range(3) for e in minute("nda", m, [0.1, 0.2, 0.3])]
        publish(settings, part1)
        wait_for(settings, has("nda", 0), timeout_s=240)
        # A checkpoint past window 0: one triggered after its verdict was readable.
        closed_ms = int(time.time() * 1000)
        wait_for_condition(
            lambda: (latest_checkpoint_ms(rest.base, job) or 0) > closed_ms,
            60,
            "a checkpoint completed after window 0's verdict",
        )

        tms = s.flink.pids()[TASKMANAGER_CLASS]
        workers = _python_workers_by_tree(tms)
        assert workers, "no Python worker under the TaskManagers"
        assert workers <= set(s.flink.python_workers())
        everything |= set(tms) | workers | {p for p in s.kafka.pids().values() if p}
        everything |= set(s.flink.pids()["StandaloneSessionClusterEntrypoint"])

        victim = tms[0]
        s.flink.kill_taskmanager(victim)
        killed = time.monotonic()
        assert wait_until(lambda: not is_alive(victim, TASKMANAGER_CLASS), timeout_s=10)
        report = s.up()  # no flags: Flink runs (its JobManager), so it is healed too
        replaced = time.monotonic() - killed
        assert "taskmanagers started 1" in str(report["flink"]), report
        new_tms = s.flink.pids()[TASKMANAGER_CLASS]
        assert len(new_tms) == 2
        assert victim not in new_tms
        everything |= set(new_tms)
        # The dead TaskManager's Python workers are gone, found or orphaned.
        victim_workers = workers - _python_workers_by_tree(tms[1:])
        assert wait_until(lambda: not any(map(_exists, victim_workers)), timeout_s=20)
        assert s.flink.orphaned_workers() == []

        assert wait_until(lambda: rest.running(job), timeout_s=120, interval_s=0.5)
        running = time.monotonic() - killed
        part2 = [e for m in range(3, 5) for e in minute("nda", m, [0.6, 0.7])]
        publish(settings, part2)
        # The watermark reaches 3:57: windows 1 and 2, open at the kill, close.
        verdicts = wait_for(settings, has("nda", 0, 1, 2), timeout_s=240)
        recovered = time.monotonic() - killed
        expected = flow.reference_windows(part1 + part2, MIN)
        closed = {k: w for k, w in expected.items() if k[1] <= T0 + 2 * MIN}
        holders = flow.anchor_holders(part1 + part2, MIN)
        result = flow.compare(closed, [v.window for v in verdicts], holders)
        assert result.ok, result
        everything |= set(s.flink.python_workers())
        rest.cancel(job)
        print(f"\nTaskManager kill -9: replaced by `stack up` {replaced:.1f}s after the kill, "
              f"job running again after {running:.1f}s, "
              f"next verdict after {recovered:.1f}s")  # fmt: skip
    finally:
        down = s.down()
    assert down == {"flink": "stopped", "kafka": "stopped"}
    survivors = sorted(p for p in everything if _exists(p))
    assert survivors == [], [cmdline(p)[:200] for p in survivors]
    assert processes_with_env("FLINK_CONF_DIR", str(s.flink.conf_dir)) == []
    assert list(tmp_path.rglob("python-dist-*")) == []


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_repeated_taskmanager_failovers_do_not_slow_down(tmp_path: Path) -> None:
    """Four kills -9 in a few minutes of the TaskManager running the job: each time the job
    moves to the spare TaskManager and `stack up` brings the spare back. Recovery used to
    grow with each failure (the default backoff reaches a minute); capped, it stays flat."""
    s = _stack(tmp_path, flink_taskmanagers=2, flink_slots=1)
    times: list[float] = []
    try:
        s.up(with_flink=True)
        settings = _job_settings(s, tmp_path)
        jar = flow.fetch_artifacts(settings).flink_jobs_jar()
        rest = cluster.FlinkRest(s.flink.address)
        job = cluster.submit(s.flink.address, jar,
                             env={drift_job.SETTINGS_ENV: settings.model_dump_json()})  # fmt: skip
        assert wait_until(lambda: rest.running(job), timeout_s=180, interval_s=0.5)
        for _ in range(4):
            busy = _taskmanager_running(s, rest, job)
            s.flink.kill_taskmanager(busy)
            killed = time.monotonic()
            # The job fails over to the spare TaskManager, no `stack up` needed for that.
            assert wait_until(
                lambda b=busy: _taskmanager_running(s, rest, job) not in (None, b),  # type: ignore[misc]
                timeout_s=120, interval_s=0.25,
            )  # fmt: skip
            times.append(time.monotonic() - killed)
            s.up()  # the spare comes back for the next fault
        rest.cancel(job)
    finally:
        s.down()
    print(f"\njob running again after each TaskManager kill -9: {[round(t, 1) for t in times]} s")
    assert max(times) < 30, times
    assert times[-1] < 2 * min(times) + 10, times


def _taskmanager_running(s: Stack, rest: cluster.FlinkRest, job: str) -> int | None:
    """Pid of the TaskManager whose slot runs the job's tasks, when they all run."""
    if not rest.running(job):
        return None
    tms = rest.task_managers_of(job)
    by_id = {tm.resource_id: tm.pid for tm in s.flink.task_managers()}
    pids = {by_id.get(t) for t in tms}
    return pids.pop() if len(pids) == 1 else None
