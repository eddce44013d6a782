"""One alerting service per state directory (SQLite): an exclusive lock on a file in it,
which the OS releases on any exit, ``kill -9`` included."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from anchorwatch.errors import AnchorwatchError


class AlertingServiceError(AnchorwatchError):
    """The service cannot start or run (state in use, unreadable, Kafka unusable)."""


class StateLock:
    """One service per state directory: an exclusive lock the OS releases on any exit."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self._path = state_dir / "lock"
        self._file: IO[str] = self._path.open("a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "?"
            self._file.close()
            raise AlertingServiceError(
                f"another alerting service (pid {holder}) uses {state_dir}"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    def release(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
