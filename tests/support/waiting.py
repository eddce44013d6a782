"""Waiting for an observable condition instead of sleeping a fixed time: a deadline, and a
failure that names what did not happen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, *, interval_s: float = 0.1
) -> None:
    """Return as soon as ``condition()`` holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


async def wait_until_async(
    condition: Callable[[], bool], timeout_s: float, what: str, *, interval_s: float = 0.01
) -> None:
    """``wait_until`` for a coroutine whose event loop also runs what it waits for (the
    ingest service in-process): sleeps with ``asyncio.sleep``, so the loop goes on."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)
