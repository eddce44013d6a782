"""What every integration's messages share: the incident as the renderers see it
(``IncidentView``, its ``WindowPoint`` history), text made safe to show (control, format and
bidirectional-override characters replaced so nothing reorders or hides text; lengths cut as
Slack and Jira count them), safe URLs, the incident's label, and the phrases every message
uses (times, spans, durations, the state). Pure: no I/O, no client library, no clock.

Each integration renders its own messages from these: ``integrations/slack/render.py`` (Block
Kit), ``integrations/jira/render.py`` (wiki markup, labels, JQL). Doc types come from request
headers: untrusted; everything shown from them passes through the integration's escaper.

An incident is of one of three kinds (``IncidentView.kind``): a drift incident of one doc
type (``drift``); the group incident of a data-quality fault across doc types (``group``,
``grouping.py``: its code and its members, each open or recovered); the watchdog's notice
that anchorwatch cannot see some doc types (``blind``, ``watchdog_post.py``: the types with
the signal blinding each, and the signals seen). Only a drift incident shows drift figures.
"""

from __future__ import annotations

import hashlib
import math
import struct
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import quote, urlsplit

from anchorwatch.contracts import Reason, Verdict, WindowAggregate
from anchorwatch.contracts.breakdown import KINDS

Severity = Literal["warning", "critical"]
IncidentState = Literal["open", "updated", "resolved"]
IncidentKind = Literal["drift", "group", "blind"]

INCIDENT_LABEL_PREFIX = "aw-"


@dataclass(frozen=True)
class IncidentView:
    """What the renderers and notifiers need to know about one incident."""

    incident_id: str
    doc_type: str
    severity: Severity
    state: IncidentState
    opened_at_ms: int
    resolved_at_ms: int | None
    window: WindowAggregate  # the latest window
    threshold: float
    baseline_version: str | None
    reasons: Sequence[Reason] = ()
    peak_mean_drift: float = 0.0
    dashboard_url: str | None = None
    # Resolved because the type's level moved and stayed (resolution "adapted"): the old and
    # new centers.
    adapted_from: float | None = None
    adapted_to: float | None = None
    # Acknowledged in Slack: the Slack user id (shown as a mention) and, in the change that
    # acknowledges it, the user's name (for Jira).
    acked_by: str | None = None
    acked_name: str | None = None
    # What kind of incident it is (see the module's docstring); the fields below are for the
    # ``group`` and ``blind`` kinds only.
    kind: IncidentKind = "drift"
    # A group: the data-quality code (``snapshot_disabled``).
    code: str | None = None
    # The doc types it is about, each with its state: a group's members in the order they
    # were hit, "open" or "recovered"; the notice's blind types, by name, with their signal
    # (``no_verdicts``, ``watermark_stalled``, ``consumer_stalled``).
    members: tuple[tuple[str, str], ...] = ()
    # The notice: the signals seen (a stalled watermark may blind no type it can name).
    signals: tuple[str, ...] = ()
    # A drift incident: the start of the first breaching window of the run that opened it
    # (None: not known, e.g. a view stored before it was kept).
    first_breach_ms: int | None = None
    # A drift incident whose window has per-kind figures: the type's figures before the
    # incident, from its history (``breakdown_text.with_history``): mean drift per anchor
    # kind, and over all.
    kinds_before: Mapping[str, float] | None = None
    drift_before: float | None = None


#: A window point's per-kind means (``WindowPoint.kind_drift``): one float32 per kind of
#: ``KINDS``, NaN for a kind the window had no anchors of.
_KIND_PACK = struct.Struct(f"<{len(KINDS)}f")


def pack_kind_means(means: Mapping[str, float] | None) -> bytes:
    """Per-kind means as ``WindowPoint.kind_drift`` holds them (``b""``: no breakdown)."""
    if means is None:
        return b""
    return _KIND_PACK.pack(*(means.get(kind, math.nan) for kind in KINDS))


@dataclass(frozen=True, slots=True)  # slots: 30 per doc type are held, 10,000s of types
class WindowPoint:
    """One window of a type's history, for charts and evidence tables; with the window's
    breakdown when the job carried one: request latency p50/p95 and the mean drift per
    anchor kind (packed: 65 bytes, where a tuple of 8 floats takes about 300)."""

    window_start_ms: int
    window_end_ms: int
    mean_drift: float
    threshold: float
    request_count: int
    latency_p50_ms: int | None = None
    latency_p95_ms: int | None = None
    kind_drift: bytes = b""

    @classmethod
    def from_verdict(cls, verdict: Verdict) -> WindowPoint:
        w = verdict.window
        kinds: dict[str, float] | None = (
            {k: f.mean_drift for k, f in w.kinds.items()} if w.kinds is not None else None
        )
        return cls(
            w.window_start_ms,
            w.window_end_ms,
            w.mean_drift,
            verdict.threshold,
            w.request_count,
            w.latency_p50_ms,
            w.latency_p95_ms,
            pack_kind_means(kinds),
        )

    def kind_means(self) -> dict[str, float] | None:
        """Mean drift per anchor kind present (None: the window had no breakdown)."""
        if not self.kind_drift:
            return None
        values = _KIND_PACK.unpack(self.kind_drift)
        return {k: v for k, v in zip(KINDS, values, strict=True) if not math.isnan(v)}

    @property
    def has_breakdown(self) -> bool:
        latency = self.latency_p50_ms is not None or self.latency_p95_ms is not None
        return bool(self.kind_drift) or latency


# --------------------------------------------------------------------------- text


def clean_text(text: str) -> str:
    """Replace control, format (zero-width, bidi overrides) and unassigned characters."""
    return "".join(
        "\ufffd" if unicodedata.category(c) in ("Cc", "Cf", "Cn", "Cs", "Co") else c for c in text
    )


def truncate(text: str, limit: int) -> str:
    """Cut to ``limit`` characters counted as UTF-16 code units (Jira's and Slack's count),
    ending in an ellipsis when cut."""
    if utf16_len(text) <= limit:
        return text
    out, used = [], 0
    for c in text:
        size = 2 if ord(c) > 0xFFFF else 1
        if used + size > limit - 1:
            break
        out.append(c)
        used += size
    return "".join(out) + "…"


def utf16_len(text: str) -> int:
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def safe_url(url: str | None) -> str | None:
    """An http(s) URL with the characters that could end a Slack link or a Jira link
    (``<>|[]`` and whitespace) percent-encoded; anything else is refused (None)."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return quote(url.strip(), safe=":/?#@!$&'()*+,;=%-._~")


# --------------------------------------------------------------------------- shared bits


def incident_label(incident_id: str) -> str:
    """Fixed-length label that finds the incident's ticket again (``aw-`` + 12 hex)."""
    return INCIDENT_LABEL_PREFIX + hashlib.sha256(incident_id.encode()).hexdigest()[:12]


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def hhmm(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def window_span(window: WindowAggregate) -> str:
    return f"{utc(window.window_start_ms)[:-4]}–{hhmm(window.window_end_ms)} UTC"


def duration(ms: int) -> str:
    minutes = max(ms, 0) // 60_000
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours < 48 else f"{hours // 24} d {hours % 24} h"


def baseline_phrase(view: IncidentView) -> str:
    return f"baseline {view.baseline_version}" if view.baseline_version else "static rule"


def adapted_phrase(view: IncidentView, escape: Callable[[str], str]) -> str | None:
    """Plain words for a resolution by adaptation, the doc type passed through ``escape``
    (the markup's escaper), or None."""
    if view.adapted_from is None or view.adapted_to is None:
        return None
    return (
        f"{escape(truncate(view.doc_type, 120))} moved from {view.adapted_from:.2f} to "
        f"{view.adapted_to:.2f} and stayed: baseline adapted"
    )


#: The watchdog's signals, in words.
SIGNAL_WORDS: dict[str, str] = {
    "no_verdicts": "no verdicts",
    "watermark_stalled": "watermark stalled",
    "consumer_stalled": "consumer stalled",
}
#: What to look at when anchorwatch is blind (the notice's "what to check").
BLIND_CHECKS: tuple[str, ...] = (
    "the drift job: is it running, or restarting?",
    "its consumer group's lag on the input topic: is it committing?",
    "its watermark, the newest verdict window's end: does it still move?",
)


def signal_words(signals: Sequence[str]) -> str:
    return ", ".join(SIGNAL_WORDS.get(s, s) for s in signals) or "none"


def member_types(view: IncidentView, state: str | None = None) -> list[str]:
    """The doc types of a group or the notice, those in ``state`` only when given."""
    return [doc for doc, st in view.members if state is None or st == state]


def listed(names: Sequence[str], show: Callable[[str], str], limit: int) -> str:
    """``a, b, c (+N more)``: the names, each through ``show`` (the markup's escaper), as many
    as fit in ``limit`` characters (UTF-16 units) with the count of the rest always there."""
    shown: list[str] = []
    used = 0
    for i, name in enumerate(names):
        part = show(name)
        rest = len(names) - i - 1
        more = utf16_len(f" (+{rest} more)") if rest else 0
        size = used + (2 if shown else 0) + utf16_len(part)
        if size + more > limit:
            return " ".join([", ".join(shown), f"(+{len(names) - i} more)"]).strip()
        shown.append(part)
        used = size
    return ", ".join(shown)


def kind_title(view: IncidentView) -> str:
    """The words that open a message of the incident: what kind it is, and its state."""
    resolved = view.state == "resolved"
    if view.kind == "group":
        return "Data-quality fault resolved" if resolved else "Data-quality fault"
    if view.kind == "blind":
        return "anchorwatch sees again" if resolved else "anchorwatch cannot see"
    return "Drift resolved" if resolved else "Drift alert"


def kind_summary(view: IncidentView) -> str:
    """A group's or the notice's words in plain text (the paging receivers' summaries):
    what it is and its types, bounded."""

    def plain(text: str) -> str:
        return clean_text(truncate(text, 120))

    title = kind_title(view)
    if view.kind == "group":
        return f"{title}: {plain(view.code or '?')} across {len(view.members)} doc types"
    names = listed(member_types(view), plain, 600)
    return f"{title} {len(view.members)} doc types ({signal_words(view.signals)}): {names}"


def state_phrase(view: IncidentView) -> str:
    if view.state == "resolved" and view.resolved_at_ms is not None:
        return (
            f"resolved {utc(view.resolved_at_ms)} after "
            f"{duration(view.resolved_at_ms - view.opened_at_ms)}"
        )
    return f"open since {utc(view.opened_at_ms)}"
