"""Structured logs: one JSON object per line on stderr, with fixed fields.

Fields: ts (RFC 3339, UTC), level, logger, msg, plus whatever the call passed in
``extra={...}``. Secrets never go into a log call; settings print with secrets masked.

Ours, not python-json-logger's: to write these fields it needs as many lines of overrides
(renamed fields, a lower-case level, a millisecond UTC time) and still differs (``exc`` before
the extras, an added ``stack_info``, a dict message spread into fields).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # librdkafka and urllib3 are chatty at INFO.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
