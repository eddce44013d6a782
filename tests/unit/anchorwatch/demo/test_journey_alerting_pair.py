"""Which run instance holds which verdict partition, from the state's lease table: a holder
is known by the pid in its name, an expired lease is held by nobody, a holder that is no
process of the run's is shown as such (a stale or foreign instance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.leadership import LeaseRow
from anchorwatch.demo import journey_alerting_pair as pair_module
from anchorwatch.demo.journey_alerting_pair import AlertingPair, holder_pid


class _Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class _Services:
    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: _Proc(pid) for name, pid in pids.items()}
        self.killed: list[str] = []

    def kill(self, name: str) -> None:
        self.killed.append(name)

    def restart(self, name: str) -> int:
        self.procs[name] = _Proc(self.procs[name].pid + 100)
        return self.procs[name].pid

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}


def test_a_holder_is_known_by_its_pid() -> None:
    assert holder_pid("vm:4242:0a1b2c3d") == "4242"
    assert holder_pid("host:with:colons:17:ffff0000") == "17"
    assert holder_pid("nonsense") == ""


def test_the_owners_are_the_run_instances_holding_unexpired_partition_leases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [
        LeaseRow("alerting", "vm:11:aa", 3, 4000),  # the leader's lease: no partition
        LeaseRow("verdicts-0", "vm:11:aa", 1, 4000),
        LeaseRow("verdicts-1", "vm:12:bb", 2, 3000),
        LeaseRow("verdicts-2", "vm:13:cc", 1, 5000),
        LeaseRow("verdicts-3", "vm:12:bb", 1, -200),  # expired: nobody holds it
        LeaseRow("verdicts-4", "vm:99:dd", 4, 1000),  # no process of the run's
    ]
    seen: list[Any] = []

    def read_leases(location: StateLocation) -> list[LeaseRow]:
        seen.append(location)
        return rows

    monkeypatch.setattr(pair_module, "read_leases", read_leases)
    services = _Services({"ingest": 10, "alerting-2": 11, "alerting": 12, "alerting-3": 13})
    pair = AlertingPair(services, tmp_path, lambda line: None, work_split=True)  # type: ignore[arg-type]
    pair.location = StateLocation(tmp_path, "postgresql://aw@127.0.0.1:5432/aw", None)
    assert pair.owners() == {
        "?vm:99:dd": [4],
        "alerting": [1],
        "alerting-2": [0],
        "alerting-3": [2],
    }
    assert seen[0] == pair.location
    # A struck instance's pid is stale: its leases are no longer its name's.
    assert pair.owners(stale={12})["?vm:12:bb"] == [1]
    assert "alerting" not in pair.owners(stale={12})
    assert not pair.shared_by(3, 5)  # a stranger holds one
    rows.pop()
    assert not pair.shared_by(3, 4)  # partition 3's lease ended
    rows[4] = LeaseRow("verdicts-3", "vm:12:bb", 2, 4000)
    assert pair.shared_by(3, 4)
    assert not pair.shared_by(2, 4)


def test_sharing_the_work_the_kill_strikes_the_owner_of_partition_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner of partition 0 (it decides the groups) is killed, timed until another
    instance of the run holds partition 0, then restarted."""
    rows = [
        LeaseRow("verdicts-0", "vm:11:aa", 1, 4000),
        LeaseRow("verdicts-1", "vm:12:bb", 1, 4000),
    ]
    services = _Services({"alerting-2": 11, "alerting": 12})

    def read_leases(location: StateLocation) -> list[LeaseRow]:
        if services.killed and len(rows) == 2:
            # The killed one's lease still runs a while; then the other takes partition 0.
            rows.append(LeaseRow("verdicts-0", "vm:12:bb", 2, 4000))
            rows.pop(0)
        return list(rows)

    monkeypatch.setattr(pair_module, "read_leases", read_leases)
    lines: list[str] = []
    pair = AlertingPair(services, tmp_path, lines.append, work_split=True)  # type: ignore[arg-type]
    pair.location = StateLocation(tmp_path, "postgresql://aw@127.0.0.1:5432/aw", None)
    assert pair.owner_of_0() == "alerting-2"
    pair._kill_leader()
    assert pair.failure is None
    assert services.killed == ["alerting-2"]
    assert services.pids["alerting-2"] == 111  # restarted
    assert pair.takeover_s is not None
    assert "owner of partition 0 (alerting-2) killed -9; alerting held it" in lines[0]


def test_the_split_keeps_every_feature_with_the_operator_drills(tmp_path: Path) -> None:
    shared = {"state_url": "postgresql://aw@db/aw"}
    for split, every, grouping in ((False, False, None), (True, False, False), (True, True, None)):
        pair = AlertingPair(_Services({}), tmp_path, print, work_split=split, every_feature=every)  # type: ignore[arg-type]
        sections = pair.sections(shared)
        assert sections["alerting"]["state_url"] == shared["state_url"]
        assert sections["alerting"].get("work_split", False) is split
        assert sections.get("grouping", {}).get("enabled") is grouping
