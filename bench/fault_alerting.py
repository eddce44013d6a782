"""The fault campaign's alerting-takeover and alerting-pause kinds (issue 35): the journey
runs two alerting instances on one PostgreSQL state (anchorwatch/demo/journey_alerting_pair),
and the fault strikes whichever leads.

- ``alerting-takeover``: SIGKILL of the leader and its state directory deleted (its host
  is gone); the standby must take the lead and finish every incident.
- ``alerting-pause``: SIGSTOP of the leader past its lease, then SIGCONT; it must find it
  no longer leads and stop without posting (the supervisor starts it again as a standby).

Timed: from the fault to an instance leading (its /readyz: the standby, or the killed one
once restarted, whichever takes the expired lease first), and to the next post the local
Slack receives after it (none may be due: then not timed). The campaign counts lost and
doubled notifications as for every other kind; ``takeover_line`` sums the times up.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import requests

from anchorwatch.demo.journey_alerting_pair import AlertingPair

PAIR_FAULTS = ("alerting-takeover", "alerting-pause")

#: The longest wait for the standby to lead, and for a post after that.
_WAIT_S = 90.0


def strike(
    pair: AlertingPair,
    pids: dict[str, int],
    state_dir: Path,
    slack_url: str,
    fault: str,
    duration_s: float,
    done: threading.Event,
    timings: dict[str, Any],
) -> str:
    """Injects ``fault`` into the pair; what happened, for the trial's line. ``timings``
    gets ``takeover_s`` (fault to an instance leading again) and ``next_post_s``."""
    leader = pair.leader()
    if leader is None:
        raise RuntimeError("no alerting instance leads")
    pid = pids[leader]
    posts = _slack_posts(slack_url)
    if fault == "alerting-takeover":
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: _exited(pid), done)  # dead: its /readyz no longer answers
        shutil.rmtree(state_dir / leader, ignore_errors=True)
    else:
        os.kill(pid, signal.SIGSTOP)
    struck = time.monotonic()
    try:
        # The standby, or the killed instance once its supervisor restarted it (a new
        # process, racing the standby for the expired lease).
        led = pair.next_leader(_WAIT_S, done)
        if led:
            timings["takeover_s"] = round(time.monotonic() - struck, 1)
        if fault == "alerting-pause":
            done.wait(max(0.0, duration_s - (time.monotonic() - struck)))
    finally:
        if fault == "alerting-pause":
            os.kill(pid, signal.SIGCONT)
    if not led:
        raise RuntimeError(f"no instance took the lead within {_WAIT_S:.0f}s")
    if _wait(lambda: _slack_posts(slack_url) > posts, done):
        timings["next_post_s"] = round(time.monotonic() - struck, 1)
    what = (
        f"killed the leader {leader} ({pid}), its state directory deleted"
        if fault == "alerting-takeover"
        else f"paused the leader {leader} ({pid}) for {duration_s:.0f}s"
    )
    return (
        f"{what}; {led} led after {timings['takeover_s']}s, next Slack post after "
        f"{timings.get('next_post_s', 'none due')}s"
    )


def takeover_line(timings: list[dict[str, Any]]) -> str | None:
    """The campaign's takeover times over the trials of these kinds, or None if none ran."""
    took = [t["takeover_s"] for t in timings if "takeover_s" in t]
    posts = [t["next_post_s"] for t in timings if "next_post_s" in t]
    if not took:
        return None
    line = (
        f"alerting takeover: {len(took)} trials, fault to an instance leading median "
        f"{statistics.median(took):.1f}s, max {max(took):.1f}s"
    )
    if posts:
        median, most = statistics.median(posts), max(posts)
        line += f"; to the next Slack post median {median:.1f}s, max {most:.1f}s"
    return line


def _exited(pid: int) -> bool:
    """Dead or a zombie (its supervisor reaps it): not reaped here, so that it can."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _slack_posts(slack_url: str) -> int:
    r = requests.get(f"{slack_url}/_local/messages", timeout=10)
    r.raise_for_status()
    return len(r.json()["messages"])


def _wait(check: Callable[[], bool], done: threading.Event) -> bool:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        if check():
            return True
        if done.wait(0.2):
            return False
    return False
