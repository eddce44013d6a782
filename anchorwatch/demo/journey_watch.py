"""Watching the alerting service while live traffic runs: its state store read every 0.3 s
(``IncidentWatcher``), each incident printed once Slack and Jira have it (ALERT, with the
links) and once it is resolved and delivered (RESOLVED), what was seen of it recorded in the
report; ``settled`` tells when there is nothing more to wait for.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import requests

from anchorwatch.demo import journey_plan as jp
from anchorwatch.demo.journey_results import JourneyReport, Seen
from anchorwatch.demo.journey_services import Destinations, slack_permalink

if TYPE_CHECKING:
    from anchorwatch.alerting.database import StateLocation


class IncidentWatcher:
    """Reads the alerting service's state (``state``: under a directory, or in PostgreSQL)
    into ``report.seen`` and
    prints each incident as Slack and Jira get it; ``clock`` maps event time to wall time
    (a window's end to when it was due on the replay clock)."""

    def __init__(
        self,
        state: Path | StateLocation,
        destinations: Destinations,
        clock: Callable[[int], float],
        echo: Callable[[str], None],
        on_posted: Callable[[str, str, Any], None] | None = None,
    ) -> None:
        self.state = state
        self.destinations = destinations
        self.clock = clock
        self.echo = echo
        # Called with (incident id, doc type, refs) once an incident is in Slack and Jira.
        self.on_posted = on_posted
        self._said: set[tuple[str, str]] = set()  # (incident id, what) printed once

    @contextlib.contextmanager
    def watching(self, report: JourneyReport) -> Iterator[None]:
        """Look in the background for as long as the block runs."""
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(report, stop), daemon=True, name="watch"
        )
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join(timeout=5)

    def _watch(self, report: JourneyReport, stop: threading.Event) -> None:
        while not stop.wait(0.3):
            with contextlib.suppress(Exception):  # the state may be mid-creation
                self.look(report)

    def look(self, report: JourneyReport) -> None:
        """One pass over the state: record what is new, print what is due."""
        from anchorwatch.alerting.store import FILENAME, Store

        if isinstance(self.state, Path) and not (self.state / FILENAME).exists():
            return
        store = Store(self.state, create=False)
        try:
            # One view of the state: a delivery seen done has its references (Slack ts,
            # Jira key) in the same view, or the line would print without them.
            with store.reading():
                listings = store.list_incidents(open_only=False, limit=1000)
                outbox: dict[str, list[dict[str, Any]]] = {}
                for r in store.outbox_rows():
                    outbox.setdefault(r["incident_id"], []).append(r)
            for item in sorted(listings, key=lambda x: x.row.opened_at_ms):
                self._observe(report, item.row, item.refs, outbox.get(item.row.incident_id, []))
        finally:
            store.close()

    def _observe(
        self, report: JourneyReport, row: Any, refs: Any, rows: list[dict[str, Any]]
    ) -> None:
        seen = report.seen.setdefault(
            row.incident_id,
            Seen(row.incident_id, row.doc_type, row.severity, row.opened_at_ms),
        )
        seen.severity = row.severity
        seen.reopened = int(row.record.get("reopened", 0))
        seen.rule, seen.state, seen.group_id = row.rule, row.state, row.group_id
        seen.held_by, seen.acked_by = row.held_by, row.acked_by
        seen.slack_channel, seen.slack_ts, seen.jira_key = (
            refs.slack_channel,
            refs.slack_ts,
            refs.jira_key,
        )
        if (row.held_by or "").startswith("silence "):
            seen.silenced = True
            self._once(seen, "silenced", f"  SILENCED {row.doc_type:<20} {row.severity:<8} "
                       f"judged, not posted: held by {row.held_by}")  # fmt: skip
        if row.group_id is not None:
            line = f"  GROUPED  {row.doc_type:<20} {row.severity:<8} member of {row.group_id}"
            self._once(seen, "grouped", line)
        done = {(r["integration"], r["kind"]) for r in rows if r["status"] == "done"}
        codes = set(seen.reasons)
        for r in rows:
            payload = orjson.loads(r["payload"]) if isinstance(r["payload"], str) else {}
            codes |= set(_reason_codes(payload))
        if row.quality_code:  # the diagnosis of its opening window (a group's members)
            codes.add(row.quality_code)
        seen.reasons = tuple(sorted(codes))
        opened_done = [
            r
            for r in rows
            if r["integration"] == "slack"
            and r["kind"] in ("opened", "reopened")
            and r["status"] == "done"
        ]
        if opened_done and seen.posted_s is None:
            seen.posted_s = min(r["finished_ms"] for r in opened_done) / 1000
        if seen.is_watchdog:  # the blindness step watches for it
            seen.announced = seen.posted_s is not None
            return
        if opened_done and seen.slack_latency_s is None and seen.posted_s is not None:
            seen.slack_latency_s = seen.posted_s - self.clock(row.opened_at_ms)
        d = self.destinations
        want = [i for i, on in (("slack", d.slack_on), ("jira", d.jira_on)) if on]
        if not seen.announced and all((i, "opened") in done for i in want):
            # Marked once printed: a pass that fails midway (the watcher ignores
            # it) must not lose the incident's line.
            self._announce(seen, refs, row)
            seen.announced = True
            if self.on_posted is not None and not seen.is_group:
                self.on_posted(row.incident_id, row.doc_type, refs)
        resolved = all((i, "resolved") in done for i in want)
        windows = ((row.resolved_at_ms or 0) - row.opened_at_ms) // jp.MINUTE_MS
        if row.state == "resolved" and resolved and not seen.resolved and seen.announced:
            how = row.record.get("resolution") or "clean"
            self.echo(f"  RESOLVED {row.doc_type:<20} after {windows} more windows ({how})")
            seen.resolved = True
        elif row.state == "resolved" and seen.silenced and not (seen.announced or seen.resolved):
            self.echo(f"  RESOLVED {row.doc_type:<20} after {windows} more windows, while "
                      "silenced: never posted")  # fmt: skip
            seen.resolved = True

    def _once(self, seen: Seen, what: str, line: str) -> None:
        if (seen.incident_id, what) not in self._said:
            self._said.add((seen.incident_id, what))
            self.echo(line)

    def _announce(self, seen: Seen, refs: Any, row: Any) -> None:
        d = self.destinations
        if seen.is_group:
            members = row.record.get("members") or {}
            types = sorted(str(m.get("doc_type")) for m in members.values())
            parts = [f"  GROUP    {row.doc_type} {row.severity}: {len(types)} doc types "
                     f"({', '.join(types)}), one thread and one ticket"]  # fmt: skip
        else:
            parts = [f"  ALERT    {row.doc_type:<20} {row.severity:<8}"]
        start = row.opened_at_ms - jp.MINUTE_MS
        parts.append(f"window {time.strftime('%H:%M', time.gmtime(start / 1000))} UTC")
        if refs.slack_ts and d.slack_web:
            parts.append(f"slack {slack_permalink(d.slack_web, refs.slack_channel, refs.slack_ts)}")
        if refs.jira_key:
            summary = d.jira_summary(refs.jira_key)
            link = f"{d.jira_url.rstrip('/')}/browse/{refs.jira_key}"
            parts.append(f"jira {link}" + (f" {summary!r}" if summary else ""))
        if seen.slack_latency_s is not None:
            parts.append(f"({seen.slack_latency_s:.1f}s after the window's end)")
        self.echo("  ".join(parts))


def settled(report: JourneyReport, *, patience_over: bool) -> bool:
    """Every incident seen is resolved and delivered, and each label has one (or no
    longer can be expected to get one)."""
    labels_done = all(
        any(
            s.doc_type == lab.doc_type and s.opened_at_ms > lab.start_ms
            for s in report.seen.values()
        )
        for lab in report.plan.labels
    )
    groups = {s.incident_id: s for s in report.seen.values() if s.is_group}

    def done(s: Seen) -> bool:
        if s.is_group or s.is_watchdog:
            return s.announced or s.is_watchdog
        if s.group_id is not None:  # posted through its group
            return s.group_id in groups and groups[s.group_id].announced
        return s.resolved

    return (labels_done or patience_over) and all(done(s) for s in report.seen.values())


def watchdog_notice(
    watcher: IncidentWatcher, report: JourneyReport, slack_url: str
) -> tuple[str, float, str] | None:
    """The watchdog's notice once Slack has it: its incident id, when Slack had it (wall
    clock) and its Slack message's text."""
    watcher.look(report)
    seen = next((s for s in report.seen.values() if s.is_watchdog and s.posted_s is not None), None)
    if seen is None or seen.posted_s is None:
        return None
    text = ""
    with contextlib.suppress(Exception):  # the text is for people
        messages = requests.get(f"{slack_url}/_local/messages", timeout=10).json()["messages"]
        text = next((m["text"] for m in messages if m["ts"] == seen.slack_ts), "")
    return seen.incident_id, seen.posted_s, text


def _reason_codes(payload: Any) -> list[str]:
    reasons = payload.get("reasons") if isinstance(payload, dict) else None
    if not isinstance(reasons, list):
        view = payload.get("view") if isinstance(payload, dict) else None
        reasons = view.get("reasons") if isinstance(view, dict) else []
    return [str(r["code"]) for r in reasons or [] if isinstance(r, dict) and "code" in r]
