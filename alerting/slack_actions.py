"""The buttons of an incident's Slack parent message, as Slack sends their clicks: ``POST
/slack/interactions`` on the service's HTTP endpoint (the Slack app's interactivity request
URL), a form body ``payload=<JSON>`` of type ``block_actions``.

Each request is checked before anything is read from it: Slack's signature
(``X-Slack-Signature``, ``v0=`` HMAC-SHA256 of ``v0:<timestamp>:<body>`` with the app's
signing secret, checked by slack_sdk's ``SignatureVerifier``), a timestamp at most 5
minutes from now, and not a replay (each signed request is remembered in the state file for
10 minutes, longer than a timestamp stays fresh). Without ``slack.signing_secret`` the path
answers 404 and the parent messages have no buttons.

- ``anchorwatch_ack``: recorded in ``slack_actions``; the engine applies it (``Engine.
  apply_acks``, from the service loop) in one transaction with the notifications it causes.
- ``anchorwatch_silence_1h``: a silence of the incident's doc type for an hour.
- ``anchorwatch_silence_resolved``: a silence of that incident alone, ended when it resolves.

Silences are written here, as the silences API writes them; the engine reads them at its
next batch. Every refusal says why and changes nothing (the request's signature is
remembered only with what it did). Answers are quick (one short SQLite transaction): Slack
wants one within 3 seconds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs

import orjson
from slack_sdk.signature import Clock, SignatureVerifier

from anchorwatch.alerting.database import Database, StateLocation
from anchorwatch.alerting.integrations.slack.render import ACK, SILENCE_1H, SILENCE_RESOLVED
from anchorwatch.alerting.silence_book import insert_silence, log_added
from anchorwatch.alerting.silences import MAX_SILENCE_S, SilenceError, new_silence
from anchorwatch.alerting.store import FILENAME, PG_SCHEMA, Store

log = logging.getLogger(__name__)

PATH: Final = "/slack/interactions"
#: How far a request's timestamp may be from now (Slack's advice, and the verifier's).
FRESH_S: Final = 5 * 60
#: How long a signed request is remembered, to refuse it a second time.
REPLAY_MS: Final = 10 * 60_000
SILENCE_REASON: Final = "from Slack"
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,30}$")

#: (status, content type, body)
Response = tuple[int, str, bytes]


def _answer(status: int, text: str) -> Response:
    key = "text" if status < 300 else "error"
    return status, "application/json", orjson.dumps({"ok": status < 300, key: text}) + b"\n"


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Click:
    """One button clicked, as the payload says."""

    action_id: str
    incident_id: str
    user_id: str
    user_name: str


@dataclass(frozen=True)
class PendingAck:
    """An acknowledgement recorded, not yet applied by the engine."""

    id: int
    incident_id: str
    user_id: str
    user_name: str
    received_ms: int

    def applied(self, outcome: str, now_ms: int) -> tuple[str, tuple[Any, ...]]:
        """The statement that marks it applied (in the engine's transaction)."""
        return (
            "UPDATE slack_actions SET applied_ms = ?, outcome = ? WHERE id = ?",
            (now_ms, outcome, self.id),
        )


class _Clock(Clock):
    """The verifier's clock (``now()`` in seconds) from ours."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock()


def parse_click(body: bytes) -> Click:
    """The click in a ``block_actions`` payload; Refused (400) with the reason otherwise."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = orjson.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, orjson.JSONDecodeError):
        raise Refused(400, "payload: a form field payload=<JSON> is expected") from None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        raise Refused(400, "payload: only block_actions (button clicks) are taken")
    actions, user = payload.get("actions"), payload.get("user")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise Refused(400, "payload.actions: one action is expected")
    if not isinstance(user, dict) or not _USER_ID.match(str(user.get("id", ""))):
        raise Refused(400, "payload.user.id: a Slack user id is expected")
    action = actions[0]
    action_id, value = action.get("action_id"), action.get("value")
    if action_id not in (ACK, SILENCE_1H, SILENCE_RESOLVED):
        raise Refused(400, f"payload.actions[0].action_id: {str(action_id)[:80]!r} is not ours")
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise Refused(400, "payload.actions[0].value: the incident id is expected")
    name = user.get("username") or user.get("name") or user["id"]
    return Click(action_id, value, str(user["id"]), str(name)[:200])


class SlackInteractions:
    """The handler of ``POST /slack/interactions`` (``http.py`` routes it here)."""

    def __init__(
        self,
        state: Path | StateLocation,
        signing_secret: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._state = state
        self._clock = clock
        self._verifier = (
            SignatureVerifier(signing_secret, clock=_Clock(clock)) if signing_secret else None
        )

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Response:
        """One request; ``headers`` keyed in lower case."""
        if self._verifier is None:
            return _answer(404, "Slack interactivity is off: set slack.signing_secret")
        if method != "POST":
            return _answer(405, f"{method}: Slack posts its interactions")
        try:
            signed = self._verify(headers, body)
            click = parse_click(body)
            text = self._record(click, signed)
        except Refused as refused:
            log.warning(
                "slack interaction refused",
                extra={"status": refused.status, "reason": str(refused)},
            )
            return _answer(refused.status, str(refused))
        return _answer(200, text)

    def _verify(self, headers: Mapping[str, str], body: bytes) -> str:
        """The request's (timestamp, signature) as one key; Refused (401) if unsigned,
        stale or not signed with our secret."""
        assert self._verifier is not None
        stamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if not stamp or not signature:
            raise Refused(401, "unsigned: X-Slack-Request-Timestamp and X-Slack-Signature needed")
        if not stamp.isdigit():
            raise Refused(401, "X-Slack-Request-Timestamp: not a Unix time")
        if abs(self._clock() - int(stamp)) > FRESH_S:
            raise Refused(401, "stale: X-Slack-Request-Timestamp is more than 5 minutes off")
        if not self._verifier.is_valid(body, stamp, signature):
            raise Refused(401, "X-Slack-Signature: does not match (not signed by our Slack app)")
        return f"{stamp}:{signature}"

    def _record(self, click: Click, signed: str) -> str:
        """What the click asks for, with its signature remembered, in one transaction."""
        Store(self._state, create=False).close()  # the schema is current
        now_ms = int(self._clock() * 1000)
        db = Database(self._state, filename=FILENAME, schema=PG_SCHEMA, create=False, timeout_s=10)
        try:
            with db.write():
                text, made = self._apply(db, click, signed, now_ms)
        finally:
            db.close()
        if made is not None:
            log_added(made)
        log.info(
            "slack interaction",
            extra={
                "action_id": click.action_id,
                "incident_id": click.incident_id,
                "user_id": click.user_id,
            },
        )
        return text

    def _apply(self, db: Database, click: Click, signed: str, now_ms: int) -> tuple[str, Any]:
        db.execute("DELETE FROM slack_signatures WHERE seen_ms < ?", (now_ms - REPLAY_MS,))
        if db.execute("SELECT 1 FROM slack_signatures WHERE signature = ?", (signed,)).fetchone():
            raise Refused(409, "replayed: this signed request was received before")
        found = db.execute(
            "SELECT doc_type, state, acked_by FROM incidents WHERE incident_id = ?",
            (click.incident_id,),
        ).fetchone()
        if found is None:
            raise Refused(404, f"incident_id: no incident {click.incident_id[:80]!r}")
        doc_type, state, acked_by = found
        if state == "resolved":
            raise Refused(409, "incident_id: the incident has resolved; nothing to do")
        made = None
        if click.action_id == ACK:
            pending = db.execute(
                "SELECT user_id FROM slack_actions WHERE incident_id = ? AND action = 'ack' "
                "AND applied_ms IS NULL ORDER BY id LIMIT 1",
                (click.incident_id,),
            ).fetchone()
            if acked_by or pending:
                # A no-op: only the signature is remembered (a replay is refused as one).
                db.execute("INSERT INTO slack_signatures VALUES (?, ?)", (signed, now_ms))
                return f"already acknowledged by <@{acked_by or pending[0]}>", None
            db.execute(
                "INSERT INTO slack_actions (incident_id, action, user_id, user_name, "
                "received_ms) VALUES (?, 'ack', ?, ?, ?)",
                (click.incident_id, click.user_id, click.user_name, now_ms),
            )
            text = f"acknowledged by <@{click.user_id}>"
        else:
            until_resolved = click.action_id == SILENCE_RESOLVED
            try:
                made = new_silence(
                    doc_type=doc_type,
                    all_types=False,
                    severity=None,
                    duration_s=MAX_SILENCE_S if until_resolved else 3600,
                    reason=SILENCE_REASON,
                    author=f"{click.user_name} (Slack {click.user_id})",
                    now_ms=now_ms,
                    incident_id=click.incident_id if until_resolved else None,
                )
            except SilenceError as exc:
                raise Refused(400, str(exc)) from None
            insert_silence(db, made)
            text = f"{made.describe()} made by <@{click.user_id}>"
        db.execute("INSERT INTO slack_signatures VALUES (?, ?)", (signed, now_ms))
        return text, made


class AckQueue:
    """The engine's view of ``slack_actions``: the acknowledgements not yet applied (its own
    connection, as ``SilenceBook``; they are marked applied in the engine's transaction)."""

    def __init__(self, state: Path | StateLocation) -> None:
        self._db = Database(state, filename=FILENAME, schema=PG_SCHEMA, create=False)

    def pending(self) -> list[PendingAck]:
        rows = self._db.execute(
            "SELECT id, incident_id, user_id, user_name, received_ms FROM slack_actions "
            "WHERE applied_ms IS NULL AND action = 'ack' ORDER BY id"
        ).fetchall()
        return [PendingAck(*r) for r in rows]

    def close(self) -> None:
        self._db.close()
