"""Shared by the alerting service's tests (unit and integration) and bench/alerting.py:
verdicts for chosen windows, the incident lifecycle they drive, and the local Slack with the
two read methods the service reconciles with.

``LocalSlackWithHistory`` adds ``conversations.history`` and ``conversations.replies`` to
the local Slack, answering as Slack does (newest first / parent then replies, ``oldest``,
``limit`` with cursor pagination, ``metadata`` with ``include_all_metadata``). It belongs in
``alerting/local_slack.py``; it lives here until that file (not ours) gains them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from anchorwatch.alerting.local_slack import LocalSlack, Request, Response, form_or_json
from anchorwatch.contracts import Verdict, WindowAggregate, verdict_id
from anchorwatch.policy.window import judge_window

T0 = 1_767_621_600_000  # 2026-01-05 14:00 UTC
MINUTE = 60_000

#: Window means of one full incident under the default policy and the static rule
#: (warning above 0.85, critical above 0.9, 6 requests): clean, two warnings (opens),
#: critical (escalates), critical, critical (a progress update with a 2-minute interval),
#: three clean windows (resolves).
LIFECYCLE = (0.5, 0.87, 0.88, 0.95, 0.93, 0.94, 0.5, 0.5, 0.5)


def verdict(
    doc_type: str, minute: int, mean: float, *, requests: int = 50, job_version: str = "j1"
) -> Verdict:
    """The verdict the drift job would write for this window (static rule, no baseline)."""
    start = T0 + minute * MINUTE
    window = WindowAggregate(
        doc_type=doc_type,
        window_start_ms=start,
        window_end_ms=start + MINUTE,
        request_count=requests,
        mean_drift=mean,
        p95_drift=min(1.0, mean + 0.04),
    )
    j = judge_window(window, None)
    return Verdict(
        verdict_id=verdict_id(doc_type, start, job_version),
        job_version=job_version,
        window=window,
        rule=j.rule,
        baseline_version=j.baseline_version,
        threshold=j.threshold,
        critical_threshold=j.critical_threshold,
        min_requests=j.min_requests,
        breach_level=j.breach_level,
        reasons=j.reasons,
    )


def lifecycle(doc_type: str, first_minute: int = 0) -> list[Verdict]:
    return [verdict(doc_type, first_minute + i, m) for i, m in enumerate(LIFECYCLE)]


class LocalSlackWithHistory(LocalSlack):
    def _web_api_call(self, method: str, request: Request) -> Response:
        handler = {
            "conversations.history": self._history,
            "conversations.replies": self._replies,
        }.get(method)
        if handler is None:
            return super()._web_api_call(method, request)
        params = form_or_json(request)
        auth = request.headers.get("authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else params.get("token")
        if not token or (self.token is not None and token != self.token):
            return self._error(method, "not_authed" if not token else "invalid_auth")
        with self.lock:
            result = handler(params)
        if result.get("ok") is False:
            return self._error(method, str(result["error"]))
        self._record(method, 200, None)
        return Response.json(result)

    @staticmethod
    def _shown(m: dict[str, Any], metadata: bool) -> dict[str, Any]:
        out = {k: m[k] for k in ("type", "ts", "text", "blocks")}
        if m.get("thread_ts"):
            out["thread_ts"] = m["thread_ts"]
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
        channel = self._resolve_channel(params.get("channel"))
        ts = str(params.get("ts") or "")
        parent = self._find(channel, ts) if channel else None
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        thread = [parent] + [
            m for m in self.messages if m["channel"] == channel and m.get("thread_ts") == ts
        ]
        return self._paged([self._shown(m, False) for m in thread], params)


# --------------------------------------------------------------------------- checks


def slack_threads(messages: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Parent ts -> its replies in order, for messages posted with a thread."""
    threads: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        if m.get("thread_ts"):
            threads.setdefault(m["thread_ts"], []).append(m)
    return threads


def parents_by_label(messages: list[dict[str, Any]]) -> Counter[str]:
    """How many parent messages each incident label got."""
    return Counter(
        m["params"]["metadata"]["event_payload"]["incident_label"]
        for m in messages
        if not m.get("thread_ts") and isinstance(m.get("params", {}).get("metadata"), dict)
    )
