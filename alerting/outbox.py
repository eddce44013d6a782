"""The outbox's drainer: one sender thread per integration, delivering its entries in order
per incident, at its rate (per channel for Slack), retrying what failed.

A drainer takes, per incident, only the lowest unfinished entry (see ``Store.due``), so
updates never overtake the message they belong to, and an outage of one integration never
holds up another or the consumer. For each entry:

1. an entry left ``attempting`` (the process died, or the last try failed, after the request
   may have reached the remote side) is first *reconciled* by the integration's sender
   (Slack: the parent by its metadata, replies by their exact content; Jira: a comment by
   its exact body, a resolution by the ticket's status). Found: done, not re-sent.
2. otherwise it is marked ``attempting`` (committed) and sent; done and the references the
   send produced (Slack thread, Jira key) are committed together.

What each integration does is in ``integrations/``; this module knows none of them.

``TokenBucket`` is ours, not token-bucket's or pyrate-limiter's: the drainer asks how long a
key must wait without blocking, looks at the total cap without taking from it, forgets full
buckets and runs on the injected clock; token-bucket answers only yes or no on
``time.monotonic``, and pyrate-limiter paces by sliding-window logs in whole milliseconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

from anchorwatch.alerting.database import SessionEnded
from anchorwatch.alerting.integrations.base import BatchSender, Delivered, Sender
from anchorwatch.alerting.leadership import PartitionFenced
from anchorwatch.alerting.notify import NotifyError, RetryPolicy
from anchorwatch.alerting.service_metrics import ServiceMetrics
from anchorwatch.alerting.store import FOLLOW_UPS, OutboxEntry, Store

log = logging.getLogger(__name__)


class TokenBucket:
    """At most ``rate`` starts per second on average, ``burst`` at once."""

    def __init__(self, rate: float | None, burst: int, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._at = clock()

    def _refill(self) -> None:
        assert self._rate is not None
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now

    def wait_s(self, *, take: bool = True) -> float:
        """0 and a token taken (none with ``take=False``), or how long to wait before asking
        again."""
        if self._rate is None:
            return 0.0
        self._refill()
        if self._tokens >= 1.0:
            if take:
                self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate

    def full(self) -> bool:
        """Refilled to its burst: no different from a new bucket."""
        if self._rate is None:
            return True
        self._refill()
        return self._tokens >= self._burst


CrashHook = Callable[[str, str], None]


class Drainer:
    """Drains one integration's outbox entries, in order per incident.

    The drainer is the one loop that retries. A failure that may pass (a 5xx, a 429, a
    connection reset, even one after the server acted) reschedules the entry; the
    integration pauses for the retry policy's delay (or the server's ``Retry-After``) and
    then probes with one entry, so an outage is not hammered. The entry stays
    ``attempting``, so its next try first reconciles: a call that cannot be repeated safely
    (a Slack message, a Jira comment or transition) is retried only once it is known not to
    have landed. Retrying here rather than inside each call (the notifiers get one attempt
    per call) is what makes that possible, and more: a retry survives a restart (the
    schedule is in the state file), a stop never waits for a backoff to end, and an alert
    is never dropped because a budget ran out: only a permanent failure ends an entry.

    The rate applies per *rate key*, the sender's ``rate_key`` (Slack: the channel, which is
    what Slack limits; without one, a single key): an entry whose key has no token left is
    skipped for the round (its incident's later entries wait behind it, ``Store.due`` only
    offers the lowest) while other keys go on. ``total_rate_per_s`` caps all keys together
    (Slack: the workspace).
    """

    #: Past this many rate keys, the buckets that are full again are dropped: a full bucket
    #: is no different from a new one, so forgetting it is exact, and what stays is the keys
    #: used within the last burst / rate seconds.
    MAX_BUCKETS = 1_000
    #: A page of due entries whose keys all wait is read once more, this many times larger:
    #: entries of other keys may lie behind one key's backlog (deeper than that, they wait
    #: until it shrinks). Not for a sender without keys: there are no others.
    WIDEN = 16

    def __init__(
        self,
        sender: Sender | BatchSender,
        store: Store,
        retry: RetryPolicy,
        metrics: ServiceMetrics,
        *,
        rate_per_s: float | None = None,
        burst: int = 1,
        total_rate_per_s: float | None = None,
        batch_size: int = 200,
        clock: Callable[[], float] = time.time,
        crash: CrashHook = lambda point, integration: None,
    ) -> None:
        self.integration = sender.integration
        self._batch: BatchSender | None = None
        self._single: Sender | None = None
        self._rate_key: Callable[[OutboxEntry], str | None] | None = None
        if hasattr(sender, "send_batch"):
            self._batch = cast(BatchSender, sender)
        else:
            self._single = sender
            self._rate_key = getattr(sender, "rate_key", None)
        sender.bind(store)
        self._store = store
        self._retry = retry
        self._metrics = metrics
        self._rate = rate_per_s
        self._burst = burst
        self._buckets: dict[str | None, TokenBucket] = {}  # per rate key
        self._total = TokenBucket(total_rate_per_s, burst, clock)
        self._batch_size = batch_size
        self._clock = clock
        self._crash = crash
        self._failures = 0  # consecutive retryable failures: the integration's backoff
        self.paused_until = 0.0
        self.wake = threading.Event()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def interrupt(self) -> None:
        """A stop: the sender cuts short what may take long (a batch Kafka does not
        acknowledge); what it did not finish stays in the outbox."""
        self.wake.set()
        sender = self._batch or self._single
        if (interrupt := getattr(sender, "interrupt", None)) is not None:
            interrupt()

    def pending(self) -> int:
        n = self._store.pending_counts([self.integration])[self.integration]
        self._metrics.outbox_pending.labels(self.integration).set(n)
        return n

    def drain_once(self, stop: threading.Event | None = None) -> float | None:
        """Handle every entry due now. Returns how long to wait before the next round
        (None: nothing left that will be due without new work)."""
        limit = self._batch_size
        while stop is None or not stop.is_set():
            now = self._clock()
            if now < self.paused_until:
                return self.paused_until - now
            entries = self._store.due(self.integration, self._now_ms(), limit)
            if not entries:
                break
            if self._batch is not None:
                self._send_batch(self._batch, entries)
                continue
            assert self._single is not None
            sent = False
            skipped: dict[str | None, float] = {}  # keys whose buckets are empty: their waits
            for entry in entries:
                if stop is not None and stop.is_set():
                    return None
                if (wait := self._total.wait_s(take=False)) > 0:
                    return wait  # the cap over all keys: no key may start
                key = self._key(entry)
                if (wait := self._bucket(key).wait_s()) > 0:
                    skipped[key] = wait  # this key waits; other keys go on
                    continue
                self._total.wait_s()
                self._process(self._single, entry)
                self._rekey(entry, key)
                sent = True
                if self._clock() < self.paused_until:
                    break
            if not sent:  # every entry skipped: the soonest key's wait (they are due now)
                full_page = len(entries) == limit
                if full_page and limit == self._batch_size and None not in skipped:
                    limit *= self.WIDEN  # once: other keys may be behind this page
                    continue
                return min(skipped.values())
        due = self._store.next_due_ms(self.integration)
        if due is None:
            return None
        return max(due / 1000 - self._clock(), 0.0)

    def _key(self, entry: OutboxEntry) -> str | None:
        """The entry's rate key (None: the integration's one key)."""
        if self._rate_key is None:
            return None
        try:
            return self._rate_key(entry)
        except Exception:  # an entry it cannot read: sending it fails, and is handled, there
            return None

    def _rekey(self, entry: OutboxEntry, key: str | None) -> None:
        """A send may teach the sender another name for the key (Slack: the id of a channel
        routed by name): its bucket follows, so the channel is not paced as two."""
        new = self._key(entry)
        if new != key and new not in self._buckets:
            self._buckets[new] = self._buckets.pop(key)

    def _bucket(self, key: str | None) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.MAX_BUCKETS:
                self._buckets = {k: b for k, b in self._buckets.items() if not b.full()}
            bucket = self._buckets[key] = TokenBucket(self._rate, self._burst, self._clock)
        return bucket

    def run(self, stop: threading.Event) -> None:
        """The sender thread: drain, then sleep until something is due or new work arrives."""
        counted = 0.0
        while not stop.is_set():
            try:
                wait = self.drain_once(stop)
                if time.monotonic() - counted > 0.5:
                    self.pending()
                    counted = time.monotonic()
            except (PartitionFenced, SessionEnded) as exc:
                # Its partition moved to another instance meanwhile (which may have ended
                # this one's stale transaction): that one sends it.
                log.info("entry left to its partition's owner", extra={"reason": str(exc)})
                wait = 0.2
            except Exception:  # a bug or a broken state file: say so, keep the thread alive
                log.exception("sender failed", extra={"integration": self.integration})
                wait = 5.0
            self.wake.wait(1.0 if wait is None else min(max(wait, 0.005), 1.0))
            self.wake.clear()

    # ----------------------------------------------------------------- one entry

    def _finish(self, entry: OutboxEntry, delivered: Delivered) -> None:
        now_ms = self._now_ms()
        self._store.mark_done(
            [entry.id],
            delivered.outcome,
            now_ms,
            incident_id=entry.incident_id,
            refs=delivered.refs,
            before_commit=lambda: self._crash("done_in_commit", self.integration),
        )
        self._metrics.notifications.labels(self.integration, delivered.outcome).inc()
        if delivered.outcome in ("sent", "dry_run"):
            latency = max(now_ms - entry.consumed_ms, 0) / 1000
            self._metrics.latency.labels(self.integration).observe(latency)
        log.info("notification", extra={**entry.log_fields(), "outcome": delivered.outcome})

    def _process(self, sender: Sender, entry: OutboxEntry) -> None:
        try:
            if entry.kind == "progress" and self._store.has_later_update(entry):
                self._finish(entry, Delivered("superseded"))
                return
            if entry.kind in FOLLOW_UPS and self._store.outcome_before(entry) == "superseded":
                self._finish(entry, Delivered("superseded"))  # the chart of a skipped update
                return
            if entry.status == "attempting":
                found = sender.reconcile(entry)
                if found is not None:
                    self._finish(entry, found)
                    self._failures = 0
                    return
            self._store.mark_attempting([entry.id], self._now_ms())
            self._crash("send_before", self.integration)
            delivered = sender.send(entry)
            self._crash("send_after", self.integration)
            self._finish(entry, delivered)
            self._failures = 0
        except NotifyError as error:
            if error.retryable:
                self._later([entry], error.retry_after_s, str(error))
            else:
                self._fail(entry, str(error))
        except Exception as exc:  # not a remote failure: our bug or bad data; back off
            log.exception(
                "sending failed unexpectedly",
                extra={"integration": self.integration, "incident_id": entry.incident_id},
            )
            self._later([entry], None, f"{type(exc).__name__}: {exc}")

    def _send_batch(self, sender: BatchSender, entries: Sequence[OutboxEntry]) -> None:
        self._store.mark_attempting([e.id for e in entries], self._now_ms())
        self._crash("send_before", self.integration)
        results = sender.send_batch(entries)
        self._crash("send_after", self.integration)
        retry: list[OutboxEntry] = []
        last_error: NotifyError | None = None
        for entry in entries:
            result = results[entry.id]
            if isinstance(result, Delivered):
                self._finish(entry, result)
            elif result.retryable:
                retry.append(entry)
                last_error = result
            else:
                self._fail(entry, str(result))
        if retry and last_error is not None:
            self._later(retry, last_error.retry_after_s, str(last_error))
        elif not retry:
            self._failures = 0

    def _fail(self, entry: OutboxEntry, error: str) -> None:
        self._store.mark_failed(entry.id, error, self._now_ms())
        self._metrics.notifications.labels(self.integration, "failed").inc()
        log.error(
            "notification failed for good",
            extra={
                "integration": self.integration,
                "action": entry.action,
                "incident_id": entry.incident_id,
                "seq": entry.seq,
                "error": error,
            },
        )

    def _later(
        self, entries: Sequence[OutboxEntry], retry_after_s: float | None, error: str
    ) -> None:
        """Reschedule, and pause the whole integration for the backoff: during an outage
        every entry would fail the same way."""
        self._failures += 1
        delay = self._retry.delay(self._failures, retry_after_s)
        self.paused_until = self._clock() + delay
        self._store.reschedule([e.id for e in entries], int(self.paused_until * 1000), error)
        self._metrics.notifications.labels(self.integration, "retry").inc(len(entries))
        log.warning(
            "notification rescheduled",
            extra={
                "integration": self.integration,
                "entries": len(entries),
                "retry_in_s": round(delay, 3),
                "error": error,
            },
        )
