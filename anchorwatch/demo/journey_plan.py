"""What `anchorwatch demo` sends and how it judges the outcome: pure, no I/O, no clock.

The journey replays a few hours of generated gateway traffic as history, then "live" traffic
with labelled incidents, as Kong http-log batches. Event times are real (they end at the
wall clock's minute when the plan is made) but compressed on the way out: the live span is
sent ``speed`` times faster than it happened, on a *replay clock* that maps event time to
wall time. Everything here is deterministic for a seed and a start time.

- :func:`make_plan`: the traffic, its labelled incidents (a jump, a ramp, a data-quality
  fault that also lifts drift, a drift in one model version of a rollout only, one in one
  anchor kind only) placed on the busiest types, where the default policy can see them;
- :func:`kong_entries`: one Kong http-log entry per generated event, one in
  ``broken_every`` of them broken the ways real entries break (each must reach the
  dead-letter topic naming its field);
- :func:`kong_batches`: how a Kong node would batch them (per worker queue, at most
  ``batch_size`` entries, flushed after the coalescing delay);
- :func:`match_alerts`: the incidents raised, matched with the labels.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

from anchorwatch.contracts import SnapshotEvent
from anchorwatch.demo import routing
from anchorwatch.demo.generator import (
    RESAMPLE_ABOVE,
    GeneratedRecord,
    IncidentLabel,
    Traffic,
    TrafficConfig,
    generate,
)
from anchorwatch.demo.kong_entry import to_kong_entry

MINUTE_MS: Final = 60_000

#: Incidents of the live span: (rank of the type by request rate, kind, first minute, last
#: minute + 1, drift added). ``kl_spike`` is a data-quality fault (invisible Unicode in the
#: inputs: KL divergence spikes) that lifts drift too: the alert must carry the diagnosis.
#: ``model_jump`` lives in the candidate of a rollout (``MODEL_SHARE`` of the type's
#: requests) only, ``kind_jump`` in the anchors of the type's main kind only: the alert
#: must name that model, that kind (their drift added is at most the figure here, see
#: ``make_plan``). Magnitudes are several thresholds' margins above each type's normal,
#: so the default policy opens each after two windows; the gaps let each resolve before
#: the next begins. One type each: the default policy re-opens an incident of a type that
#: breaches again within 30 windows.
INCIDENTS: Final = (
    (3, "jump", 3, 9, 0.30),
    (1, "ramp", 5, 15, 0.45),
    (2, "kl_spike", 11, 17, 0.28),
    (0, "model_jump", 15, 20, 0.55),
    (4, "kind_jump", 7, 13, 0.60),
)
KL_LEVEL: Final = 3.0
#: The candidate's share of the requests of the type whose rollout drifts.
MODEL_SHARE: Final = 0.6
#: How far below the re-sample line a scoped incident lifts its part of the traffic at
#: most, in spreads of its type (``make_plan``).
SCOPED_BELOW: Final = 1.0
#: The gateway-wide data-quality fault (``with_gateway_fault``): minutes before the live
#: span's end it starts, its length, the share of every type's requests whose snapshots are
#: ``disabled`` and the drift added to the rest. Late in the span, after every labelled
#: incident has resolved, so it neither hides nor inhibits one.
GATEWAY_FAULT: Final = (4, 2, 0.35, 1.0)
#: Requests per minute a type needs to be hit by it: a sparser one has no window of the
#: minimum size to judge (it would be hit and never seen).
GATEWAY_MIN_RATE: Final = 5.0
#: Minutes after an incident's end in which the alert it raised still counts for it:
#: windows are judged when they close.
GRACE_WINDOWS: Final = 2


@dataclass(frozen=True)
class Label:
    """One incident the run must alert on, exactly once."""

    doc_type: str
    start_ms: int
    end_ms: int
    kind: str
    magnitude: float
    diagnosis: str | None = None  # a reason code the alert must carry
    model: str | None = None  # model_jump: the model version the alert must name
    anchor_kind: str | None = None  # kind_jump: the anchor kind the alert must name

    def to_json(self) -> bytes:
        return orjson.dumps(self)


@dataclass(frozen=True)
class Plan:
    traffic: Traffic
    labels: tuple[Label, ...]
    history_start_ms: int
    live_start_ms: int
    end_ms: int
    window_ms: int = MINUTE_MS

    @property
    def doc_types(self) -> list[str]:
        return [p.name for p in self.traffic.profiles]

    def intact(self, event: SnapshotEvent) -> bool:
        """Whether ``event``'s entry must not be broken: one in the gateway-wide fault's
        span. A sparse type's first window of it holds a handful of requests (its share of
        disabled snapshots just above the data-quality limit); one disabled entry lost would
        drop the share under it, and its incident would join no group, by chance of which
        entries broke."""
        return any(
            lab.kind == "gateway"
            and lab.doc_type == event.doc_type
            and lab.start_ms <= event.event_time_ms < lab.end_ms
            for lab in self.labels
        )

    def split(self) -> tuple[list[GeneratedRecord], list[GeneratedRecord]]:
        """History (arrived before the live span) and live records, in arrival order."""
        history: list[GeneratedRecord] = []
        live: list[GeneratedRecord] = []
        for r in self.traffic.records():
            (history if r.arrival_ms < self.live_start_ms else live).append(r)
        return history, live


def make_plan(
    now_ms: int,
    *,
    seed: int = 7,
    doc_types: int = 6,
    history_minutes: int = 180,
    live_minutes: int = 34,
    rate_scale: float = 1.0,
    fault_rate: float = 0.01,
) -> Plan:
    """The run's traffic: history then live, the live span ending at ``now_ms``'s minute
    (the ingest service refuses events from the future and older than the topic keeps)."""
    # A quarter of the types (one at least) is sparse: too few requests a window to judge.
    if doc_types < len(INCIDENTS) + 1:
        raise ValueError(
            f"doc_types: at least {len(INCIDENTS) + 1} (one per labelled incident, and a "
            "sparse one)"
        )
    last = max(end for _, _, _, end, _ in INCIDENTS)
    if live_minutes < last + 5:
        raise ValueError(f"live_minutes: at least {last + 5}, so every incident can resolve")
    end = now_ms - now_ms % MINUTE_MS
    live_start = end - live_minutes * MINUTE_MS
    start = live_start - history_minutes * MINUTE_MS
    config = TrafficConfig(
        seed=seed,
        start_ms=start,
        minutes=history_minutes + live_minutes,
        doc_types=doc_types,
        rate_scale=rate_scale,
        background_fault_rate=fault_rate,
    )
    profiles = list(generate(config).profiles)
    busiest = sorted(profiles, key=lambda p: (-p.rate_per_minute, p.name))
    injected: list[IncidentLabel] = []
    labels: list[Label] = []
    for rank, kind, first, stop, magnitude in INCIDENTS:
        profile = busiest[rank]
        doc_type = profile.name
        span = (live_start + first * MINUTE_MS, live_start + stop * MINUTE_MS)
        diagnosis = model = anchor_kind = None
        if kind in ("model_jump", "kind_jump"):
            # Lifted to one spread below the re-sample line at most: a window with over 30%
            # of its anchors re-sampled reads as a data-quality fault (resample_burst), held
            # back for its group, not as drift in one model or one kind.
            level = RESAMPLE_ABOVE - SCOPED_BELOW * profile.spread
            magnitude = round(min(magnitude, level - profile.base_drift), 3)
        if kind == "model_jump":
            # The type is in a rollout (history included), its candidate the one drifting.
            models = routing.rollout(profile.models, MODEL_SHARE)
            profiles[profiles.index(profile)] = replace(profile, models=models)
            model = models[-1][0]
        elif kind == "kind_jump":
            anchor_kind = routing.main_kind(profile.anchor_kinds)
        drift_kind = kind if kind in ("ramp", "model_jump", "kind_jump") else "jump"
        injected.append(IncidentLabel(doc_type, *span, drift_kind, magnitude, model, anchor_kind))
        if kind == "kl_spike":
            injected.append(IncidentLabel(doc_type, *span, "kl_spike", KL_LEVEL))
            diagnosis = "kl_divergence_spike"
        labels.append(Label(doc_type, *span, kind, magnitude, diagnosis, model, anchor_kind))
    traffic = Traffic(config, tuple(profiles), tuple(sorted(injected, key=lambda i: i.start_ms)))
    return Plan(traffic, tuple(labels), start, live_start, end)


def with_gateway_fault(plan: Plan) -> Plan:
    """``plan`` with a gateway-wide data-quality fault: for ``GATEWAY_FAULT``'s minutes a
    share of every doc type's snapshots (every type busy enough to be judged) are
    ``disabled`` and the rest drift, one label per type (kind ``gateway``, diagnosis
    ``snapshot_disabled``): the alerting service must make them one group incident."""
    before_end, length, share, lift = GATEWAY_FAULT
    start = plan.end_ms - before_end * MINUTE_MS
    last = max((lab.end_ms for lab in plan.labels), default=plan.live_start_ms)
    # The labelled incidents resolve up to 9 windows after they end (and one that breaches
    # again would be folded into the fault's group).
    if start < last + 9 * MINUTE_MS:
        need = (last + 9 * MINUTE_MS - plan.live_start_ms) // MINUTE_MS + before_end
        raise ValueError(f"live_minutes: at least {need} for the gateway-wide fault")
    span = (start, start + length * MINUTE_MS)
    injected = list(plan.traffic.incidents)
    labels = list(plan.labels)
    hit = [p.name for p in plan.traffic.profiles if p.rate_per_minute >= GATEWAY_MIN_RATE]
    for doc_type in hit:
        injected.append(IncidentLabel(doc_type, *span, "disabled", share))
        injected.append(IncidentLabel(doc_type, *span, "jump", lift))
        labels.append(Label(doc_type, *span, "gateway", lift, "snapshot_disabled"))
    t = plan.traffic
    traffic = Traffic(t.config, t.profiles, tuple(sorted(injected, key=lambda i: i.start_ms)))
    return replace(plan, traffic=traffic, labels=tuple(labels))


# --------------------------------------------------------------------------- Kong entries

#: How real entries break (the dead letter must name the field): (what, field path).
BREAKAGES: Final = (
    ("anchor count not a number", "response.headers.x-anthropic-anchor-count"),
    ("no doc type", "request.headers.x-anthropic-doc-type"),
    ("snapshot log cut off", "response.headers.x-anthropic-snapshot-log"),
    ("unknown snapshot status", "response.headers.x-anthropic-snapshot-status"),
)


@dataclass(frozen=True)
class Entry:
    arrival_ms: int
    body: bytes  # the entry's JSON, as Kong writes it into a batch
    event: SnapshotEvent | None  # the event the ingest service must write; None: broken
    broken: str | None = None  # the field a broken entry's dead letter names


def _broken(entry: dict[str, Any], which: int) -> tuple[dict[str, Any], str]:
    request, response = entry["request"]["headers"], entry["response"]["headers"]
    _, path = BREAKAGES[which]
    if which == 0:
        response["x-anthropic-anchor-count"] = "twelve"
    elif which == 1:
        del request["x-anthropic-doc-type"]
    elif which == 2:
        log = response["x-anthropic-snapshot-log"]
        response["x-anthropic-snapshot-log"] = log[: max(1, len(log) // 2)]
    else:
        response["x-anthropic-snapshot-status"] = "paused"
    return entry, path


def kong_entries(
    records: Iterable[GeneratedRecord],
    *,
    broken_every: int = 100,
    intact: Callable[[SnapshotEvent], bool] | None = None,
) -> list[Entry]:
    """One Kong entry per generated event; one in ``broken_every`` (chosen by a hash of the
    event id, so the same events break in every run) broken, none that ``intact`` keeps."""
    out = []
    for r in records:
        if r.event is None:  # the plan generates no malformed NDJSON; entries break below
            continue
        digest = hashlib.sha256(r.event.event_id.encode()).digest()
        entry = to_kong_entry(r.event)
        hit = broken_every and int.from_bytes(digest[:4], "big") % broken_every == 0
        if hit and not (intact is not None and intact(r.event)):
            entry, path = _broken(entry, digest[4] % len(BREAKAGES))
            out.append(Entry(r.arrival_ms, orjson.dumps(entry), None, path))
        else:
            # The ingest service writes the event with its own source label.
            event = r.event.model_copy(update={"source": "ingest"})
            out.append(Entry(r.arrival_ms, orjson.dumps(entry), event))
    return out


@dataclass(frozen=True)
class Batch:
    worker: int
    send_at_ms: int  # on the replay clock (event time)
    entries: list[Entry] = field(repr=False)

    def body(self) -> bytes:
        return b"[" + b",".join(e.body for e in self.entries) + b"]"


def kong_batches(
    entries: Sequence[Entry], *, workers: int = 2, batch_size: int = 100, coalesce_ms: int = 1000
) -> list[Batch]:
    """Kong's http-log queues: each worker process has its own queue (entries are spread
    over workers as requests are), sends a batch when it holds ``batch_size`` entries or
    when its oldest entry has waited ``coalesce_ms`` (max_coalescing_delay), one batch at
    a time. Returned in the order they are due."""
    if workers < 1 or batch_size < 1:
        raise ValueError("workers and batch_size: at least 1")
    queues: list[list[Entry]] = [[] for _ in range(workers)]
    out: list[Batch] = []

    def flush(w: int, at: int) -> None:
        if queues[w]:
            out.append(Batch(w, at, queues[w]))
            queues[w] = []

    for i, entry in enumerate(entries):
        w = i % workers
        for q in range(workers):  # any queue whose delay ran out before this arrival
            if queues[q] and queues[q][0].arrival_ms + coalesce_ms <= entry.arrival_ms:
                flush(q, queues[q][0].arrival_ms + coalesce_ms)
        queues[w].append(entry)
        if len(queues[w]) >= batch_size:
            flush(w, entry.arrival_ms)
    for q in range(workers):
        if queues[q]:
            flush(q, queues[q][0].arrival_ms + coalesce_ms)
    return sorted(out, key=lambda b: (b.send_at_ms, b.worker))


# --------------------------------------------------------------------------- outcome


@dataclass(frozen=True)
class Raised:
    """An incident the run raised, as the alerting service holds it."""

    incident_id: str
    doc_type: str
    severity: str
    opened_at_ms: int  # end of the window that opened it
    reopened: int = 0
    reasons: tuple[str, ...] = ()  # reason codes its notifications carried


@dataclass(frozen=True)
class Found:
    label: Label
    alerts: list[Raised]  # the incidents raised for it: one when all is well

    def delay_windows(self, window_ms: int = MINUTE_MS) -> int | None:
        """The label's windows up to and including the one that opened the first alert."""
        if not self.alerts:
            return None
        first = min(a.opened_at_ms for a in self.alerts)
        return (first - window_ms - self.label.start_ms) // window_ms + 1

    @property
    def diagnosed(self) -> bool:
        """The alert names the label's data-quality diagnosis (when it has one)."""
        d = self.label.diagnosis
        return d is None or not self.alerts or any(d in a.reasons for a in self.alerts)


@dataclass(frozen=True)
class Outcome:
    found: list[Found]
    unlabelled: list[Raised]

    @property
    def missed(self) -> list[Label]:
        return [f.label for f in self.found if not f.alerts]

    @property
    def repeated(self) -> list[Found]:
        """Labels alerted more than once (two incidents, or one re-opened)."""
        return [f for f in self.found if len(f.alerts) + sum(a.reopened for a in f.alerts) > 1]

    @property
    def undiagnosed(self) -> list[Label]:
        return [f.label for f in self.found if not f.diagnosed]

    @property
    def ok(self) -> bool:
        return not (self.missed or self.repeated or self.unlabelled or self.undiagnosed)


def match_alerts(
    labels: Sequence[Label],
    raised: Iterable[Raised],
    *,
    window_ms: int = MINUTE_MS,
    grace_windows: int = GRACE_WINDOWS,
) -> Outcome:
    """An alert belongs to a label of its doc type when the window that opened it started
    inside the label's span or up to ``grace_windows`` after it; any other alert is
    unlabelled (a false alarm)."""
    found: dict[int, list[Raised]] = {i: [] for i in range(len(labels))}
    unlabelled: list[Raised] = []
    for alert in sorted(raised, key=lambda a: (a.opened_at_ms, a.doc_type)):
        start = alert.opened_at_ms - window_ms
        owner = next(
            (
                i
                for i, lab in enumerate(labels)
                if lab.doc_type == alert.doc_type
                and lab.start_ms <= start < lab.end_ms + grace_windows * window_ms
            ),
            None,
        )
        if owner is None:
            unlabelled.append(alert)
        else:
            found[owner].append(alert)
    return Outcome([Found(lab, found[i]) for i, lab in enumerate(labels)], unlabelled)


def replay_wall_s(event_ms: int, *, origin_ms: int, origin_wall_s: float, speed: float) -> float:
    """When event time ``event_ms`` happens on the replay clock (wall seconds)."""
    return origin_wall_s + (event_ms - origin_ms) / 1000 / speed


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
