"""Daemon processes the stack starts: pid files, liveness, ports, stopping without orphans."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from anchorwatch.errors import AnchorwatchError


class StackError(AnchorwatchError):
    """The local stack cannot do what was asked; the message says why."""


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def require_free_ports(host: str, ports: Mapping[str, int]) -> None:
    busy = [f"{name} port {port}" for name, port in ports.items() if port_in_use(host, port)]
    if busy:
        raise StackError(
            f"{', '.join(busy)} on {host} already in use by another process; stop it or choose "
            "other ports (see `anchorwatch stack up --help`)"
        )


#: The lowest port a test stack takes; below it sit the well-known and registered services.
_LOWEST_PRIVATE_PORT = 10000


#: Ports handed out by this process: nothing holds a port between its choice and its
#: server's bind, so two draws for one stack must not return the same one.
_handed_out: set[int] = set()


def _ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for the local port of outgoing connections (both ends included)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now, for a server of a private stack (tests, benchmarks, the
    demo when its preferred port is taken); see ``free_port_block``."""
    return free_port_block(1, host)


def free_port_block(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive ports that are free now (a cluster's nodes take
    consecutive ports from the configured ones).

    Drawn outside the kernel's ephemeral range: a port the OS hands out for ``bind(0)`` may
    be taken, between this choice and the server's own bind, as the local port of any
    outgoing connection on the machine; outside that range only a listener takes it."""
    low, high = _ephemeral_ports()
    spans = [
        (start, end - count + 1)
        for start, end in ((_LOWEST_PRIVATE_PORT, low - 1), (high + 1, 65535))
        if end - start + 1 >= max(count, 1000)
    ]
    for _ in range(200):
        if spans:
            start, last = random.choice(spans)
            base = random.randint(start, last)
        else:  # the ephemeral range covers nearly every port: the OS's pick is all there is
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                base = int(sock.getsockname()[1])
            if base + count > 65536:
                continue
        block = range(base, base + count)
        if _handed_out.isdisjoint(block) and not any(port_in_use(host, p) for p in block):
            if len(_handed_out) > 4096:  # forget them all: their servers are long up or gone
                _handed_out.clear()
            _handed_out.update(block)
            return base
    raise StackError(f"no {count} consecutive free ports on {host}")


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def is_alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and is still the process we started (``marker`` in its cmdline),
    so a recycled pid is never mistaken for ours."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    state = _proc_state(pid)
    return state not in ("Z", "X") and marker in cmdline(pid)


def runs(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie has). For a process this code
    has just started: its command line is not consulted, which may read empty while the
    process execs (the java launcher can re-exec itself), and the pid cannot be recycled
    while it is our unreaped child."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _proc_state(pid) not in ("Z", "X")


def exit_status(pid: int, *, timeout_s: float = 5.0) -> str:
    """How a child of this process that has exited ended ("exit status 1", "killed by
    SIGTERM"), reaping it; "exited" when that is no longer known (already reported, or not
    started by ``start_daemon`` and reaped elsewhere)."""
    child = _children.get(pid)
    if child is not None:
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return "still running"
        del _children[pid]  # reported once; the pid may now be recycled
        return _describe(code)
    statuses: list[int] = []

    def reaped() -> bool:
        found, status = os.waitpid(pid, os.WNOHANG)
        statuses.append(status)
        return found != 0

    # A multi-threaded process reads as a zombie while its other threads still exit, and
    # cannot be reaped until they have.
    try:
        if not wait_until(reaped, timeout_s=timeout_s, interval_s=0.05):
            return "still running"
    except ChildProcessError:
        return "exited"
    return _describe(os.waitstatus_to_exitcode(statuses[-1]))


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat.rsplit(")", 1)[1].split()[0]


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


#: The daemons ``start_daemon`` started, by pid, until ``exit_status`` reports how they
#: ended. A dropped ``Popen`` would be reaped by the subprocess module itself at the next
#: ``Popen`` call (its ``_cleanup``), and its exit status lost before anyone asked for it.
_children: dict[int, subprocess.Popen[bytes]] = {}


def start_daemon(
    argv: Sequence[str], *, log_file: Path, pid_file: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start ``argv`` in its own session (so it outlives the CLI and a terminal's ^C), with
    stdout and stderr appended to ``log_file``; returns the pid after writing ``pid_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    # Reap the ones that have exited (each Popen keeps its status) so no zombie piles up.
    for child in _children.values():
        child.poll()
    _children[proc.pid] = proc
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def stop_pid(pid: int, marker: str, *, grace_s: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after ``grace_s``, and wait until it has exited (as
    ``stop_pids``). Returns True if it had to kill."""
    if not is_alive(pid, marker):
        return False
    started = _start_time(pid)

    def gone() -> bool:
        return not _still_running(pid, started)

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_until(gone, timeout_s=grace_s):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_until(gone, timeout_s=10)
    return True


def parent_pids() -> dict[int, int]:
    """{pid: parent pid} of every process on the machine (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields:
                out[int(entry.name)] = int(fields[1])
    return out


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of the processes whose environment holds ``name=value`` (the ones this user may
    read). An environment is inherited by every descendant and outlives their parents, so
    it finds a daemon's children even once the daemon is gone."""
    wanted = f"{name}={value}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0") and _proc_state(int(entry.name)) not in ("Z", "X"):
            out.append(int(entry.name))
    return sorted(out)


def stop_pids(pids: Sequence[int], *, grace_s: float = 10.0, marker: str | None = None) -> None:
    """SIGTERM every pid, SIGKILL those still there after ``grace_s``, and wait until they
    have exited. With ``marker``, only pids whose cmdline has it are ours to stop; from then
    on a pid counts as the same process while its start time is. (Its cmdline reads empty
    as soon as an exiting process has dropped its memory, well before it has exited: a JVM
    unmapping a large heap stays running for a while with no cmdline.)"""
    started = {pid: _start_time(pid) for pid in pids}

    def alive(pid: int) -> bool:
        return _still_running(pid, started[pid])

    live = [p for p in pids if alive(p) and (marker is None or is_alive(p, marker))]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if wait_until(functools.partial(_none_alive, alive, tuple(live)), timeout_s=grace_s):
            return
        live = [p for p in live if alive(p)]


def _none_alive(alive: Callable[[int], bool], pids: tuple[int, ...]) -> bool:
    return not any(map(alive, pids))


def _start_time(pid: int) -> list[str]:
    """The process's start time (its identity with the pid: [] if gone)."""
    return _stat_fields(pid)[19:20]


def _still_running(pid: int, start_time: list[str]) -> bool:
    """True while the process that had ``start_time`` has not exited (a zombie has)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[19:20] == start_time and fields[0] not in ("Z", "X")


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, ...]; [] if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat.rsplit(")", 1)[1].split()


def wait_until(check: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
