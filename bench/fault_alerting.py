"""The fault campaign's alerting-takeover, alerting-pause and alerting-scale kinds (issue
35): the journey runs two alerting instances on one PostgreSQL state
(anchorwatch/demo/journey_alerting_pair); the first two strike whichever leads.

- ``alerting-takeover``: SIGKILL of the leader and its state directory deleted (its host
  is gone); the standby must take the lead and finish every incident.
- ``alerting-pause``: SIGSTOP of the leader past its lease, then SIGCONT; it must find it
  no longer leads and stop without posting (the supervisor starts it again as a standby).

- ``alerting-scale``: the two share the work (``alerting.work_split``: each owns some
  verdict partitions, grouping, the watchdog and the refits off) and a third instance
  joins mid-run; the partitions rebalance and it must take some (``scale``).
- ``alerting-split-takeover`` / ``alerting-split-pause``: the two share the work, and the
  owner of an open incident (of its doc type's partition) is killed, its state directory
  deleted, or paused past its leases; the other must take its partitions (``strike_owner``).

Timed: from the fault to an instance leading (its /readyz: the standby, or the killed one
once restarted, whichever takes the expired lease first), and to the next post the local
Slack receives after it (none may be due: then not timed). The campaign counts lost and
doubled notifications as for every other kind; ``takeover_line`` sums the times up. A join
is timed from the third's start to its holding a partition's lease (``owned_s``), to the
next post the local Slack accepts (``joined_post_s``) and to the joiner's own first one
(``joiner_post_s``, from its log); a split strike from the fault to the struck one's
partitions held by others (``split_takeover_s``) and to the next post (``split_post_s``).
``summary_lines`` sums them up.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psutil
import requests

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.store import Store
from anchorwatch.demo.journey_alerting_pair import JOINER, AlertingPair

#: The kinds that share the work between two instances (``alerting.work_split``) ...
SPLIT_FAULTS = ("alerting-scale", "alerting-split-takeover", "alerting-split-pause")
#: ... and all that run two alerting instances on one PostgreSQL state.
PAIR_FAULTS = ("alerting-takeover", "alerting-pause", *SPLIT_FAULTS)
#: The times a trial of these kinds records (``TrialResult.figures["timings"]``).
TIMINGS = (
    *("takeover_s", "next_post_s", "ready_s", "owned_s", "joined_post_s", "joiner_post_s"),
    *("split_takeover_s", "split_post_s"),
)

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
    gets ``takeover_s`` (fault to an instance leading again) and ``next_post_s`` (for
    ``alerting-scale``, what ``scale`` gives)."""
    if fault == "alerting-scale":
        return scale(pair, slack_url, done, timings)
    if fault in SPLIT_FAULTS:
        return strike_owner(pair, state_dir, slack_url, fault, duration_s, done, timings)
    leader = pair.leader()
    if leader is None:
        raise RuntimeError("no alerting instance leads")
    pid = pids[leader]
    if fault == "alerting-takeover":
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: _exited(pid), done)  # dead: its /readyz no longer answers
        shutil.rmtree(state_dir / leader, ignore_errors=True)
    else:
        os.kill(pid, signal.SIGSTOP)
    struck, wall = time.monotonic(), time.time()
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
    # When Slack accepted it, not when this looked: a pause is waited out before this.
    if _wait(lambda: _first_post(slack_url, wall) is not None, done):
        timings["next_post_s"] = round((_first_post(slack_url, wall) or wall) - wall, 1)
    what = (
        f"killed the leader {leader} ({pid}), its state directory deleted"
        if fault == "alerting-takeover"
        else f"paused the leader {leader} ({pid}) for {duration_s:.0f}s"
    )
    return (
        f"{what}; {led} led after {timings['takeover_s']}s, next Slack post after "
        f"{timings.get('next_post_s', 'none due')}s"
    )


def scale(
    pair: AlertingPair, slack_url: str, done: threading.Event, timings: dict[str, Any]
) -> str:
    """A third instance joins the two sharing the work; waits until it holds a partition's
    lease and the others hold the rest. ``timings`` gets ``ready_s`` (its /readyz),
    ``owned_s`` (a lease of its own), ``joined_post_s`` (the next post Slack accepted) and
    ``joiner_post_s`` (the joiner's first, by its log), each from its start."""
    before = pair.owners()
    started, wall = time.monotonic(), time.time()
    pair.add_instance(JOINER)
    timings["ready_s"] = round(time.monotonic() - started, 1)
    if not _wait(lambda: rebalanced(pair.owners(), pair.partitions), done):
        raise RuntimeError(
            f"{JOINER} held no partition, or some were left unheld, within {_WAIT_S:.0f}s of "
            f"its start: leases {pair.owners()} (before it: {before})"
        )
    timings["owned_s"] = round(time.monotonic() - started, 1)
    after = pair.owners()
    log = pair.run_dir / f"{JOINER}.log"
    firsts: dict[str, Callable[[], float | None]] = {
        "joined_post_s": lambda: _first_post(slack_url, wall),
        "joiner_post_s": lambda: first_slack_send(log, wall),
    }

    def posted() -> bool:
        for key, first in firsts.items():
            if key not in timings and (at := first()) is not None:
                timings[key] = round(at - wall, 1)
        return all(key in timings for key in firsts)

    _wait(posted, done)
    return (
        f"{JOINER} joined {_shares(before)}: ready after {timings['ready_s']}s, holding "
        f"partitions {after.get(JOINER)} after {timings['owned_s']}s ({_shares(after)}), "
        f"next Slack post after {timings.get('joined_post_s', 'none due')}s, its own first "
        f"after {timings.get('joiner_post_s', 'none due')}s"
    )


def strike_owner(
    pair: AlertingPair,
    state_dir: Path,
    slack_url: str,
    fault: str,
    duration_s: float,
    done: threading.Event,
    timings: dict[str, Any],
) -> str:
    """Kills (its state directory deleted) or pauses the instance owning an open incident's
    partition, sharing the work; waits until the others hold its partitions. ``timings``
    gets ``split_takeover_s`` and ``split_post_s`` (the next post Slack accepted)."""
    before = pair.owners()
    victim, why = incident_owner(pair.location, before)
    pid, mine = pair.services.pids[victim], before[victim]
    wall = time.time()
    if fault == "alerting-split-takeover":
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: _exited(pid), done)
        shutil.rmtree(state_dir / victim, ignore_errors=True)
    else:
        os.kill(pid, signal.SIGSTOP)
    struck = time.monotonic()
    try:
        # Its leases show as "?<holder>" (a restarted one is a new pid: it counts).
        moved = _wait(lambda: taken_over(pair.owners(stale={pid}), mine), done)
        if moved:
            timings["split_takeover_s"] = round(time.monotonic() - struck, 1)
        after = pair.owners(stale={pid})
        if fault == "alerting-split-pause":
            done.wait(max(0.0, duration_s - (time.monotonic() - struck)))
    finally:
        if fault == "alerting-split-pause":
            os.kill(pid, signal.SIGCONT)
    if not moved:
        raise RuntimeError(f"{victim}'s partitions {mine} not taken within {_WAIT_S:.0f}s: "
                           f"leases {pair.owners()} (before: {_shares(before)})")  # fmt: skip
    if _wait(lambda: _first_post(slack_url, wall) is not None, done):
        timings["split_post_s"] = round((_first_post(slack_url, wall) or wall) - wall, 1)
    what = "killed" if fault == "alerting-split-takeover" else f"paused for {duration_s:.0f}s"
    return (
        f"{victim} ({pid}, {why}) {what}; its partitions {mine} held by others after "
        f"{timings['split_takeover_s']}s ({_shares(after)}), next Slack post after "
        f"{timings.get('split_post_s', 'none due')}s"
    )


def incident_owner(location: StateLocation | None, owners: dict[str, list[int]]) -> tuple[str, str]:
    """The instance owning the partition of an open incident's doc type (the oldest open
    one), and why it was chosen; with none open, the one owning the most partitions."""
    assert location is not None
    store = Store(location, create=False)
    try:
        with store.reading():
            restored = store.restore()
    finally:
        store.close()
    by_partition = {p: name for name, share in owners.items() for p in share}
    for row in sorted(restored.open_incidents, key=lambda r: r.opened_at_ms):
        partition = restored.doc_types[row.doc_type].partition
        name = by_partition.get(partition)
        if name is not None and not name.startswith("?"):
            return name, f"owner of {row.doc_type}'s open incident on partition {partition}"
    own = {n: share for n, share in owners.items() if not n.startswith("?")}
    return max(own, key=lambda n: len(own[n])), "no incident open: the one owning the most"


def taken_over(owners: dict[str, list[int]], partitions: list[int]) -> bool:
    """Each of ``partitions`` held by a run instance (``?<holder>``: the struck one's lease
    not yet ended, or a holder that is no process of the run's)."""
    held = {p: name for name, share in owners.items() for p in share}
    return all(p in held and not held[p].startswith("?") for p in partitions)


def first_slack_send(log: Path, since_wall: float) -> float | None:
    """When (wall clock) the instance whose log this is first had a Slack notification
    sent at or after ``since_wall``, by its outbox's log lines; None if none yet."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        if '"integration":"slack"' not in line or '"outcome":"sent"' not in line:
            continue
        try:
            at = datetime.fromisoformat(orjson.loads(line)["ts"]).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        if at >= since_wall:
            return at
    return None


def rebalanced(owners: dict[str, list[int]], partitions: int) -> bool:
    """The joiner holds a partition's lease and every partition is held, by the run's own
    instances, each at most once."""
    held = [p for name, share in owners.items() if not name.startswith("?") for p in share]
    return (
        bool(owners.get(JOINER))
        and len(held) == len(set(held)) == partitions
        and len(held) == sum(len(share) for share in owners.values())
    )


def _shares(owners: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} {share}" for name, share in owners.items()) or "no leases"


def takeover_line(timings: list[dict[str, Any]]) -> str | None:
    """The leader/standby takeover times over the trials that ran them, or None."""
    return _times_line(timings, "alerting takeover", "fault to an instance leading",
                       "takeover_s", "next_post_s")  # fmt: skip


def scale_line(timings: list[dict[str, Any]]) -> str | None:
    """The join times over the alerting-scale trials, or None if none ran."""
    return _times_line(timings, "alerting scale", "a third instance's start to its holding "
                       "partitions", "owned_s", "joined_post_s")  # fmt: skip


def split_line(timings: list[dict[str, Any]]) -> str | None:
    """The takeover times of the split kinds (an incident's owner struck), or None."""
    return _times_line(timings, "alerting split takeover", "fault to its partitions held by "
                       "the others", "split_takeover_s", "split_post_s")  # fmt: skip


def summary_lines(timings: list[dict[str, Any]]) -> list[str]:
    """The campaign's lines of these kinds' times, for those that ran."""
    lines = (takeover_line(timings), scale_line(timings), split_line(timings))
    return [line for line in lines if line]


def _times_line(
    timings: list[dict[str, Any]], title: str, what: str, key: str, post_key: str
) -> str | None:
    took = [t[key] for t in timings if key in t]
    posts = [t[post_key] for t in timings if post_key in t]
    if not took:
        return None
    line = (
        f"{title}: {len(took)} trials, {what} median {statistics.median(took):.1f}s, "
        f"max {max(took):.1f}s"
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


def _first_post(slack_url: str, since_wall: float) -> float | None:
    """When (wall clock) the local Slack first accepted a message at or after
    ``since_wall`` (``chat.postMessage`` answered 200), or None."""
    r = requests.get(f"{slack_url}/_local/requests", timeout=10)
    r.raise_for_status()
    times = [
        q["at"]
        for q in r.json()["requests"]
        if q["method"] == "chat.postMessage"
        and q["status"] == 200
        and not q.get("error")
        and q["at"] >= since_wall
    ]
    return min(times) if times else None


def _wait(check: Callable[[], bool], done: threading.Event) -> bool:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        if check():
            return True
        if done.wait(0.2):
            return False
    return False
