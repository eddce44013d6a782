"""A private PostgreSQL server, for a shared alerting state on one machine (the demo's two
alerting instances, the tests), the way the stack runs a private Kafka and Flink: a cluster
of its own made with ``initdb``, a ``postgres`` process on a free port of 127.0.0.1, and
nothing shared with a PostgreSQL the machine may run already (Debian's package starts one
on 5432): its own port, its own socket directory, its own data. Made for runs that end:
durability is off (fsync), and ``stop`` removes the data.

``PostgresServer(directory).start()`` makes and starts it; ``stop()`` stops it and removes
everything it made. Once started it offers:

- ``url`` and ``password``: the login role ``anchorwatch`` (a random password, not in the
  URL) on its database ``anchorwatch``, through TCP on 127.0.0.1 (scram-sha-256);
- ``new_database(name)``: a fresh database owned by ``anchorwatch``; its URL (no password);
- ``admin_url``: the superuser ``postgres`` through the Unix socket (trust: only this
  machine's processes that can enter the socket directory reach it).

Where its files live: the cluster and the socket in a directory of its own made with
``mkdtemp`` under /tmp (a socket path must stay under 108 bytes); ``directory`` keeps the
server's log. Run as root (CI), initdb and the server run as the ``postgres`` system user
(initdb refuses root), who owns that /tmp directory: it could not enter a directory of
pytest's (/tmp/pytest-of-root is root's alone). Children keep the caller's environment
(PG* variables aside), so CI's last-resort cleanup, which kills what inherited
ANCHORWATCH_TEST_STATE_DIR, also finds a server a killed pytest left behind.

No server binaries is an error that says to install them (Debian's ``postgresql``
package, which .ci/run installs).
"""

from __future__ import annotations

import atexit
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

import psycopg
from psycopg import sql

from anchorwatch.stack.processes import free_port

#: The role and the database made for the state; the superuser is ``postgres``.
ROLE = "anchorwatch"
SUPERUSER = "postgres"
#: A database name we accept from a caller (then still quoted as an identifier).
DATABASE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")

_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3
_SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    # A server for runs that end: durability buys nothing, speed does.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
_MISSING = (
    "PostgreSQL server binaries (initdb, postgres) not found: a private PostgreSQL server "
    "(the alerting state of several instances, and its tests) needs them: "
    "install Debian's `postgresql` package (apt-get install postgresql), "
    "or put a PostgreSQL server's bin directory on PATH"
)


@dataclass(frozen=True)
class PostgresDatabase:
    """One database: connect with ``psycopg.connect(db.url, password=db.password)``."""

    url: str
    password: str = field(repr=False)


def _has_server(bindir: Path) -> bool:
    return all((bindir / name).is_file() for name in ("initdb", "postgres"))


def _version_key(bindir: Path) -> tuple[int, ...]:
    """(15,) for /usr/lib/postgresql/15/bin, (9, 6) for .../9.6/bin."""
    try:
        return tuple(int(part) for part in bindir.parent.name.split("."))
    except ValueError:
        return ()


def server_binaries() -> Path | None:
    """The directory holding initdb and postgres: ``pg_config --bindir`` when it has them,
    else the newest /usr/lib/postgresql/*/bin (Debian's layout), else the directory of the
    ``initdb`` on PATH (symbolic links resolved); None if there is none."""
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and _has_server(Path(out)):
            return Path(out)
    debian = [
        d for d in Path("/usr/lib/postgresql").glob("*/bin") if _version_key(d) and _has_server(d)
    ]
    if debian:
        return max(debian, key=_version_key)
    initdb = shutil.which("initdb")
    if initdb is not None:
        bindir = Path(initdb).resolve().parent
        if _has_server(bindir):
            return bindir
    return None


def _log_tail(path: Path, lines: int = 30, start: int = 0) -> str:
    """The last ``lines`` lines of the server's log, of what it wrote from byte ``start``."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no server log: {e})"
    return "\n".join(text.splitlines()[-lines:])


class PostgresServer:
    """One private PostgreSQL server (see the module's docstring); also a context manager."""

    def __init__(self, directory: Path, *, bindir: Path | None = None) -> None:
        self.directory = directory
        self.bindir = bindir
        self.password = secrets.token_urlsafe(24)
        self.port = 0
        #: Seconds ``start()`` took (initdb, server up, role and database made).
        self.started_in = 0.0
        #: The server's own directory under /tmp: the cluster (``data``) and the socket.
        self.runtime_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0
        self._account: pwd.struct_passwd | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def log_path(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def data_dir(self) -> Path:
        return self._runtime() / "data"

    @property
    def socket_dir(self) -> Path:
        return self._runtime()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def url(self) -> str:
        """The role ``anchorwatch`` on its database ``anchorwatch`` (password not included)."""
        return self.database_url(ROLE)

    @property
    def admin_url(self) -> str:
        """The superuser through the Unix socket (trust), on the ``postgres`` database."""
        host = quote(str(self.socket_dir), safe="")
        return f"postgresql://{SUPERUSER}@/{SUPERUSER}?host={host}&port={self._started_port()}"

    def database_url(self, name: str) -> str:
        """The URL of the role ``anchorwatch`` on database ``name`` (password not included)."""
        _check_name(name)
        return f"postgresql://{ROLE}@127.0.0.1:{self._started_port()}/{name}"

    def database(self, name: str) -> PostgresDatabase:
        """A fresh database ``name`` (``new_database``) with the password to reach it."""
        return PostgresDatabase(url=self.new_database(name), password=self.password)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> PostgresServer:
        """Make the cluster, start the server, and create the role and its database."""
        if self._process is not None:
            raise RuntimeError("this PostgreSQL server is already started")
        bindir = self.bindir or server_binaries()
        if bindir is None:
            raise RuntimeError(_MISSING)
        self.bindir = bindir
        began = time.monotonic()
        try:
            self._account = _server_account()
            self.runtime_dir = Path(tempfile.mkdtemp(prefix="aw-pg-", dir="/tmp"))
            self.directory.mkdir(parents=True, exist_ok=True)
            if self._account is not None:
                os.chown(self.runtime_dir, self._account.pw_uid, self._account.pw_gid)
            atexit.register(self.stop)
            self._initdb()
            self._launch_on_a_free_port()
            self._create_role_and_database()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended; after 10 s, immediate,
        then SIGKILL), wait for it to exit, and remove its directories. Idempotent."""
        atexit.unregister(self.stop)
        if self._process is not None:
            _end(self._process)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.runtime_dir is not None:  # started (or tried to): its directories go
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            shutil.rmtree(self.directory, ignore_errors=True)

    def detach(self) -> None:
        """Leave the server running after this process exits (``anchorwatch demo --keep``):
        stop it later with ``pg_ctl stop -D`` its data directory, or by its pid."""
        atexit.unregister(self.stop)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ databases

    def new_database(self, name: str) -> str:
        """Create database ``name`` owned by ``anchorwatch``; its URL (no password)."""
        _check_name(name)
        self._admin(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(ROLE)
            )
        )
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, ending the sessions still on it; gone already is fine."""
        _check_name(name)
        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # ------------------------------------------------------------------ internals

    def _runtime(self) -> Path:
        if self.runtime_dir is None:
            raise RuntimeError("this PostgreSQL server is not started")
        return self.runtime_dir

    def _started_port(self) -> int:
        if not self.port:
            raise RuntimeError("this PostgreSQL server is not started")
        return self.port

    def _child(self) -> dict[str, Any]:
        """Popen arguments that run a server binary as the server's user, in its directory,
        in a session of its own (a terminal's Ctrl-C reaches pytest, which stops it)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        args: dict[str, Any] = {"env": env, "cwd": self._runtime(), "start_new_session": True}
        if self._account is not None:
            env["HOME"] = self._account.pw_dir
            env["USER"] = env["LOGNAME"] = self._account.pw_name
            args |= {
                "user": self._account.pw_uid,
                "group": self._account.pw_gid,
                "extra_groups": [],
            }
        return args

    def _binary(self, name: str) -> str:
        assert self.bindir is not None
        return str(self.bindir / name)

    def _initdb(self) -> None:
        result = subprocess.run(
            [
                self._binary("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            **self._child(),
        )
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise RuntimeError(f"initdb failed (exit status {result.returncode}):\n{output}")

    def _launch_on_a_free_port(self) -> None:
        """Start the server; a port taken between its choice and the bind means another."""
        for _ in range(_PORT_ATTEMPTS):
            self.port = free_port()
            self._launch()
            if self._wait_ready():
                return
        raise RuntimeError(
            f"PostgreSQL found no free port in {_PORT_ATTEMPTS} attempts; the end of its "
            f"log:\n{_log_tail(self.log_path)}"
        )

    def _launch(self) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self._log.flush()
        self._log_start = self._log.tell()
        settings = [arg for k, v in _SERVER_SETTINGS.items() for arg in ("-c", f"{k}={v}")]
        command = [self._binary("postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        self._process = subprocess.Popen(
            [*command, "-k", str(self.socket_dir), *settings],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            **self._child(),
        )

    def _wait_ready(self) -> bool:
        """True once the server accepts connections; False if it exited because its port
        was taken; raises (with the log's tail) on any other exit or after the timeout."""
        assert self._process is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.admin_url, connect_timeout=2):
                    return True
            except psycopg.OperationalError as e:
                error = str(e).strip()
            status = self._process.poll()
            if status is not None:
                self._process = None
                if "Address already in use" in _log_tail(self.log_path, 10, self._log_start):
                    return False
                raise RuntimeError(
                    f"PostgreSQL exited with status {status} while starting; the end of its "
                    f"log:\n{_log_tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not accept connections within {_READY_TIMEOUT_S:.0f}s "
                    f"(last error: {error}); the end of its log:\n{_log_tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _create_role_and_database(self) -> None:
        self._admin(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(ROLE), sql.Literal(self.password)
            )
        )
        self.new_database(ROLE)

    def _admin(self, statement: sql.Composed) -> None:
        """One statement as the superuser, outside a transaction (CREATE DATABASE needs it)."""
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement)


def _check_name(name: str) -> None:
    if not DATABASE_NAME.fullmatch(name):
        raise ValueError(
            f"not a database name we accept: {name!r} (wanted {DATABASE_NAME.pattern})"
        )


def _server_account() -> pwd.struct_passwd | None:
    """The ``postgres`` system user when we are root (initdb and postgres refuse root); None
    otherwise (the server runs as us)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "running as root, the private PostgreSQL server must run as the `postgres` system "
            "user, and there is none: install Debian's `postgresql` package, which makes it"
        ) from None


def _end(process: subprocess.Popen[bytes]) -> None:
    """SIGINT (fast shutdown), then SIGQUIT (immediate), then SIGKILL; wait for the exit."""
    for sig, wait_s in (
        (signal.SIGINT, _STOP_TIMEOUT_S),
        (signal.SIGQUIT, 5.0),
        (signal.SIGKILL, 10.0),
    ):
        if process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
