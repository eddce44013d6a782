"""A local Slack that speaks the Web API methods and incoming webhooks the notifier uses,
with failure injection. For tests and for seeing messages without a Slack workspace.

Web API (``POST /api/<method>``, form or JSON body, token as ``Authorization: Bearer``):
``auth.test``, ``chat.postMessage``, ``chat.update``, ``files.getUploadURLExternal``,
``files.completeUploadExternal``, ``conversations.history`` and ``conversations.replies``
(file shares listed with their files' id, name and title, as Slack lists them), plus the
upload URL it hands out (``POST /upload/v1/<id>``,
raw bytes). Errors look like Slack's: HTTP 200 with ``{"ok": false, "error": ...}``, 429
with ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``.
Incoming webhooks: ``POST /services/T.../B.../X...`` (JSON), answering ``ok`` or Slack's
plain-text errors (``invalid_payload``, ``no_text``, ...).

What it received: ``GET /_local/messages``, ``/_local/files``, ``/_local/files/<id>`` (the
bytes), ``/_local/requests``; a page for people at ``GET /`` (see ``pages.py``). Failure
injection (see ``server.py``): ``POST /_local/faults`` with ``{"method": "chat.postMessage",
"status": 429, "retry_after": 1, "times": 2}`` (``method`` also ``webhook``, ``upload``;
``error`` for a 200 ``ok:false``), ``DELETE /_local/faults``, ``POST /_local/reset``.

Buttons: with ``interactivity_url`` and ``signing_secret`` the page's buttons work: a click
(``POST /_local/click``) is posted, signed, to that URL as Slack does
(``slack_interactions.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from anchorwatch.alerting.fakes.pages import slack_page
from anchorwatch.alerting.fakes.server import Fault, LocalServer, Request, Response, form_or_json
from anchorwatch.alerting.fakes.slack_interactions import block_actions_body, send_click

# --------------------------------------------------------------------------- Slack

_BLOCK_TYPES = {"section", "context", "divider", "header", "image", "actions", "rich_text"}


def _channel_id(name: str) -> str:
    if name[:1] in ("C", "G", "D") and name[1:].isalnum() and name.isupper():
        return name
    return "C" + hashlib.sha256(name.lstrip("#").encode()).hexdigest()[:10].upper()


def _blocks_error(blocks: Any) -> str | None:
    """Slack's own Block Kit limits, so an oversized message fails here as it would there."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") not in _BLOCK_TYPES:
            return "invalid_blocks"
        text = block.get("text")
        if isinstance(text, dict) and len(str(text.get("text", ""))) > 3000:
            return "invalid_blocks"
        fields = block.get("fields", [])
        if len(fields) > 10 or any(len(str(f.get("text", ""))) > 2000 for f in fields):
            return "invalid_blocks"
        if block.get("type") == "context" and len(block.get("elements", [])) > 10:
            return "invalid_blocks"
    return None


class LocalSlack(LocalServer):
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        *,
        interactivity_url: str | None = None,
        signing_secret: str | None = None,
    ) -> None:
        super().__init__(host, port)
        self.token = token  # when set, every Web API call must present exactly this token
        # Where the buttons' clicks go, signed with this secret (both: the buttons work).
        self.interactivity_url = interactivity_url
        self.signing_secret = signing_secret
        self._ts = itertools.count(1)
        self._file_ids = itertools.count(1)
        self.messages: list[dict[str, Any]] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.channel_names: dict[str, str] = {}

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/services/T0LOCAL/B0LOCAL/local-webhook"

    # ----------------------------------------------------------------- dispatch

    def handle(self, request: Request) -> Response:
        path = request.path
        if request.method == "GET" and (path == "/" or path.startswith("/archives/")):
            return Response.text(self._page(path), content_type="text/html")
        if path.startswith("/_local/"):
            return self._local(request)
        if path.startswith("/api/"):
            return self._web_api(path[len("/api/") :], request)
        if path.startswith("/upload/v1/"):
            return self._upload(path[len("/upload/v1/") :], request)
        if path.startswith("/services/"):
            return self._webhook(path, request)
        return Response.text("not found", 404)

    def _record(self, method: str, status: int, error: str | None) -> None:
        self.requests.append(
            {"method": method, "status": status, "error": error, "at": time.time()}
        )

    def fault_answer(self, method: str, fault: Fault, headers: dict[str, str]) -> Response:
        if method in ("webhook", "upload"):  # these answer in plain text
            text = fault.error or HTTPStatus(fault.status).phrase.lower().replace(" ", "_")
            return Response(fault.status, text.encode(), "text/plain", headers)
        if fault.status == 429:
            data = {"ok": False, "error": fault.error or "ratelimited"}
            return Response(429, json.dumps(data).encode(), headers=headers)
        if fault.status >= 500 and fault.error is None:
            phrase = HTTPStatus(fault.status).phrase
            page = f"<html><body><h1>{fault.status} {phrase}</h1></body></html>"
            return Response(fault.status, page.encode(), "text/html", headers)
        data = {"ok": False, "error": fault.error or "internal_error"}
        return Response(fault.status, json.dumps(data).encode(), headers=headers)

    def _noted(self, method: str) -> Callable[[Fault], None]:
        return lambda fault: self._record(method, fault.status, fault.error or "fault")

    # ----------------------------------------------------------------- Web API

    def _web_api(self, method: str, request: Request) -> Response:
        return self.faulted(
            method, lambda _: self._web_api_call(method, request), note=self._noted(method)
        )

    def _web_api_call(self, method: str, request: Request) -> Response:
        try:
            params = form_or_json(request)
        except (ValueError, UnicodeDecodeError):
            return self._error(method, "invalid_json")
        auth = request.headers.get("authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else params.get("token")
        if not token:
            return self._error(method, "not_authed")
        if self.token is not None and token != self.token:
            return self._error(method, "invalid_auth")
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
            # Read back by the alerting service to reconcile after a crash mid-send.
            "conversations.history": self._history,
            "conversations.replies": self._replies,
        }.get(method)
        if handler is None:
            self._record(method, 404, "unknown_method")
            return Response.json({"ok": False, "error": "unknown_method"}, 404)
        with self.lock:
            result = handler(params)
        if result.get("ok") is False:
            return self._error(method, str(result["error"]))
        self._record(method, 200, None)
        return Response.json(result)

    def _error(self, method: str, error: str) -> Response:
        self._record(method, 200, error)
        return Response.json({"ok": False, "error": error})

    def _shown(self, m: dict[str, Any], metadata: bool) -> dict[str, Any]:
        out = {k: m[k] for k in ("type", "ts", "text", "blocks")}
        if m.get("thread_ts"):
            out["thread_ts"] = m["thread_ts"]
        if m.get("files"):  # a file share lists its files, as Slack's history does
            out["subtype"] = m.get("subtype")
            out["files"] = [
                {k: self.files[f].get(k) for k in ("id", "name", "title")}
                for f in m["files"]
                if f in self.files
            ]
        if metadata and isinstance(m["params"].get("metadata"), dict):
            out["metadata"] = m["params"]["metadata"]
        return out

    @staticmethod
    def _paged(items: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        start = int(params.get("cursor") or 0)
        limit = max(1, min(int(params.get("limit") or 100), 1000))
        page = items[start : start + limit]
        more = start + limit < len(items)
        return {
            "ok": True,
            "messages": page,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        """Channel messages (top level, or broadcast replies), newest first."""
        channel = self._resolve_channel(params.get("channel"))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(params.get("oldest") or 0)
        metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            self._shown(m, metadata)
            for m in self.messages
            if m["channel"] == channel
            and float(m["ts"]) >= oldest
            and (not m.get("thread_ts") or m.get("reply_broadcast"))
        ]
        result = self._paged(list(reversed(found)), params)
        result["channel"] = channel
        return result

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread: the parent, then its replies in order."""
        channel = self._resolve_channel(params.get("channel"))
        ts = str(params.get("ts") or "")
        parent = self._find(channel, ts) if channel else None
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        thread = [parent] + [
            m for m in self.messages if m["channel"] == channel and m.get("thread_ts") == ts
        ]
        return self._paged([self._shown(m, False) for m in thread], params)

    def _auth_test(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"{self.url}/",
            "team": "anchorwatch-local",
            "user": "anchorwatch",
            "team_id": "T0LOCAL",
            "user_id": "U0LOCAL",
            "bot_id": "B0LOCAL",
        }

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _resolve_channel(self, name: Any) -> str | None:
        if not isinstance(name, str) or not name.strip():
            return None
        cid = _channel_id(name.strip())
        self.channel_names.setdefault(cid, name.strip())
        return cid

    @staticmethod
    def _parse_blocks(params: dict[str, Any]) -> Any:
        blocks = params.get("blocks")
        if isinstance(blocks, str):  # form-encoded calls send blocks as a JSON string
            try:
                blocks = json.loads(blocks)
            except ValueError:
                return False
        return blocks

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(params.get("channel"))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        blocks = self._parse_blocks(params)
        text = params.get("text") or ""
        if blocks is False or (blocks is not None and _blocks_error(blocks)):
            return {"ok": False, "error": "invalid_blocks"}
        if not text and not blocks and not params.get("attachments"):
            return {"ok": False, "error": "no_text"}
        if len(text) > 40_000:
            return {"ok": False, "error": "msg_too_long"}
        thread_ts = params.get("thread_ts") or None
        if thread_ts and not self._find(channel, str(thread_ts)):
            return {"ok": False, "error": "thread_not_found"}
        message = {
            "type": "message",
            "channel": channel,
            "channel_name": self.channel_names[channel],
            "ts": self._next_ts(),
            "thread_ts": thread_ts,
            "text": text,
            "blocks": blocks or [],
            "reply_broadcast": bool(params.get("reply_broadcast")),
            "params": params,
            "edits": [],
        }
        self.messages.append(message)
        shown = {k: message[k] for k in ("type", "ts", "thread_ts", "text", "blocks")}
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": shown}

    def _find(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages if m["channel"] == channel and m["ts"] == ts), None)

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(params.get("channel"))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        message = self._find(channel, str(params.get("ts", "")))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        blocks = self._parse_blocks(params)
        if blocks is False or (blocks is not None and _blocks_error(blocks)):
            return {"ok": False, "error": "invalid_blocks"}
        text = params.get("text")
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        message["edits"].append({"text": message["text"], "blocks": message["blocks"]})
        message["text"] = text or ""
        if blocks is not None:
            message["blocks"] = blocks
        return {"ok": True, "channel": channel, "ts": message["ts"], "text": message["text"]}

    def _get_upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = params.get("filename"), params.get("length")
        try:
            size = int(length) if length is not None else -1
        except ValueError:
            size = -1
        if not filename or size < 0:
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._file_ids):08d}LOCAL"
        self.files[file_id] = {
            "id": file_id,
            "name": filename,
            "length": size,
            "alt_txt": params.get("alt_txt"),
            "data": None,
            "shared": False,
        }
        return {"ok": True, "upload_url": f"{self.url}/upload/v1/{file_id}", "file_id": file_id}

    def _upload(self, file_id: str, request: Request) -> Response:
        return self.faulted(
            "upload", lambda _: self._store_upload(file_id, request), note=self._noted("upload")
        )

    def _store_upload(self, file_id: str, request: Request) -> Response:
        with self.lock:
            entry = self.files.get(file_id)
            if entry is None or request.method != "POST":
                self._record("upload", 404, "not_found")
                return Response.text("not found", 404)
            entry["data"] = request.body
            self._record("upload", 200, None)
        return Response.text(f"OK - {len(request.body)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            items = params["files"]
            items = json.loads(items) if isinstance(items, str) else items
            ids = [str(f["id"]) for f in items]
        except (KeyError, TypeError, ValueError):
            return {"ok": False, "error": "invalid_arguments"}
        for fid in ids:
            entry = self.files.get(fid)
            if entry is None or entry["data"] is None:
                return {"ok": False, "error": "file_not_found"}
            if len(entry["data"]) != entry["length"]:
                return {"ok": False, "error": "file_upload_size_mismatch"}
        channel = (
            self._resolve_channel(params.get("channel_id")) if params.get("channel_id") else None
        )
        thread_ts = params.get("thread_ts") or None
        if thread_ts and (channel is None or not self._find(channel, str(thread_ts))):
            return {"ok": False, "error": "thread_not_found" if channel else "invalid_arguments"}
        shown = []
        for item, fid in zip(items, ids, strict=True):
            entry = self.files[fid]
            entry.update(title=item.get("title") or entry["name"], shared=channel is not None)
            shown.append(
                {
                    "id": fid,
                    "name": entry["name"],
                    "title": entry["title"],
                    "size": len(entry["data"]),
                    "permalink": f"{self.url}/_local/files/{fid}",
                }
            )
        if channel is not None:
            self.messages.append(
                {
                    "type": "message",
                    "subtype": "file_share",
                    "channel": channel,
                    "channel_name": self.channel_names[channel],
                    "ts": self._next_ts(),
                    "thread_ts": thread_ts,
                    "text": params.get("initial_comment") or "",
                    "blocks": [],
                    "files": ids,
                    "params": params,
                    "edits": [],
                }
            )
        return {"ok": True, "files": shown}

    # ----------------------------------------------------------------- webhooks

    def _webhook(self, path: str, request: Request) -> Response:
        return self.faulted(
            "webhook", lambda _: self._webhook_post(path, request), note=self._noted("webhook")
        )

    def _webhook_post(self, path: str, request: Request) -> Response:
        try:
            payload = request.json()
        except (ValueError, UnicodeDecodeError):
            payload = None
        if not isinstance(payload, dict):
            self._record("webhook", 400, "invalid_payload")
            return Response.text("invalid_payload", 400)
        blocks = payload.get("blocks")
        if blocks is not None and _blocks_error(blocks):
            self._record("webhook", 400, "invalid_blocks")
            return Response.text("invalid_blocks", 400)
        attachments = payload.get("attachments")
        if attachments is not None and (
            not isinstance(attachments, list) or not all(isinstance(a, dict) for a in attachments)
        ):
            self._record("webhook", 400, "invalid_attachments")
            return Response.text("invalid_attachments", 400)
        # Legacy attachments alone are a message too (Alertmanager's slack_configs send them).
        shown = payload.get("text") or _attachments_text(attachments or [])
        if not shown and not blocks:
            self._record("webhook", 400, "no_text")
            return Response.text("no_text", 400)
        with self.lock:
            self.messages.append(
                {
                    "type": "message",
                    "subtype": "webhook",
                    "channel": "webhook",
                    "channel_name": path,
                    "ts": self._next_ts(),
                    "thread_ts": None,
                    "text": shown or "",
                    "blocks": blocks or [],
                    "params": payload,
                    "edits": [],
                }
            )
            self._record("webhook", 200, None)
        return Response.text("ok")

    # ----------------------------------------------------------------- inspection

    def _click(self, request: Request) -> Response:
        """A button clicked on the page, sent on to the app as Slack sends it."""
        try:
            given = request.json()
            channel, ts, action_id = (str(given[k]) for k in ("channel", "ts", "action_id"))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return Response.json({"ok": False, "error": "channel, ts and action_id needed"}, 400)
        if not self.interactivity_url or not self.signing_secret:
            return Response.json(
                {"ok": False, "error": "no interactivity URL and signing secret: start "
                 "local-slack with --interactivity-url and --signing-secret"}, 409,
            )  # fmt: skip
        with self.lock:
            message = self._find(channel, ts)
            name = self.channel_names.get(channel, channel)
            body = block_actions_body(message, name, action_id, self.url) if message else None
        if body is None:
            return Response.json({"ok": False, "error": "no such button on that message"}, 404)
        status, answer = send_click(self.interactivity_url, self.signing_secret, body)
        with self.lock:
            self._record("interactivity", status, None if status < 300 else str(answer)[:300])
        return Response.json({"status": status, "answer": answer})

    def _local(self, request: Request) -> Response:
        path = request.path
        if path == "/_local/click" and request.method == "POST":
            return self._click(request)  # unlocked: the app may call back meanwhile
        with self.lock:
            if path == "/_local/messages":
                return Response.json({"messages": self.messages})
            if path == "/_local/requests":
                return Response.json({"requests": self.requests})
            if path == "/_local/files":
                return Response.json({"files": [self._file_meta(f) for f in self.files.values()]})
            if path.startswith("/_local/files/"):
                entry = self.files.get(path.rsplit("/", 1)[1])
                if entry is None or entry["data"] is None:
                    return Response.text("not found", 404)
                return Response(200, entry["data"], "image/png")
            if path == "/_local/reset" and request.method == "POST":
                self.messages.clear()
                self.files.clear()
                self.requests.clear()
                self.faults.clear()
                return Response.json({"ok": True})
        return Response.text("not found", 404)

    @staticmethod
    def _file_meta(entry: dict[str, Any]) -> dict[str, Any]:
        data = entry["data"]
        meta = {k: v for k, v in entry.items() if k != "data"}
        meta["size"] = None if data is None else len(data)
        meta["sha256"] = None if data is None else hashlib.sha256(data).hexdigest()
        return meta

    def _page(self, path: str = "/") -> str:
        """The channel view; ``/archives/<channel>/p<ts>`` (a permalink) highlights a thread."""
        with self.lock:
            messages = [dict(m) for m in self.messages]
            names = dict(self.channel_names)
        parts = path.strip("/").split("/")
        channel = parts[1] if len(parts) > 1 else None
        focus = None
        if len(parts) > 2 and parts[2][:1] == "p" and parts[2][1:].isdigit() and len(parts[2]) > 7:
            digits = parts[2][1:]
            focus = f"{digits[:-6]}.{digits[-6:]}"
        return slack_page(
            messages,
            names,
            channel=channel,
            focus_ts=focus,
            buttons=bool(self.interactivity_url and self.signing_secret),
        )


def _attachments_text(attachments: list[dict[str, object]]) -> str:
    """What Slack shows of legacy attachments: each one's pretext, title and text."""
    parts = [
        str(a[key])
        for a in attachments
        for key in ("pretext", "title", "text")
        if isinstance(a.get(key), str) and a[key]
    ]
    return "\n".join(parts)
