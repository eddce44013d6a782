"""The verdicts and the engine of an instance that shares the work with others
(``alerting.work_split``, the state in PostgreSQL).

Each instance owns some verdict partitions (``ownership.py``: a consumer group, a lease per
partition) and decides and posts for their doc types alone: the engine holds only their
types (``Engine(partitions=...)``), every write is fenced by their leases
(``store.PartitionGuard``), and each sender takes only their outbox entries.

When the partitions owned change (one taken after its lease ended, one revoked or lost),
the engine is built anew from the state for the new set. So what it holds in memory is
always what the state holds for partitions this instance owns: a partition taken over
resumes from the last batch its former owner committed, and one given up is forgotten. A
write refused by the fence (``PartitionFenced``: this instance was paused past a lease and
another took the partition) commits nothing; the engine is rebuilt the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from anchorwatch.alerting.consumers import raw_message
from anchorwatch.alerting.database import SessionEnded, StateLocation
from anchorwatch.alerting.engine import Engine, RawMessage
from anchorwatch.alerting.leadership import PartitionFenced
from anchorwatch.alerting.ownership import PartitionOwnership
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.contracts import Baseline

log = logging.getLogger(__name__)

#: Builds the engine of the partitions given, its writes fenced by ``ownership``.
MakeEngine = Callable[[frozenset[int], PartitionOwnership], Engine]


class SplitWork:
    """This instance's share: its partitions' verdicts (``poll``) and the engine deciding
    them (``engine``, replaced when the partitions change). The consumer thread calls it."""

    def __init__(
        self,
        settings: AlertingSettings,
        location: StateLocation,
        make_engine: MakeEngine,
        *,
        consumer_config: dict[str, object] | None = None,
    ) -> None:
        self._make_engine = make_engine
        self._changed = False
        self._batch_starts: dict[int, int] = {}
        # The newest baseline of every type, for an engine built anew (``set_baseline``).
        self._baselines: dict[str, Baseline] = {}
        self.topic = settings.topics.verdicts
        self.ownership = PartitionOwnership(
            settings,
            location,
            on_owned=self._owned,
            on_released=self._released,
            consumer_config=dict(consumer_config or {}),
        )
        try:
            self.engine = make_engine(frozenset(), self.ownership)
        except BaseException:
            self.ownership.close()
            raise

    @property
    def kafka_ok(self) -> bool:
        """For the readiness probe: the group's consumer reaches the cluster."""
        return self.ownership.kafka_ok

    @property
    def last_error(self) -> str | None:
        return self.ownership.last_error

    @property
    def assigned(self) -> frozenset[int]:
        return self.ownership.owned_now()

    def _owned(self, partition: int) -> int | None:
        self._changed = True
        # As the state has it now: the former owner may have committed since we started.
        return self.engine.store.next_offset(self.topic, partition)

    def _released(self, partition: int) -> None:
        self._changed = True

    def set_baseline(self, baseline: Baseline) -> bool:
        held = self._baselines.get(baseline.doc_type)
        if held is None or held.fitted_at_ms <= baseline.fitted_at_ms:
            self._baselines[baseline.doc_type] = baseline
        return self.engine.set_baseline(baseline)

    def poll(self, max_messages: int, timeout_s: float) -> list[RawMessage]:
        """The owned partitions' verdicts; the engine first rebuilt if they changed."""
        messages = self.ownership.poll(timeout_s, max_messages)
        if self._changed:
            self.rebuild()
        out = [raw_message(m) for m in messages]
        # Where this batch began on each partition: read again if it is refused (fenced).
        self._batch_starts = {}
        for m in out:
            self._batch_starts.setdefault(m.partition, m.offset)
        return out

    def rebuild(self) -> None:
        self._changed = False
        old = self.engine
        owned = self.ownership.owned_now()
        self.engine = self._make_engine(owned, self.ownership)
        for baseline in self._baselines.values():
            self.engine.tracker.set_baseline(baseline)
        old.close()
        log.info(
            "alerting work split: decides for its partitions",
            extra={
                "partitions": sorted(owned),
                "holder": self.ownership.holder,
                "open_incidents": len(self.engine.open_incidents()),
            },
        )

    def fenced(self, exc: PartitionFenced | SessionEnded) -> None:
        """A write refused: a partition was taken over while this instance could not renew
        its lease. Nothing of it was committed; the partitions lost are given up and the
        engine rebuilt from the state."""
        # A partition taken over while this instance could not renew its lease, or
        # (``GroupsChanged``) the groups changed by another instance since it read them.
        log.warning("alerting write fenced", extra={"reason": str(exc)})
        self.ownership.renew()
        self.rebuild()
        # The refused batch's verdicts of the partitions still owned are read again: the
        # consumer had moved past them, and nothing of them was committed.
        self.ownership.rewind(self._batch_starts)
        self._batch_starts = {}

    def commit(self, offsets: dict[tuple[str, int], int], *, wait: bool = False) -> None:
        self.ownership.commit(offsets)

    def close(self) -> None:
        self.ownership.close()
