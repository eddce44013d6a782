"""The embedded mini-cluster's memory bounds: the JVM options the settings give, and that
they reach the environment PyFlink starts its JVM from."""

from __future__ import annotations

import os

import pytest
from pyflink import java_gateway

from anchorwatch.jobs import cluster
from anchorwatch.jobs.settings import JobOptions


def test_settings_give_heap_direct_memory_and_metaspace() -> None:
    options = JobOptions(local_heap_mb=1024, local_direct_mb=256, local_metaspace_mb=200)
    assert options.local_jvm_args() == [
        "-Xmx1024m", "-Xms512m", "-XX:MaxDirectMemorySize=256m", "-XX:MaxMetaspaceSize=200m",
    ]  # fmt: skip


def test_bounds_are_set_before_the_jvm_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java_gateway, "_gateway", None)
    monkeypatch.delenv("JVM_ARGS", raising=False)
    args = cluster.bound_local_memory(JobOptions())
    assert args[0] == "-Xmx2048m"
    assert os.environ["JVM_ARGS"].split() == args


def test_a_running_jvm_with_other_bounds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java_gateway, "_gateway", object())
    monkeypatch.setenv("JVM_ARGS", "-Xmx9g")
    with pytest.raises(cluster.LocalMemoryError):
        cluster.bound_local_memory(JobOptions())
    # The same bounds again (a second job in the same process) are fine.
    monkeypatch.setenv("JVM_ARGS", " ".join(JobOptions().local_jvm_args()))
    assert cluster.bound_local_memory(JobOptions()) == JobOptions().local_jvm_args()
