"""Named crash points: a test hook, never a setting, that kills the service where the
exactly-once argument says a crash must be harmless.

``ANCHORWATCH_ALERTING_TEST_CRASH_AT=point[:integration][@n],...`` kills this process with
SIGKILL the n-th time (default 1st) it passes ``point``. Points: batch_before_commit (a batch
decided, its transaction not begun), batch_in_commit (inside the batch's SQLite transaction:
everything written, the COMMIT not reached), batch_after_commit (committed, before the Kafka
commit), send_before (an outbox entry marked attempting, its request not sent), send_after
(the remote side accepted it, not yet marked done), done_in_commit (inside the transaction
that marks it done: written, not committed), release_before_commit (incidents held while
muted decided to post, their transaction not begun), group_before_commit (data-quality
incidents whose group wait is over decided: grouped, joined or posted on their own, and
inhibited incidents whose inhibitor is gone posted; their transaction not begun),
ack_before_commit (acknowledgements
from Slack applied, their transaction not begun). The engine and the drainer call the hook; the
crash trials (tests/integration/alerting/test_service_crash.py) set it.
``ANCHORWATCH_ALERTING_TEST_CRASH_WITH=stop`` stops the process there (SIGSTOP) instead: an
instance paused inside a transaction (tests/integration/alerting/test_service_takeover.py).
"""

from __future__ import annotations

import logging
import os
import signal
from collections import Counter
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

CRASH_ENV: Final = "ANCHORWATCH_ALERTING_TEST_CRASH_AT"
CRASH_WITH_ENV: Final = "ANCHORWATCH_ALERTING_TEST_CRASH_WITH"
CRASH_POINTS: Final = (
    "batch_before_commit",
    "batch_in_commit",
    "batch_after_commit",
    "release_before_commit",
    "group_before_commit",
    "ack_before_commit",
    "send_before",
    "send_after",
    "done_in_commit",
)
#: What the engine and the drainer call at each point: ``(point, integration)``.
CrashHook = Callable[[str, str], None]


def no_crash(point: str, integration: str) -> None:
    """The hook outside the crash trials."""


class CrashPoints:
    """See CRASH_ENV. ``action`` is what a hit does (default: SIGKILL this process)."""

    def __init__(self, spec: str | None, action: Callable[[], None] | None = None) -> None:
        self._targets: dict[tuple[str, str], int] = {}
        self._hits: Counter[tuple[str, str]] = Counter()
        self._action = action or (lambda: os.kill(os.getpid(), signal.SIGKILL))
        for item in (spec or "").split(","):
            if not item.strip():
                continue
            target, _, nth = item.strip().partition("@")
            point, _, integration = target.partition(":")
            if point not in CRASH_POINTS:
                raise ValueError(f"{CRASH_ENV}: unknown point {point!r}; known: {CRASH_POINTS}")
            self._targets[(point, integration)] = int(nth or 1)

    @classmethod
    def from_env(cls) -> CrashPoints:
        with_signal = signal.SIGSTOP if os.environ.get(CRASH_WITH_ENV) == "stop" else signal.SIGKILL
        return cls(os.environ.get(CRASH_ENV), lambda: os.kill(os.getpid(), with_signal))

    def __call__(self, point: str, integration: str = "") -> None:
        for key in ((point, integration), (point, "")):
            if key in self._targets:
                self._hits[key] += 1
                if self._hits[key] == self._targets[key]:
                    log.warning("test hook: crashing", extra={"point": point, "at": integration})
                    self._action()
