"""What an integration is to the service: which incident changes it acts on, whether the
settings turn it on, how fast it may be called (per rate key, and in all), and the ``Sender``
that delivers its outbox entries (and reconciles one a crash or an ambiguous failure may
have delivered already).

The drainer (``outbox.py``) runs a sender; the engine (``engine.py``) reads ``actions`` to
turn each incident change into outbox entries; dry runs ask ``describe`` what would be sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from anchorwatch.alerting.notify import Caller, NotifyError, Permanent, PermanentError
from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.alerting.store import Action, OutboxEntry, Store

Outcome = Literal["sent", "reconciled", "suppressed", "superseded", "dry_run"]


@dataclass(frozen=True)
class Delivered:
    outcome: Outcome
    refs: dict[str, Any] = field(default_factory=dict)  # incident references to store


class Sender(Protocol):
    """Delivers one integration's entries one at a time. ``send`` raises NotifyError
    (RetryableError / PermanentError); ``reconcile`` says whether an entry that may have been
    sent already was (None: not found, send it). Senders subclass it for the defaults."""

    integration: str

    def bind(self, store: Store) -> None:
        """The sender thread's store, for what a sender learns as it goes."""
        return None

    def send(self, entry: OutboxEntry) -> Delivered: ...

    def reconcile(self, entry: OutboxEntry) -> Delivered | None:
        return None  # cannot tell: sent again (at least once)

    def rate_key(self, entry: OutboxEntry) -> str | None:
        """What the remote side limits the entry's rate by (Slack: its channel): each key
        gets the integration's ``rate_per_s``. None (the default): one key for all."""
        return None

    def close(self) -> None:
        """Let go of what it holds (connections, buffered records)."""
        return None


class BatchSender(Protocol):
    """Delivers entries in batches, each with its own result; a resend is harmless (no
    reconciliation)."""

    integration: str

    def bind(self, store: Store) -> None:
        """The sender thread's store, for what a sender learns as it goes."""
        return None

    def send_batch(self, entries: Sequence[OutboxEntry]) -> dict[int, Delivered | NotifyError]: ...

    def close(self) -> None:
        """Let go of what it holds (connections, buffered records)."""
        return None


@dataclass(frozen=True)
class Integration:
    name: str
    #: What each kind of incident change (opened, reopened, updated, progress, resolved)
    #: asks of it; a kind not listed sends nothing.
    actions: Mapping[str, Action]
    enabled: Callable[[AlertingSettings], bool]
    #: The sender for these settings; its remote calls go through the caller.
    sender: Callable[[AlertingSettings, Caller], Sender | BatchSender]
    #: What a dry run logs instead of sending an entry.
    describe: Callable[[AlertingSettings, OutboxEntry], dict[str, Any]]
    #: Most calls started per second per rate key (``Sender.rate_key``; None: no limit).
    rate_per_s: Callable[[AlertingSettings], float | None] = lambda settings: None
    #: Most calls started per second over all its rate keys (None: no limit but theirs).
    total_rate_per_s: Callable[[AlertingSettings], float | None] = lambda settings: None
    #: What its entries carry: the notification payload (``payload.py``) or the drift event.
    carries: Literal["notification", "event"] = "notification"
    #: After a change of this kind, a second entry of that kind (Jira: a reopened ticket
    #: gets a comment saying why; Slack: an update's chart), when ``then_if`` says so for
    #: these settings and the change's payload.
    then: Mapping[str, str] = field(default_factory=dict)
    then_if: Callable[[AlertingSettings, dict[str, Any]], bool] = lambda settings, payload: True
    #: Whether a change of this kind, with this payload, is for it at all (the paging
    #: receivers route by the incident's severity): no entry is written when it says no.
    routes: Callable[[AlertingSettings, str, dict[str, Any]], bool] = (
        lambda settings, kind, payload: True
    )


def missing(integration: str, action: str, what: str) -> PermanentError:
    """An entry that cannot be sent: what it refers to does not exist."""
    return PermanentError(integration, action, Permanent(what))
