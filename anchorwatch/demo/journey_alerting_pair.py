"""The demo's alerting service on two hosts' worth of instances: one state in a private
PostgreSQL server, a leader and a standby (docs/alerting.md), and the leader killed with
SIGKILL partway through the live traffic. The standby takes the lead when the lease ends;
the killed one is restarted, as a supervisor would, and waits as the new standby. The end
checks are the same as with one instance: every incident once, nothing lost.

The standby is the instance on the demo's alerting port (where the local Slack sends button
clicks and the operator drill makes its silence): a standby serves those too, writing them
to the shared state, so they are taken whichever instance leads.

With ``work_split`` the instances share the work instead (docs/alerting.md,
``alerting.work_split``): each owns some verdict partitions, a lease per partition, and
``add_instance`` starts one more, which takes partitions from the others (the fault
campaign's ``alerting-scale``). The kill then strikes the owner of partition 0, which decides
the groups of data-quality incidents and posts the watchdog's notice. The campaign's split
trials run with grouping, the watchdog and the refits off (``SPLIT_OFF``, as they were
measured); the demo (``anchorwatch demo --alerting-work-split``) keeps the run's settings,
operator features and all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.leadership import read_leases
from anchorwatch.demo.journey_processes import JourneyError, Services, answers, wait_for
from anchorwatch.stack.postgres import PostgresServer

#: The lease: a takeover comes at most this long after the leader's death.
LEASE_S = 5

#: Starts the instance (name, port, standby) with the run's settings; its URL once ready.
StartInstance = Callable[[str, int, bool], str]

#: The instance that joins two sharing the work (``add_instance``).
JOINER = "alerting-3"

#: The work split's settings: grouping, the watchdog and the refits off as the fault
#: campaign's split trials were measured (the settings accept them since).
SPLIT_OFF: dict[str, dict[str, Any]] = {
    "alerting": {"work_split": True, "refit": False},
    "grouping": {"enabled": False},
    "watchdog": {"enabled": False},
}


class AlertingPair:
    """The shared state and the kill: ``start_database`` before the instances start,
    ``start_instances``, ``kill_leader_after`` as the live traffic starts, ``stop`` at the
    end. With ``work_split``, ``add_instance`` and ``owners`` instead of the kill."""

    def __init__(
        self,
        services: Services,
        run_dir: Path,
        echo: Callable[[str], None],
        *,
        work_split: bool = False,
        every_feature: bool = False,
    ) -> None:
        """``every_feature``: sharing the work, grouping, the watchdog and the refits as the
        run's settings have them (else off: ``SPLIT_OFF``)."""
        self.services = services
        self.run_dir = run_dir
        self.echo = echo
        self.work_split = work_split
        self.every_feature = every_feature
        self.server: PostgresServer | None = None
        self.location: StateLocation | None = None
        self._start: StartInstance | None = None
        self.partitions = 0  # of the verdicts topic, once started
        self.urls: dict[str, str] = {}  # instance name -> its endpoint, once started
        self.takeover_s: float | None = None
        self.failure: str | None = None
        self._timer: threading.Timer | None = None
        self.killing = threading.Event()  # set from the kill until the restart

    def start_database(self, state_dir: Path) -> tuple[StateLocation, dict[str, dict[str, Any]]]:
        """The private PostgreSQL server; the state's location, and the instances' settings
        for it, by section (the password in a file of the run's own; the work split's)."""
        self.server = PostgresServer(self.run_dir / "postgres").start()
        # With the services' pid files: "kill the pids in <run>/*.pid" stops it too.
        (self.run_dir / "postgres.pid").write_text(f"{self.server.pid}\n")
        secret = self.run_dir / "state-password"
        secret.write_text(self.server.password + "\n")
        secret.chmod(0o600)
        location = StateLocation(state_dir, self.server.url, SecretStr(self.server.password))
        self.location = location
        shared = {"state_url": self.server.url, "state_password_file": str(secret),
                  "lease_s": LEASE_S}  # fmt: skip
        return location, self.sections(shared)

    def sections(self, shared: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The instances' settings by section, from the state's (``shared``)."""
        if not self.work_split:
            return {"alerting": shared}
        if self.every_feature:
            return {"alerting": {**shared, "work_split": True}}
        return {**SPLIT_OFF, "alerting": {**shared, **SPLIT_OFF["alerting"]}}

    def start_instances(self, start: StartInstance, port: int, partitions: int) -> str:
        """The two instances: the leader first, on a port of its own, then the standby on
        ``port`` (with the work split: both ready, then sharing the ``partitions`` verdict
        partitions between them). The URL of the one on ``port``."""
        self._start = start
        self.partitions = partitions
        for name, at, standby in (("alerting-2", 0, False), ("alerting", port, True)):
            self.urls[name] = start(name, at, standby and not self.work_split)
        if self.work_split:
            wait_for(lambda: self.shared_by(2, partitions), 60, "two alerting instances to "
                     f"share the {partitions} verdict partitions")  # fmt: skip
        return self.urls["alerting"]

    def add_instance(self, name: str = JOINER) -> str:
        """One more instance, started as the others were (sharing the work, it joins them);
        its URL once ready."""
        assert self._start is not None, "start_instances first"
        url = self._start(name, 0, not self.work_split)
        self.urls[name] = url
        return url

    def owners(self, stale: Collection[int] = ()) -> dict[str, list[int]]:
        """Sharing the work: instance name -> the verdict partitions whose leases it holds
        now (unexpired), by the state's lease table; ``?<holder>`` for a holder that is no
        process of the run's, or one of the ``stale`` pids (struck by a fault)."""
        assert self.location is not None, "start_database first"
        by_pid = {str(pid): n for n, pid in self.services.pids.items() if pid not in stale}
        out: dict[str, list[int]] = {}
        for lease in read_leases(self.location):
            if lease.name.startswith("verdicts-") and lease.expires_in_ms > 0:
                name = by_pid.get(holder_pid(lease.holder), f"?{lease.holder}")
                out.setdefault(name, []).append(int(lease.name.removeprefix("verdicts-")))
        return {name: sorted(held) for name, held in sorted(out.items())}

    def shared_by(self, instances: int, partitions: int) -> bool:
        """Every verdict partition held, by ``instances`` instances of the run."""
        owners = self.owners()
        return (
            sum(len(held) for held in owners.values()) == partitions
            and len(owners) == instances
            and not any(name.startswith("?") for name in owners)
        )

    def leader(self) -> str | None:
        """The instance whose /readyz answers 200."""
        for name, url in self.urls.items():
            if answers(f"{url}/readyz"):
                return name
        return None

    def next_leader(self, timeout_s: float, stop: threading.Event | None = None) -> str | None:
        """Waits until an instance leads (after a fault to the leader); its name, or None
        when none does within ``timeout_s`` or ``stop`` is set."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (found := self.leader()) is not None:
                return found
            if stop.wait(0.2):
                return None
        return None

    def kill_leader_after(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self._kill_leader)
        self._timer.daemon = True
        self._timer.start()

    def owner_of_0(self, stale: Collection[int] = ()) -> str | None:
        """Sharing the work: the instance of the run that holds partition 0's lease."""
        held = self.owners(stale)
        return next((n for n, ps in held.items() if 0 in ps and not n.startswith("?")), None)

    def _kill_leader(self) -> None:
        self.killing.set()
        try:
            if self.work_split:
                self._kill_owner_of_0()
                return
            leader = self.leader()
            if leader is None:
                self.failure = "no alerting instance led when the leader was to be killed"
                return
            self.services.kill(leader)
            killed = time.monotonic()
            standby = self.next_leader(60)  # the killed one is not restarted yet
            if standby is None:
                self.failure = "the standby did not take the lead within 60 s of the kill"
                return
            self.takeover_s = time.monotonic() - killed
            self.services.restart(leader)  # as its supervisor would: the new standby
            self.echo(
                f"        alerting: the leader ({leader}) killed -9; {standby} took the lead "
                f"{self.takeover_s:.1f}s later; {leader} restarted as the standby"
            )
        except Exception as exc:  # reported by the journey, never lost in a timer thread
            self.failure = f"killing the alerting leader failed: {exc}"
        finally:
            self.killing.clear()

    def _kill_owner_of_0(self) -> None:
        """Sharing the work: the owner of partition 0 killed -9; timed until another
        instance holds that partition, then restarted, as a supervisor would."""
        victim = self.owner_of_0()
        if victim is None:
            self.failure = "no alerting instance held partition 0 when it was to be killed"
            return
        pid = self.services.pids[victim]
        self.services.kill(victim)
        killed = time.monotonic()
        try:
            wait_for(lambda: self.owner_of_0(stale=(pid,)) is not None, 60, "another alerting "
                     "instance to hold partition 0")  # fmt: skip
        except JourneyError as exc:
            self.failure = f"after the kill of {victim}: {exc}"
            return
        self.takeover_s = time.monotonic() - killed
        self.services.restart(victim)
        self.echo(
            f"        alerting: the owner of partition 0 ({victim}) killed -9; "
            f"{self.owner_of_0(stale=(pid,))} held it {self.takeover_s:.1f}s later; "
            f"{victim} restarted, sharing the work again"
        )

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.server is not None:
            self.server.stop()


def holder_pid(holder: str) -> str:
    """The pid in a lease's holder (``host:pid:tag``, ``leadership.instance_name``)."""
    parts = holder.rsplit(":", 2)
    return parts[1] if len(parts) == 3 else ""
