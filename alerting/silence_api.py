"""Silences over the service's HTTP endpoint, for tools and chat bots (the CLI writes the
state file directly):

- ``GET /api/v1/silences`` (``?all=1``: ended ones too): ``{"silences": [...]}``
- ``POST /api/v1/silences`` with ``{"doc_type": "invoice" | "all_types": true,
  "severity"?, "duration": "2h", "reason": "...", "author": "..."}``: 201 and the silence
- ``DELETE /api/v1/silences/<id>?author=...``: the silence, expired

Every call needs ``Authorization: Bearer <alerting.api_token>``; without that setting the
API is off (404 on every call, so nobody can write silences by default). Errors are 4xx
with ``{"error": "<field>: <reason>"}``; nothing changes on an error.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from anchorwatch.alerting.database import StateLocation
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.silences import SilenceError, new_silence, parse_duration

PREFIX = "/api/v1/silences"
MAX_BODY = 64 * 1024
_FIELDS = {"doc_type", "all_types", "severity", "duration", "reason", "author"}

#: (status, content type, body)
Response = tuple[int, str, bytes]


def _json(status: int, value: Any) -> Response:
    return status, "application/json", orjson.dumps(value) + b"\n"


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": message})


class SilenceApi:
    def __init__(
        self,
        state: Path | StateLocation,
        token: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._state = state
        self._token = token.encode() if token else None
        self._clock = clock

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Response:
        """One request; ``target`` is the request line's path and query, ``headers`` keyed
        in lower case."""
        if self._token is None:
            return _error(404, "the silences API is off: set alerting.api_token to turn it on")
        given = headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            credential.strip().encode(), self._token
        ):
            return _error(401, "Authorization: a bearer token (alerting.api_token) is required")
        url = urlsplit(target)
        rest = url.path[len(PREFIX) :].strip("/")
        query = parse_qs(url.query)
        try:
            if method == "GET" and not rest:
                return self._list(show_all=query.get("all", ["0"])[0] in ("1", "true"))
            if method == "POST" and not rest:
                return self._add(body)
            if method == "DELETE" and rest and "/" not in rest:
                return self._expire(unquote(rest), query.get("author", [""])[0])
        except SilenceError as exc:
            return _error(404 if "no silence" in str(exc) else 400, str(exc))
        return _error(405, f"{method} {url.path}: not a silences call (see docs/alerting.md)")

    def _book(self) -> SilenceBook:
        return SilenceBook(self._state)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _list(self, *, show_all: bool) -> Response:
        book = self._book()
        try:
            found = book.all() if show_all else book.active(self._now_ms())
        finally:
            book.close()
        return _json(200, {"silences": [asdict(s) for s in found]})

    def _add(self, body: bytes) -> Response:
        if len(body) > MAX_BODY:
            return _error(413, f"body: larger than {MAX_BODY} bytes")
        try:
            given = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _error(400, f"body: not JSON ({exc})")
        if not isinstance(given, dict):
            return _error(400, "body: a JSON object is expected")
        unknown = sorted(set(given) - _FIELDS)
        if unknown:
            return _error(400, f"{unknown[0]}: not a field of a silence ({sorted(_FIELDS)})")
        for name in ("doc_type", "severity", "duration", "reason", "author"):
            if given.get(name) is not None and not isinstance(given[name], str):
                return _error(400, f"{name}: a string is expected")
        if not isinstance(given.get("all_types", False), bool):
            return _error(400, "all_types: true or false")
        if "duration" not in given:
            raise SilenceError('duration: a silence needs an end (e.g. "2h")')
        made = new_silence(
            doc_type=given.get("doc_type"),
            all_types=given.get("all_types", False),
            severity=given.get("severity"),
            duration_s=parse_duration(given["duration"]),
            reason=given.get("reason") or "",
            author=given.get("author") or "",
            now_ms=self._now_ms(),
        )
        book = self._book()
        try:
            book.add(made)
        finally:
            book.close()
        return _json(201, asdict(made))

    def _expire(self, silence_id: str, author: str) -> Response:
        if not author.strip():
            raise SilenceError("author: say who expires it (?author=...)")
        book = self._book()
        try:
            ended = book.expire(silence_id, by=author.strip()[:200], now_ms=self._now_ms())
        finally:
            book.close()
        return _json(200, asdict(ended))
