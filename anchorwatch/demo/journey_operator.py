"""What an operator does during the demo, done the way people do it:

- a **silence** for one labelled incident's doc type, added before it starts through the
  alerting service's HTTP API (``POST /api/v1/silences`` with its api token, as
  ``anchorwatch alerting silence add`` would), ending after the incident has resolved and
  before the gateway-wide fault;
- an **acknowledgement by a click** on another incident's Slack message: the local Slack
  signs the ``block_actions`` payload and posts it to the service's ``/slack/interactions``
  as Slack does (``POST /_local/click``, the page's button);
- the **blindness** at the end: the drift job cancelled on the session cluster while Kong
  keeps sending (real time now), until the watchdog's notice reaches Slack.

``Operator`` holds what the run needs for them (the api token, the targets chosen from the
plan) and records what happened in the report's ``operator`` figures; the checks are in
``journey_checks``.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import requests

from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo.generator import Traffic, TrafficConfig
from anchorwatch.demo.journey_feed import ReplayClock, SendStats, send_batches
from anchorwatch.demo.journey_processes import JourneyError, wait_for

#: How long after the kill the watchdog's notice must be in Slack.
NOTICE_WITHIN_S = 180.0
#: Event minute (of the live span) the silence lasts until: after its incident's
#: resolution, before the gateway-wide fault.
SILENCE_UNTIL_MINUTE = 22
#: The policy of the demo's alerting service: an incident that breaches again is a new one
#: (the default re-opens one that resolved within 30 windows, which in 34 minutes of live
#: traffic would fold the gateway-wide fault into the labelled incidents of those types).
REOPEN_WITHIN = 0


@dataclass
class Targets:
    """The labelled incidents the operator acts on."""

    silenced: jp.Label  # muted by a silence before it starts
    acked: jp.Label  # acknowledged from Slack once posted

    @classmethod
    def of(cls, plan: jp.Plan) -> Targets:
        drift = [lab for lab in plan.labels if lab.kind != "gateway"]
        # The first incident is silenced (it resolves early); the ramp, the longest, is
        # acknowledged (progress updates would follow for minutes).
        acked = next((lab for lab in drift if lab.kind == "ramp"), drift[1])
        return cls(silenced=drift[0], acked=acked)


@dataclass
class OperatorLog:
    """What the operator did, when (wall clock, seconds since the epoch)."""

    silence: dict[str, Any] = field(default_factory=dict)  # the API's answer
    silence_error: str = ""
    ack_at: float | None = None
    ack_answer: Any = None
    ack_incident: str = ""
    killed_at: float | None = None
    notice_at: float | None = None  # its Slack message delivered
    notice_incident: str = ""
    notice_text: str = ""
    blind_feed: SendStats | None = None


def label_lines(plan: jp.Plan, operator: Operator | None) -> list[str]:
    """The labelled incidents, for people: one line each, the gateway-wide fault's types on
    one line; what the operator will do to which."""
    lines = []
    for lab in plan.labels:
        if lab.kind == "gateway":
            continue
        minute = (lab.start_ms - plan.live_start_ms) // jp.MINUTE_MS
        length = (lab.end_ms - lab.start_ms) // jp.MINUTE_MS
        what = ""
        if operator is not None and lab == operator.targets.silenced:
            what = "  (silenced before it starts)"
        elif operator is not None and lab == operator.targets.acked:
            what = "  (acknowledged from Slack once posted)"
        where = ""
        if lab.model is not None:
            where = f" in {lab.model} only (a rollout: {jp.MODEL_SHARE:.0%} of the requests)"
        elif lab.anchor_kind is not None:
            where = f" in its {lab.anchor_kind} anchors only"
        lines.append(
            f"        {lab.kind:<10} {lab.doc_type:<20} +{lab.magnitude:.2f}{where} from "
            f"minute {minute} for {length} min{what}"
        )
    gateway = [lab for lab in plan.labels if lab.kind == "gateway"]
    if gateway:
        lab = gateway[0]
        minute = (lab.start_ms - plan.live_start_ms) // jp.MINUTE_MS
        length = (lab.end_ms - lab.start_ms) // jp.MINUTE_MS
        _, _, share, _ = jp.GATEWAY_FAULT
        lines.append(
            f"        gateway    {len(gateway)} doc types: {share:.0%} of snapshots 'disabled' "
            f"(+{lab.magnitude:.2f} on the rest) from minute {minute} for {length} min: one "
            "group incident"
        )
    return lines


class Operator:
    """The run's operator: its api token and secrets, its targets, what it did."""

    def __init__(self, plan: jp.Plan, echo: Callable[[str], None]) -> None:
        self.api_token = secrets.token_hex(16)
        self.targets = Targets.of(plan)
        self.log = OperatorLog()
        self.echo = echo
        self._ack_lock = threading.Lock()

    def alerting_settings(self, policy_rules: Sequence[Any], job_group_id: str) -> dict[str, Any]:
        """The alerting service's settings the features need, by section."""
        rules = [
            {**r.model_dump(mode="json"), "reopen_within": REOPEN_WITHIN} for r in policy_rules
        ]
        return {
            "alerting": {"api_token": self.api_token},
            # The watchdog watches the run's job (its consumer group on the run's topics).
            "watchdog": {"job_group_id": job_group_id},
            "policy": {"rules": orjson.dumps(rules).decode()},
        }

    # ----------------------------------------------------------------- the silence

    def add_silence(self, alerting_url: str, clock: ReplayClock) -> None:
        """A silence of the silenced label's doc type until SILENCE_UNTIL_MINUTE (event
        time) is due on the replay clock."""
        lab = self.targets.silenced
        until = clock(clock.origin_ms + SILENCE_UNTIL_MINUTE * jp.MINUTE_MS)
        seconds = math.ceil(until - time.time())
        body = {
            "doc_type": lab.doc_type,
            "duration": f"{seconds}s",
            "reason": "demo: known upstream change",
            "author": "anchorwatch-demo",
        }
        try:
            r = requests.post(
                f"{alerting_url}/api/v1/silences",
                json=body,
                headers={"Authorization": f"Bearer {self.api_token}"},
                timeout=10,
            )
            answer = r.json()
            if r.status_code != 201:
                raise JourneyError(f"POST /api/v1/silences answered {r.status_code}: {answer}")
        except (requests.RequestException, ValueError, JourneyError) as exc:
            self.log.silence_error = str(exc)
            self.echo(f"  SILENCE  {lab.doc_type:<20} could not be added: {exc}")
            return
        self.log.silence = answer if isinstance(answer, dict) else {}
        sid = self.log.silence.get("silence_id", "?")
        self.echo(
            f"  SILENCE  {lab.doc_type:<20} silence {sid} added over the HTTP API for "
            f"{seconds}s (to live minute {SILENCE_UNTIL_MINUTE}), before its incident starts"
        )

    # ----------------------------------------------------------------- the click

    def maybe_ack(self, slack_url: str, incident_id: str, doc_type: str, refs: Any) -> None:
        """Click Acknowledge on the acked label's Slack parent, once (called by the watcher
        when an incident's parent is posted)."""
        lab = self.targets.acked
        if doc_type != lab.doc_type or not refs.slack_ts or not refs.slack_channel:
            return
        with self._ack_lock:
            if self.log.ack_incident:
                return
            self.log.ack_incident = incident_id
        from anchorwatch.alerting.integrations.slack.render import ACK

        click = {"channel": refs.slack_channel, "ts": refs.slack_ts, "action_id": ACK}
        try:
            r = requests.post(f"{slack_url}/_local/click", json=click, timeout=15)
            self.log.ack_answer = r.json()
        except (requests.RequestException, ValueError) as exc:
            self.log.ack_answer = {"error": str(exc)}
        self.log.ack_at = time.time()
        answer = self.log.ack_answer or {}
        self.echo(
            f"  ACK      {doc_type:<20} Acknowledge clicked in the local Slack, posted signed "
            f"to /slack/interactions: {answer.get('status')} {str(answer.get('answer'))[:80]}"
        )

    # ----------------------------------------------------------------- blindness

    def go_blind(
        self,
        kill: Callable[[], None],
        plan: jp.Plan,
        ingest_url: str,
        tokens: list[str],
        notice: Callable[[], tuple[str, float, str] | None],
        *,
        workers: int,
        batch_size: int,
    ) -> None:
        """Kill the drift job, keep Kong sending (real time, event time now) and wait for
        the watchdog's notice in Slack (``notice``: its incident id, when its Slack message
        was delivered and its text, once it is)."""
        self.log.killed_at = time.time()
        kill()
        self.echo(
            "  KILL     the drift job cancelled on the session cluster; Kong keeps sending, "
            f"waiting for the watchdog's notice (at most {NOTICE_WITHIN_S:.0f}s)"
        )
        stop = threading.Event()
        feed = threading.Thread(
            target=self._feed,
            args=(plan, ingest_url, tokens, stop, workers, batch_size),
            daemon=True,
            name="blind-feed",
        )
        feed.start()
        found: tuple[str, float, str] | None = None

        def arrived() -> bool:
            nonlocal found
            found = notice()
            return found is not None

        try:
            wait_for(arrived, NOTICE_WITHIN_S + 20, "the watchdog's notice", every=1.0)
        except JourneyError:
            self.echo(f"  BLIND    no watchdog notice within {NOTICE_WITHIN_S + 20:.0f}s")
        finally:
            stop.set()
            feed.join(timeout=20)
        if found is None:
            return
        self.log.notice_incident, self.log.notice_at, self.log.notice_text = found
        took = self.log.notice_at - self.log.killed_at
        self.echo(
            f"  BLIND    watchdog notice in Slack {took:.0f}s after the kill: "
            f"{self.log.notice_text[:100]!r}"
        )
        self.echo("  (the demo ends here: the job is not restarted)")

    def _feed(
        self,
        plan: jp.Plan,
        url: str,
        tokens: list[str],
        stop: threading.Event,
        workers: int,
        batch_size: int,
    ) -> None:
        """The same gateway's traffic, on for minutes from now, sent as it happens."""
        now = int(time.time() * 1000)
        start = now - now % jp.MINUTE_MS
        minutes = math.ceil(NOTICE_WITHIN_S / 60) + 2
        config = TrafficConfig(
            seed=plan.traffic.config.seed,
            start_ms=start,
            minutes=minutes,
            doc_types=len(plan.doc_types),
            background_fault_rate=0.0,
        )
        traffic = Traffic(config, plan.traffic.profiles, ())
        entries = jp.kong_entries(traffic.records(), broken_every=0)
        batches = jp.kong_batches(entries, workers=workers, batch_size=batch_size)
        clock = ReplayClock(start, start / 1000, 1.0)

        async def send() -> SendStats:
            total = SendStats()
            for batch in batches:
                # Each batch when it is due, so that a stop ends the feed at once.
                if stop.wait(max(0.0, clock(batch.send_at_ms) - time.time())):
                    break
                s = await send_batches(url, [batch], workers=workers, token=tokens)
                total.sent += s.sent
                total.accepted += s.accepted
                total.failed_batches += s.failed_batches
            return total

        self.log.blind_feed = asyncio.run(send())
