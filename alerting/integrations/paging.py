"""What the paging receivers (``pagerduty.py``, ``webhook.py``) share: their times
(``rfc3339``) and their one call, a JSON POST (``JsonPost``), made as every integration
calls out: once per call, through the ``Caller`` (in the service one attempt: the outbox
retries), classified by the one status classifier (2xx ok; 429 and 5xx retried, honouring
``Retry-After``; no answer retried; other statuses stop, with the server's words).

Errors never name the URL: a webhook URL is a secret (it may carry the receiver's key), and
requests' connection errors spell it out, so they are reported by their kind alone.
Redirects are not followed (a 3xx stops): a POST is not re-sent somewhere else unasked.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import orjson
import requests

from anchorwatch.alerting.notify import Caller, Ok, Permanent, Retryable, attempt, classify

#: How much of an error answer's body an error message keeps.
MAX_ERROR_TEXT = 300
#: Go's zero time, which Alertmanager sends as the endsAt of an alert still firing.
ZERO_TIME: Final = "0001-01-01T00:00:00Z"


def rfc3339(ms: int) -> str:
    """UTC, as Go writes a time (RFC 3339, the fraction without trailing zeros):
    ``2026-01-05T14:03:00Z``, ``2026-01-05T14:03:00.25Z``."""
    seconds, millis = divmod(ms, 1000)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{millis:03d}".rstrip("0").rstrip(".") + "Z"


def post_outcome(exc: Exception) -> Retryable | Permanent | None:
    """The outcome of a POST that raised; None for exceptions that are our bugs."""
    if isinstance(exc, requests.exceptions.Timeout | requests.exceptions.ConnectionError):
        return Retryable(f"no response (connection error: {type(exc).__name__})")
    if isinstance(exc, requests.exceptions.RequestException):
        return Permanent(f"request failed: {type(exc).__name__}")
    return None


class JsonPost:
    """POSTs JSON bodies to one URL with a session of its own (kept alive between calls)."""

    def __init__(
        self,
        service: str,
        url: str,
        caller: Caller,
        *,
        timeout_s: float,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._service = service
        self._url = url
        self._caller = caller
        self._timeout_s = timeout_s
        self._session = requests.Session()
        self._session.headers.update(
            {
                "Content-Type": "application/json",
                "User-Agent": "anchorwatch-alerting",
                **(headers or {}),
            }
        )

    def post(self, operation: str, body: dict[str, Any]) -> requests.Response:
        """The answer to one POST of ``body``; NotifyError unless it is a 2xx."""
        data = orjson.dumps(body)

        def once() -> requests.Response:
            response = self._session.post(
                self._url, data=data, timeout=self._timeout_s, allow_redirects=False
            )
            outcome = classify(
                response.status_code,
                " ".join(response.text[:MAX_ERROR_TEXT].split()),
                response.headers.get("Retry-After"),
            )
            if isinstance(outcome, Ok):
                return response
            raise _Failed(outcome)

        def run() -> requests.Response:
            return attempt(self._service, operation, once, _outcome)

        return self._caller.call(run, service=self._service, operation=operation)

    def close(self) -> None:
        self._session.close()


class _Failed(Exception):
    """An answer that is not a 2xx, carrying its outcome to ``attempt``."""

    def __init__(self, outcome: Retryable | Permanent) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _outcome(exc: Exception) -> Retryable | Permanent | None:
    return exc.outcome if isinstance(exc, _Failed) else post_outcome(exc)
