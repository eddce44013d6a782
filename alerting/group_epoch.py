"""The group epoch: how instances that share the work (``alerting.work_split``) keep the
grouping of data-quality incidents (``grouping.py``) consistent across them.

Each instance writes only its own types' incident rows, and the owner of verdict partition 0
alone writes the group incidents (``engine_shared.py``). But a decision about a group reads
rows another instance writes (the owner of partition 0 gathers every instance's waiting
incidents; an owner posts a waiting incident on its own only while no group lists it). So
every write of a data-quality row or a group row carries the epoch its decisions were read
at, and moves it on by one; a write whose epoch is no longer the state's is refused
(``GroupsChanged``) and nothing of it commits. The instance rebuilds its engine from the
state and decides again (``split_work.py``), as after any fenced write.
"""

from __future__ import annotations

from typing import Final

from anchorwatch.alerting.database import Database
from anchorwatch.alerting.leadership import PartitionFenced

#: The ``meta`` key of the epoch (absent: 0).
GROUP_EPOCH: Final = "group_epoch"


class GroupsChanged(PartitionFenced):
    """A write decided on groups another instance has changed since: nothing of it is
    written; the engine is rebuilt from the state and decides again."""


def read_epoch(value: str | None) -> int:
    return int(value) if value else 0


def check_epoch(db: Database, expected: int) -> None:
    """Inside the write transaction (the state's write lock held): ``GroupsChanged``
    unless the epoch is still ``expected``. The caller writes ``expected + 1``."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (GROUP_EPOCH,)).fetchone()
    found = read_epoch(None if row is None else str(row[0]))
    if found != expected:
        raise GroupsChanged(
            f"the groups changed meanwhile (group epoch {found}, decided at {expected})"
        )
