"""The local Slack's buttons: a click on the page (``POST /_local/click`` with ``{"channel",
"ts", "action_id"}``) is sent to the app's interactivity URL the way Slack sends it: a
``block_actions`` payload (the user, the channel, the message as it reads now, the one
action clicked), form-encoded as ``payload=<JSON>``, signed with the app's signing secret
(``X-Slack-Request-Timestamp`` and ``X-Slack-Signature: v0=`` HMAC-SHA256 of
``v0:<timestamp>:<body>``). The clicking user is a fixed local one (``U0LOCAL``,
``local-user``). The app's answer is handed back to the page.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, Final
from urllib.parse import urlencode

import requests

LOCAL_USER: Final = {"id": "U0LOCAL", "username": "local-user", "name": "local-user"}


def signature(secret: str, timestamp: str, body: str) -> str:
    """Slack's request signature of ``body`` sent at ``timestamp``."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with an interactivity request of this body."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature(secret, stamp, body),
    }


def find_button(message: dict[str, Any], action_id: str) -> tuple[str, dict[str, Any]] | None:
    """The button of ``action_id`` in the message's actions blocks, with its block id."""
    for block in message.get("blocks") or []:
        if not isinstance(block, dict) or block.get("type") != "actions":
            continue
        for element in block.get("elements") or []:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id") or ""), element
    return None


def block_actions_body(
    message: dict[str, Any], channel_name: str, action_id: str, base_url: str
) -> str | None:
    """The form body Slack posts for a click on ``action_id`` of ``message`` (None: the
    message has no such button)."""
    found = find_button(message, action_id)
    if found is None:
        return None
    block_id, button = found
    channel = str(message["channel"])
    action = {
        "type": "button",
        "action_id": action_id,
        "block_id": block_id,
        "text": button.get("text"),
        "value": button.get("value"),
        "action_ts": f"{time.time():.6f}",
    }
    if button.get("style"):
        action["style"] = button["style"]
    payload = {
        "type": "block_actions",
        "user": {**LOCAL_USER, "team_id": "T0LOCAL"},
        "api_app_id": "A0LOCAL",
        "team": {"id": "T0LOCAL", "domain": "anchorwatch-local"},
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": f"{int(time.time())}.local",
        "channel": {"id": channel, "name": channel_name.lstrip("#")},
        "message": {k: message.get(k) for k in ("type", "ts", "text", "blocks")},
        "response_url": f"{base_url}/_local/response",
        "actions": [action],
    }
    return urlencode({"payload": json.dumps(payload)})


def send_click(url: str, secret: str, body: str, timeout_s: float = 10) -> tuple[int, Any]:
    """POSTs the signed body to the interactivity URL: the answer's status and body."""
    try:
        answer = requests.post(
            url, data=body.encode(), headers=signed_headers(secret, body), timeout=timeout_s
        )
    except requests.RequestException as exc:
        return 502, {"ok": False, "error": f"interactivity URL unreachable: {type(exc).__name__}"}
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, {"ok": answer.ok, "text": answer.text[:500]}
