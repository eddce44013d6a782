"""A local stack of the test's or the benchmark's own: Kafka (and Flink, when asked) on
free ports in a directory of its choosing, so that it never meets a developer's running
stack or another test's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anchorwatch.stack.processes import free_port
from anchorwatch.stack.stack import Stack, StackSettings


def stack_on_free_ports(
    state_dir: Path,
    *,
    flink: bool = False,
    stack: dict[str, Any] | None = None,
    topics: dict[str, Any] | None = None,
) -> Stack:
    """A Stack (not started) in ``state_dir``; ``stack`` and ``topics`` are further
    settings of those sections (the defaults otherwise)."""
    ports = {"kafka_port": free_port(), "controller_port": free_port()}
    if flink:
        ports |= {"flink_rest_port": free_port(), "flink_rpc_port": free_port()}
    sections: dict[str, Any] = {"stack": {"state_dir": state_dir, **ports, **(stack or {})}}
    if topics:
        sections["topics"] = topics
    return Stack(StackSettings.load(None, **sections))
