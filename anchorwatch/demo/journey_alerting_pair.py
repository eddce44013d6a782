"""The demo's alerting service on two hosts' worth of instances: one state in a private
PostgreSQL server, a leader and a standby (docs/alerting.md), and the leader killed with
SIGKILL partway through the live traffic. The standby takes the lead when the lease ends;
the killed one is restarted, as a supervisor would, and waits as the new standby. The end
checks are the same as with one instance: every incident once, nothing lost.

The standby is the instance on the demo's alerting port (where the local Slack sends button
clicks and the operator drill makes its silence): a standby serves those too, writing them
to the shared state, so they are taken whichever instance leads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from anchorwatch.alerting.database import StateLocation
from anchorwatch.demo.journey_processes import Services, answers
from anchorwatch.stack.postgres import PostgresServer

#: The lease: a takeover comes at most this long after the leader's death.
LEASE_S = 5


class AlertingPair:
    """The shared state and the kill: ``start_database`` before the instances start,
    ``kill_leader_after`` as the live traffic starts, ``stop`` at the end."""

    def __init__(self, services: Services, run_dir: Path, echo: Callable[[str], None]) -> None:
        self.services = services
        self.run_dir = run_dir
        self.echo = echo
        self.server: PostgresServer | None = None
        self.urls: dict[str, str] = {}  # instance name -> its endpoint, once started
        self.takeover_s: float | None = None
        self.failure: str | None = None
        self._timer: threading.Timer | None = None
        self.killing = threading.Event()  # set from the kill until the restart

    def start_database(self, state_dir: Path) -> tuple[StateLocation, dict[str, Any]]:
        """The private PostgreSQL server; the state's location, and the instances' settings
        for it (the password in a file of the run's own)."""
        self.server = PostgresServer(self.run_dir / "postgres").start()
        # With the services' pid files: "kill the pids in <run>/*.pid" stops it too.
        (self.run_dir / "postgres.pid").write_text(f"{self.server.pid}\n")
        secret = self.run_dir / "state-password"
        secret.write_text(self.server.password + "\n")
        secret.chmod(0o600)
        location = StateLocation(state_dir, self.server.url, SecretStr(self.server.password))
        return location, {
            "state_url": self.server.url,
            "state_password_file": str(secret),
            "lease_s": LEASE_S,
        }

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

    def _kill_leader(self) -> None:
        self.killing.set()
        try:
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

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.server is not None:
            self.server.stop()
