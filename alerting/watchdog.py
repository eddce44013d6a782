"""The watchdog: notices when anchorwatch is blind, so that a dead drift job, a stuck consumer
or a stalled watermark does not look like "no drift". Pure: observations in, what is blind
and what to post out; no Kafka, no clock, no store (``watchdog_probe.py`` observes Kafka,
``watchdog_post.py`` posts the notice, ``watchdog_run.py`` wires them into the service).

What ingest accepts is on the drift job's input topic (the snapshots, or their summaries),
keyed by doc type. Every check the probe reads only the newest ``tail_records`` records of
each input partition that arrived since the previous check: their keys say which types are
arriving, for a few thousand records a check whatever the rate (a sample: a rare type is
watched from the check that samples it). Comparing offsets, not timestamps, keeps it free of
clock skew and of replays' old event times. Three signals, all in processing time:

- **no verdicts**: a type sampled at a check is *pending* until the engine's last window of
  that type moves on; pending for ``blind_after_s`` (longer than a healthy job takes to judge
  a snapshot: window, watermark delay, checkpoint), it is blind. A type the job has not judged
  yet is no different: it gets ``blind_after_s`` from its first sample, so warm-up is quiet.
- **watermark stalled**: the newest verdict window end has not moved for ``blind_after_s``
  while the input's end offsets grew: every pending type is blind.
- **consumer stalled**: the drift job's group has not moved its committed offset of a
  partition for ``blind_after_s`` while that partition's end moved past it: the pending
  types sampled on it are blind (unknown when the group commits nothing: no signal).

A blind type recovers when its verdicts move on again, and is dropped once it has not been
sampled for ``forget_after_s`` (it stopped arriving). Nothing is concluded in the first
``blind_after_s`` after a start; types a notice already lists when the service restarts stay
listed until they recover or are forgotten, so a restart neither resolves nor re-posts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

Cause = Literal["no_verdicts", "watermark_stalled", "consumer_stalled"]
CAUSES: Final[tuple[Cause, ...]] = ("no_verdicts", "watermark_stalled", "consumer_stalled")
Kind = Literal["opened", "updated", "resolved"]


@dataclass(frozen=True)
class Thresholds:
    blind_after_s: float
    forget_after_s: float
    update_interval_s: float


@dataclass(frozen=True)
class Observation:
    """One check: what the probe saw of Kafka and what the engine holds.

    ``arrivals``: doc type -> input partition, for the types in records that arrived since
    the previous check. ``ends``: each input partition's end offset. ``committed``: the drift
    job group's committed offset per partition (None: unknown, the signal is off).
    ``last_windows``: the engine's last window start per doc type, for the types asked about
    (``Watchdog.watched`` and the arrivals; None: none yet). ``watermark_ms``: the newest
    verdict window end the engine has seen."""

    at_s: float
    arrivals: Mapping[str, int]
    ends: Mapping[int, int]
    committed: Mapping[int, int] | None
    last_windows: Mapping[str, int | None]
    watermark_ms: int


@dataclass(frozen=True)
class Sight:
    """What is blind now: each type with the cause that made it so, and the global causes."""

    types: Mapping[str, Cause]
    causes: frozenset[Cause]
    since_s: float | None  # when the oldest listed type became pending
    detail: Mapping[str, str] = field(default_factory=dict)  # cause -> words for people

    @property
    def blind(self) -> bool:
        return bool(self.types) or bool(self.causes)


@dataclass(frozen=True)
class Posted:
    """The notice as last posted (the poster stores it with the outbox entries)."""

    types: Mapping[str, Cause]
    causes: frozenset[Cause]
    posted_at_s: float


@dataclass(frozen=True)
class Decision:
    kind: Kind
    sight: Sight


@dataclass
class _Partition:
    committed: int
    changed_s: float
    end_at_change: int


_UNKNOWN: Final = object()


class Watchdog:
    """Follows the observations; ``observe`` returns what is blind (None while warming up)."""

    def __init__(self, thresholds: Thresholds, *, listed: Mapping[str, Cause] | None = None):
        self._t = thresholds
        self._started_s: float | None = None
        self._pending: dict[str, float] = {}  # type -> first sample since its last verdict
        self._sampled: dict[str, float] = {}  # type -> last sample
        self._partition: dict[str, int] = {}
        self._windows: dict[str, object] = {}  # type -> last window start seen (or None)
        # Listed by a notice before a restart: blind until they recover or are forgotten.
        self._carried: dict[str, Cause] = dict(listed or {})
        self._wm: tuple[int, float, int] | None = None  # value, changed at, input end then
        self._partitions: dict[int, _Partition] = {}
        self._ends: dict[int, tuple[int, float]] = {}  # partition -> end, when it last moved

    def watched(self) -> set[str]:
        """The types whose last window the next observation must carry."""
        return set(self._pending) | set(self._carried)

    def observe(self, o: Observation) -> Sight | None:
        if self._started_s is None:
            self._started_s = o.at_s
        # Verdicts first: an arrival in the same check needs a verdict after it.
        for doc_type, start in o.last_windows.items():
            before = self._windows.get(doc_type, _UNKNOWN)
            self._windows[doc_type] = start
            moved = start is not None and (
                before is None or (isinstance(before, int) and start > before)
            )
            if moved:
                self._pending.pop(doc_type, None)
                self._carried.pop(doc_type, None)
        for doc_type, partition in o.arrivals.items():
            self._sampled[doc_type] = o.at_s
            self._partition[doc_type] = partition
            self._pending.setdefault(doc_type, o.at_s)
        self._forget(o.at_s)
        input_end = sum(o.ends.values())
        if self._wm is None or self._wm[0] != o.watermark_ms:
            self._wm = (o.watermark_ms, o.at_s, input_end)
        for p, end in o.ends.items():
            if self._ends.get(p, (None,))[0] != end:
                self._ends[p] = (end, o.at_s)
        self._follow_commits(o)
        if o.at_s - self._started_s < self._t.blind_after_s:
            return None  # warming up: every signal needs blind_after_s to conclude
        return self._sight(o, input_end)

    def _forget(self, now_s: float) -> None:
        cutoff = now_s - self._t.forget_after_s
        for doc_type in [d for d, at in self._sampled.items() if at < cutoff]:
            del self._sampled[doc_type]
            self._pending.pop(doc_type, None)
            self._partition.pop(doc_type, None)
            self._windows.pop(doc_type, None)
        if self._started_s is not None and now_s - self._started_s >= self._t.forget_after_s:
            for doc_type in [d for d in self._carried if d not in self._sampled]:
                del self._carried[doc_type]

    def _follow_commits(self, o: Observation) -> None:
        if o.committed is None:
            self._partitions.clear()
            return
        for p, offset in o.committed.items():
            known = self._partitions.get(p)
            if known is None or known.committed != offset:
                self._partitions[p] = _Partition(offset, o.at_s, o.ends.get(p, offset))

    def _sight(self, o: Observation, input_end: int) -> Sight:
        after = self._t.blind_after_s
        types: dict[str, Cause] = dict(self._carried)
        for doc_type, pending_s in self._pending.items():
            if o.at_s - pending_s >= after:
                types[doc_type] = "no_verdicts"
        causes: set[Cause] = set()
        detail: dict[str, str] = {}
        assert self._wm is not None
        _, wm_changed, end_then = self._wm
        if o.at_s - wm_changed >= after and input_end > end_then and self._arriving(o, None):
            causes.add("watermark_stalled")
            detail["watermark_stalled"] = (
                f"the newest verdict window end has not moved for {_span(o.at_s - wm_changed)} "
                f"while {input_end - end_then:,} snapshots arrived"
            )
            for doc_type in self._pending:
                types.setdefault(doc_type, "watermark_stalled")
        # Lag, and the end moved on since the commit last did: the consumer stopped.
        stalled = sorted(
            p
            for p, k in self._partitions.items()
            if o.at_s - k.changed_s >= after
            and o.ends.get(p, 0) > max(k.committed, k.end_at_change)
            and self._arriving(o, p)
        )
        if stalled:
            causes.add("consumer_stalled")
            lag = sum(o.ends.get(p, 0) - self._partitions[p].committed for p in stalled)
            detail["consumer_stalled"] = (
                f"the drift job's consumer group has not committed on partition(s) "
                f"{', '.join(map(str, stalled[:20]))} for {_span(after)} or more while its "
                f"lag grew to {lag:,}"
            )
            on = set(stalled)
            for doc_type in self._pending:
                if self._partition.get(doc_type) in on:
                    types.setdefault(doc_type, "consumer_stalled")
        since = [self._pending[d] for d in types if d in self._pending]
        return Sight(types, frozenset(causes), min(since) if since else None, detail)

    def _arriving(self, o: Observation, partition: int | None) -> bool:
        """Snapshots still arrive (on ``partition``, or any): its end moved within
        blind_after_s. Once traffic stops, a stall is no longer blindness."""
        moved = [at for p, (_, at) in self._ends.items() if partition is None or p == partition]
        return any(o.at_s - at < self._t.blind_after_s for at in moved)


def decide(
    posted: Posted | None, sight: Sight | None, now_s: float, update_interval_s: float
) -> Decision | None:
    """What to post given the notice as last posted and what is blind now: open it, update
    it (types joined or recovered; at most once per ``update_interval_s``), resolve it; None
    when there is nothing to post."""
    if sight is None:
        return None  # warming up: neither open nor resolve on a partial view
    if posted is None:
        return Decision("opened", sight) if sight.blind else None
    if not sight.blind:
        return Decision("resolved", sight)
    # Types joining or recovering are news; a cause alone changing is not (a dead job soon
    # shows both no verdicts and a stalled watermark): it is shown with the next update.
    changed = set(sight.types) != set(posted.types)
    if changed and now_s - posted.posted_at_s >= update_interval_s:
        return Decision("updated", sight)
    return None


def _span(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
