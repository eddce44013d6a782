"""Deterministic synthetic gateway traffic for tests, demos and detection evaluation.

``generate(config)`` returns a :class:`Traffic`: the per-doc-type profiles, the labelled
incidents that were injected, and ``records()``, the NDJSON record bodies in the order a
gateway would deliver them (by arrival time, with ordinary disorder, late stragglers and
malformed lines mixed in). Pure logic: writing to Kafka or files is done by the callers.
The malformed bodies come from :mod:`anchorwatch.demo.malformed`; the Kong http-log entry of
an event's request from :mod:`anchorwatch.demo.kong_entry`.

Everything is drawn from ``random.Random`` instances seeded from the config, never from the
global generator or the clock, so the same config always yields byte-identical records.
Each (purpose, minute, doc type) has its own stream: a minute is generated without replaying
the ones before it, and changing e.g. ``malformed_rate`` or ``late_rate`` corrupts or delays
the same underlying events instead of producing different traffic.

Each type's requests are answered by its model versions (``routing.routes``: one, or two
during a rollout), its documents hold the anchor kinds of their sort (``routing.anchor_mix``)
and every request carries the latency Kong would have measured (``routing.latency_ms``,
higher for every anchor re-sampled). Models and latencies are drawn from streams of their
own, so the drift of every request is what it was before they existed.

Incidents are minute aligned, start no earlier than ``WARMUP_MINUTES`` into the run (a
baseline must exist before anything goes wrong) and end inside it. When the run is too short
or a type has no free span left, fewer incidents than asked for are placed: the labels in
``Traffic.incidents`` are the truth, not the config.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from anchorwatch.contracts import breakdown
from anchorwatch.contracts.codec import encode
from anchorwatch.contracts.models import (
    RESAMPLE,
    AnchorSnapshot,
    SnapshotEvent,
)
from anchorwatch.demo import routing
from anchorwatch.demo.malformed import malformed_line
from anchorwatch.demo.routing import DEFAULT_MIX, Routes, check_model

MINUTE_MS: Final = 60_000
#: Incidents start at least this many minutes into the run, after a clean warm-up.
WARMUP_MINUTES: Final = 5
#: Incident length in whole minutes, inclusive bounds.
INCIDENT_MINUTES: Final = (3, 10)
# Free minutes kept between two incidents on the same type, so that a detector can resolve
# the first before the second opens and each label maps to one alert.
_RECOVERY_GAP_MINUTES: Final = 2
_PLACEMENT_ATTEMPTS: Final = 100

DRIFT_KINDS: Final = ("jump", "ramp")
FAULT_KINDS: Final = ("zero_anchors", "disabled", "kl_spike", "resample_burst")
#: Drift in part of a type's traffic: the requests one model version answered
#: (``IncidentLabel.model``), or the anchors of one kind (``IncidentLabel.anchor_kind``).
SCOPED_KINDS: Final = ("model_jump", "kind_jump")
INCIDENT_KINDS: Final = DRIFT_KINDS + FAULT_KINDS + SCOPED_KINDS
DOC_TYPE_NAMES: Final = (
    "purchase_contract",
    "medical_report",
    "invoice",
    "nda",
    "lease_agreement",
    "insurance_claim",
    "radiology_report",
    "discharge_summary",
    "bank_statement",
    "patent_filing",
    "employment_contract",
    "rag_kb_article",
    "tax_form",
    "clinical_trial_protocol",
    "research_paper",
    "loan_application",
    "privacy_policy",
    "support_ticket",
)
# medical_report runs this much hotter than purchase_contract: the example the docs use.
_MEDICAL_OVER_PURCHASE: Final = 0.15

RateTier = Literal["busy", "normal", "sparse"]
_RATE_RANGES: Final[dict[RateTier, tuple[float, float]]] = {
    "busy": (30.0, 120.0),
    "normal": (5.0, 30.0),
    "sparse": (0.5, 3.0),
}

# Splits a type's per-anchor spread into a per-request part (anchors of one document move
# together) and a per-anchor part; the shares add up to 1 in variance, so an anchor's drift
# is still N(base, spread) around the type's level.
_REQUEST_SHARE: Final = math.sqrt(0.36)
_ANCHOR_SHARE: Final = math.sqrt(0.64)
#: Drift above which the gateway re-samples an anchor (recommendation "re-sample").
RESAMPLE_ABOVE: Final = 0.8


# --------------------------------------------------------------------------------------------
# Public data types


@dataclass(frozen=True, slots=True)
class DocTypeProfile:
    """How one document type behaves when nothing is wrong."""

    name: str
    base_drift: float  # mean per-anchor drift
    spread: float  # std of per-anchor drift around base_drift
    rate_per_minute: float  # Poisson mean, rate_scale already applied
    anchors_mean: float  # mean anchors per request
    models: Routes = ()  # (model version, share of requests); none: no model on them
    anchor_kinds: tuple[str, ...] = DEFAULT_MIX  # anchor-id prefixes, drawn uniformly


@dataclass(frozen=True, slots=True)
class IncidentLabel:
    """Ground truth for one injected incident.

    ``magnitude`` by kind: jump, the drift added over the whole span; ramp, the drift added
    at the end (growing linearly from 0 at the start); zero_anchors and disabled, the share
    of the type's requests hit; kl_spike, the KL divergence level of every anchor;
    resample_burst, the share of anchors recommended for re-sampling whatever their drift;
    model_jump, the drift added to the requests ``model`` answered; kind_jump, the drift
    added to the anchors of ``anchor_kind`` (a ``breakdown.KINDS`` kind).
    """

    doc_type: str
    start_ms: int  # event time, inclusive
    end_ms: int  # event time, exclusive
    kind: str  # one of INCIDENT_KINDS
    magnitude: float
    model: str | None = None  # model_jump: the version whose requests drift
    anchor_kind: str | None = None  # kind_jump: the kind whose anchors drift

    def __post_init__(self) -> None:
        if (self.kind == "model_jump") != (self.model is not None):
            raise ValueError("model: a model_jump's, and only its")
        if (self.kind == "kind_jump") != (self.anchor_kind in breakdown.KINDS):
            raise ValueError(f"anchor_kind: a kind_jump's, one of {breakdown.KINDS}")

    def to_json(self) -> bytes:
        """One NDJSON line body (no newline); ``model`` and ``anchor_kind`` only when set,
        so the labels of other kinds read as they always did."""
        data = {
            "doc_type": self.doc_type,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "kind": self.kind,
            "magnitude": self.magnitude,
        }
        if self.model is not None:
            data["model"] = self.model
        if self.anchor_kind is not None:
            data["anchor_kind"] = self.anchor_kind
        return orjson.dumps(data)

    def covers(self, event_time_ms: int) -> bool:
        return self.start_ms <= event_time_ms < self.end_ms


@dataclass(frozen=True, slots=True)
class TrafficConfig:
    seed: int = 7
    start_ms: int = 1_764_403_200_000  # 2025-11-29T08:00Z; must be minute aligned
    minutes: int = 30
    doc_types: int = 8
    rate_scale: float = 1.0  # multiplies every type's request rate
    malformed_rate: float = 0.0  # share of records replaced by malformed bytes
    disorder_ms: int = 5_000  # ordinary arrival = event time + U[0, disorder_ms]
    late_rate: float = 0.0  # share of records delayed by U[late_delay_ms]
    late_delay_ms: tuple[int, int] = (90_000, 240_000)
    incidents: int = 0  # drift incidents (jump / ramp) to inject
    fault_incidents: int = 0  # data-quality incidents (zero_anchors .. resample_burst)
    background_fault_rate: float = 0.0  # unlabelled per-request faults
    # Drift incidents in one model version or one anchor kind only (SCOPED_KINDS).
    scoped_incidents: int = 0
    model: str | None = None  # the model version on every event; None: each type's routes
    models: bool = True  # False (and no model): no event names a model

    def __post_init__(self) -> None:
        _check_int("seed", self.seed)
        _check_int("start_ms", self.start_ms, low=946_684_800_000)
        if self.start_ms % MINUTE_MS:
            # Chunks and incidents are minute aligned so that they line up with windows.
            raise ValueError(f"start_ms: must be a whole minute, got {self.start_ms}")
        _check_int("minutes", self.minutes, low=1)
        _check_int("doc_types", self.doc_types, low=1)
        scale = self.rate_scale
        if not (_is_number(scale) and math.isfinite(scale) and scale >= 0):
            raise ValueError(f"rate_scale: must be a finite number >= 0, got {scale!r}")
        for name in ("malformed_rate", "late_rate", "background_fault_rate"):
            value = getattr(self, name)
            if not (_is_number(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name}: must be a share in [0, 1], got {value!r}")
        _check_int("disorder_ms", self.disorder_ms, low=0)
        delay = self.late_delay_ms
        if not (
            isinstance(delay, tuple)
            and len(delay) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in delay)
            and 0 <= delay[0] <= delay[1]
        ):
            raise ValueError(
                f"late_delay_ms: must be (low, high) with 0 <= low <= high, got {delay!r}"
            )
        _check_int("incidents", self.incidents, low=0)
        _check_int("fault_incidents", self.fault_incidents, low=0)
        _check_int("scoped_incidents", self.scoped_incidents, low=0)
        if not isinstance(self.models, bool):
            raise ValueError(f"models: must be true or false, got {self.models!r}")
        if self.model is not None:
            check_model("model", self.model)
        # The contract rejects times from 2100 on; keep every arrival a valid event time too.
        if self.end_ms + delay[1] >= 4_102_444_800_000:
            raise ValueError("minutes: the run must end (late arrivals included) before 2100")

    @property
    def end_ms(self) -> int:
        """Event time where the run ends (exclusive)."""
        return self.start_ms + self.minutes * MINUTE_MS


@dataclass(frozen=True, slots=True)
class GeneratedRecord:
    arrival_ms: int  # when the gateway would have delivered it
    raw: bytes  # NDJSON line body, no newline: encode(event), or the malformed bytes
    event: SnapshotEvent | None  # None for malformed records
    late: bool  # delayed by the late mechanism rather than ordinary disorder
    malformed_reason: str | None  # one of malformed.MALFORMED_REASONS, or None


@dataclass(frozen=True, slots=True)
class Traffic:
    config: TrafficConfig
    profiles: tuple[DocTypeProfile, ...]
    incidents: tuple[IncidentLabel, ...]  # sorted by start_ms

    def records(self) -> Iterator[GeneratedRecord]:
        """All records by arrival time (ties in generation order); regenerated on each call.

        Streams: minutes are generated one at a time and held in a heap only until no later
        minute can produce an earlier arrival, so memory follows the delay horizon (about
        late_delay_ms of traffic), not the length of the run.
        """
        heap: list[tuple[int, int, GeneratedRecord]] = []
        seq = 0
        for minute in range(self.config.minutes):
            for index, profile in enumerate(self.profiles):
                incidents = [i for i in self.incidents if i.doc_type == profile.name]
                for record in self._minute(minute, index, profile, incidents):
                    heapq.heappush(heap, (record.arrival_ms, seq, record))
                    seq += 1
            # Every later event has event time >= the next minute, and arrives no earlier.
            horizon = self.config.start_ms + (minute + 1) * MINUTE_MS
            while heap and heap[0][0] < horizon:
                yield heapq.heappop(heap)[2]
        while heap:
            yield heapq.heappop(heap)[2]

    def _minute(
        self, minute: int, index: int, profile: DocTypeProfile, incidents: list[IncidentLabel]
    ) -> Iterator[GeneratedRecord]:
        cfg = self.config
        content = _rng(cfg.seed, "traffic", minute, index)
        delivery = _rng(cfg.seed, "delivery", minute, index)
        corrupt = _rng(cfg.seed, "malformed", minute, index)
        router = _rng(cfg.seed, "model", minute, index)
        timing = _rng(cfg.seed, "latency", minute, index)
        minute_start = cfg.start_ms + minute * MINUTE_MS
        for k, offset in enumerate(_arrival_offsets(content, profile.rate_per_minute)):
            event_time = minute_start + offset
            active = [i for i in incidents if i.covers(event_time)]
            # The seed and the start's epoch minute make ids unique across streams too.
            event_id = f"{cfg.seed}-{cfg.start_ms // MINUTE_MS}-{index}-{minute}-{k}"
            model = _model(router.random(), profile, cfg)
            event = _event(content, profile, event_id, event_time, active, cfg, model, timing)
            # Always draw all delivery decisions so that changing one rate leaves the others'
            # outcomes for each event unchanged.
            malformed = delivery.random() < cfg.malformed_rate
            late = delivery.random() < cfg.late_rate
            ordinary_delay = delivery.randint(0, cfg.disorder_ms)
            late_delay = delivery.randint(*cfg.late_delay_ms)
            arrival = event_time + (late_delay if late else ordinary_delay)
            if malformed:
                raw, reason = malformed_line(corrupt, event)
                yield GeneratedRecord(arrival, raw, None, late, reason)
            else:
                yield GeneratedRecord(arrival, encode(event), event, late, None)


def generate(config: TrafficConfig) -> Traffic:
    """Profiles and incident labels for ``config``; records are produced by ``records()``."""
    profiles = _profiles(config)
    return Traffic(config, profiles, _place_incidents(config, profiles))


# --------------------------------------------------------------------------------------------
# Profiles and incidents


def _rng(seed: int, *parts: object) -> random.Random:
    # random.Random hashes a string seed with SHA-512: the same stream in every process,
    # unlike seeding from hash(), which is salted per process.
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_int(name: str, value: object, *, low: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name}: must be >= {low}, got {value}")


def _doc_type_name(index: int) -> str:
    base = DOC_TYPE_NAMES[index % len(DOC_TYPE_NAMES)]
    round_ = index // len(DOC_TYPE_NAMES)
    return base if round_ == 0 else f"{base}_{round_ + 1}"


def _rate_tiers(n: int) -> list[RateTier]:
    # A quarter busy and a quarter sparse, at least one of each once there is room: detectors
    # must cope with types that fill a window and types that barely reach min_requests.
    busy = max(1, n // 4) if n >= 2 else 0
    sparse = max(1, n // 4) if n >= 3 else 0
    tiers: list[RateTier] = ["busy"] * busy
    tiers += ["sparse"] * sparse
    tiers += ["normal"] * (n - busy - sparse)
    return tiers


def _profiles(config: TrafficConfig) -> tuple[DocTypeProfile, ...]:
    rng = _rng(config.seed, "profiles")
    tiers = _rate_tiers(config.doc_types)
    rng.shuffle(tiers)
    profiles: list[DocTypeProfile] = []
    purchase_base = 0.0
    for index, tier in enumerate(tiers):
        name = _doc_type_name(index)
        low, high = _RATE_RANGES[tier]
        rate = round(rng.uniform(low, high), 2)
        base = rng.uniform(0.15, 0.6)
        if name == "purchase_contract":
            purchase_base = base = rng.uniform(0.28, 0.40)
        elif name == "medical_report":
            base = purchase_base + _MEDICAL_OVER_PURCHASE
        profiles.append(
            DocTypeProfile(
                name=name,
                base_drift=round(base, 3),
                spread=round(rng.uniform(0.03, 0.12), 3),
                rate_per_minute=rate * config.rate_scale,
                anchors_mean=round(rng.uniform(3.0, 20.0), 1),
                # Streams of their own: the draws above stay what they were.
                models=routing.routes(_rng(config.seed, "routes", index)),
                anchor_kinds=routing.anchor_mix(DOC_TYPE_NAMES[index % len(DOC_TYPE_NAMES)]),
            )
        )
    return tuple(profiles)


def _incident_magnitude(rng: random.Random, kind: str) -> float:
    if kind in DRIFT_KINDS:
        return round(rng.uniform(0.2, 0.45), 3)
    if kind == "kl_spike":
        return round(rng.uniform(1.5, 4.0), 3)
    if kind == "resample_burst":
        return round(rng.uniform(0.3, 0.8), 3)
    if kind in SCOPED_KINDS:  # on part of the traffic: more than a whole type's jump
        return round(rng.uniform(0.4, 0.6), 3)
    return round(rng.uniform(0.3, 0.9), 3)  # zero_anchors / disabled: share of requests


def _place_incidents(
    config: TrafficConfig, profiles: tuple[DocTypeProfile, ...]
) -> tuple[IncidentLabel, ...]:
    rng = _rng(config.seed, "incidents")
    taken: dict[int, list[tuple[int, int]]] = {}  # type index -> [start, end) minute spans
    labels: list[IncidentLabel] = []
    max_len = min(INCIDENT_MINUTES[1], config.minutes - WARMUP_MINUTES)
    if max_len < INCIDENT_MINUTES[0]:
        return ()  # too short for a warm-up plus the shortest incident
    # Scoped incidents come last: configs without them place what they always did.
    families = [DRIFT_KINDS] * config.incidents + [FAULT_KINDS] * config.fault_incidents
    families += [SCOPED_KINDS] * config.scoped_incidents
    for kinds in families:
        kind = rng.choice(kinds)
        for _ in range(_PLACEMENT_ATTEMPTS):
            length = rng.randint(INCIDENT_MINUTES[0], max_len)
            start = rng.randint(WARMUP_MINUTES, config.minutes - length)
            index = rng.randrange(len(profiles))
            spans = taken.setdefault(index, [])
            gap = _RECOVERY_GAP_MINUTES
            if any(start < e + gap and s < start + length + gap for s, e in spans):
                continue
            scope = _scope(kind, profiles[index], config)
            if scope is None:
                continue
            spans.append((start, start + length))
            labels.append(
                IncidentLabel(
                    doc_type=profiles[index].name,
                    start_ms=config.start_ms + start * MINUTE_MS,
                    end_ms=config.start_ms + (start + length) * MINUTE_MS,
                    kind=kind,
                    magnitude=_incident_magnitude(rng, kind),
                    **scope,
                )
            )
            break
    return tuple(sorted(labels, key=lambda i: (i.start_ms, i.doc_type, i.kind)))


def _scope(kind: str, profile: DocTypeProfile, config: TrafficConfig) -> dict[str, str] | None:
    """The part of ``profile``'s traffic a ``kind`` incident lives in ({} for all of it);
    None when the type has no such part: a model incident needs a type in a rollout (in
    one model only it is a jump), in the candidate."""
    if kind == "model_jump":
        routed = config.models and config.model is None
        return {"model": profile.models[-1][0]} if routed and len(profile.models) > 1 else None
    if kind == "kind_jump":
        return {"anchor_kind": routing.main_kind(profile.anchor_kinds)}
    return {}


def _model(u: float, profile: DocTypeProfile, config: TrafficConfig) -> str | None:
    """The model version answering a request whose routing draw is ``u``."""
    if config.model is not None:
        return config.model
    if not (config.models and profile.models):
        return None
    return routing.pick_model(profile.models, u)


# --------------------------------------------------------------------------------------------
# Events


def _arrival_offsets(rng: random.Random, rate_per_minute: float) -> list[int]:
    """Poisson process over one minute: exponential gaps give a Poisson count with times
    uniform in the minute, and need no exp(-rate) that underflows for busy types."""
    offsets: list[int] = []
    if rate_per_minute <= 0:
        return offsets
    t = rng.expovariate(rate_per_minute / MINUTE_MS)
    while t < MINUTE_MS:
        offsets.append(int(t))
        t += rng.expovariate(rate_per_minute / MINUTE_MS)
    return offsets


def _clip(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def _event(
    rng: random.Random,
    profile: DocTypeProfile,
    event_id: str,
    event_time: int,
    active: list[IncidentLabel],
    config: TrafficConfig,
    model: str | None,
    timing: random.Random,
) -> SnapshotEvent:
    offset = 0.0
    kind_offsets: dict[str, float] = {}
    zero = disabled = False
    kl_level: float | None = None
    resample_share = 0.0
    for incident in active:
        if incident.kind == "jump":
            offset += incident.magnitude
        elif incident.kind == "ramp":
            progress = (event_time - incident.start_ms) / (incident.end_ms - incident.start_ms)
            offset += incident.magnitude * progress
        elif incident.kind == "zero_anchors":
            zero = zero or rng.random() < incident.magnitude
        elif incident.kind == "disabled":
            disabled = disabled or rng.random() < incident.magnitude
        elif incident.kind == "kl_spike":
            kl_level = incident.magnitude
        elif incident.kind == "model_jump":
            offset += incident.magnitude if incident.model == model else 0.0
        elif incident.kind == "kind_jump":
            kind = str(incident.anchor_kind)
            kind_offsets[kind] = kind_offsets.get(kind, 0.0) + incident.magnitude
        else:
            resample_share = incident.magnitude
    # Drawn for every request so that background_fault_rate does not shift other draws.
    background = rng.random() < config.background_fault_rate
    fault = rng.choice(("zero_anchors", "disabled", "kl_spike"))
    spike = rng.uniform(1.5, 4.0)
    if background:
        zero = zero or fault == "zero_anchors"
        disabled = disabled or fault == "disabled"
        if fault == "kl_spike" and kl_level is None:
            kl_level = spike

    count = max(1, round(rng.gauss(profile.anchors_mean, profile.anchors_mean * 0.3)))
    common: dict[str, Any] = {
        "event_id": event_id,
        "event_time_ms": event_time,
        "doc_type": profile.name,
        "source": "generator",
    }
    if model is not None:
        common["model"] = model
    status: Literal["active", "disabled"] = "disabled" if disabled and not zero else "active"
    anchors: list[AnchorSnapshot] = []
    if zero:  # the "stuck at zero" signature: nothing counted, nothing logged
        count = 0
    elif not disabled:  # disabled: the gateway counted anchors but did not snapshot them
        level = profile.base_drift + offset + rng.gauss(0.0, profile.spread * _REQUEST_SHARE)
        noise = profile.spread * _ANCHOR_SHARE
        anchors = _anchors(
            rng, count, level, noise, kl_level, resample_share, profile.anchor_kinds, kind_offsets
        )
    resampled = sum(a.recommendation == RESAMPLE for a in anchors)
    return SnapshotEvent(
        **common,
        snapshot_status=status,
        anchor_count=count,
        anchors=anchors,
        latency_ms=routing.latency_ms(timing, len(anchors), resampled),
    )


def answered_event(
    rng: random.Random,
    *,
    event_id: str,
    event_time_ms: int,
    doc_type: str,
    level: float,
    noise: float,
    anchors_mean: float,
    model: str | None,
) -> SnapshotEvent:
    """One request answered by ``model`` whose anchors scatter (sd ``noise``) around
    ``level``, the document's drift under that model: the unit of a model's test run."""
    count = max(1, round(rng.gauss(anchors_mean, anchors_mean * 0.3)))
    return SnapshotEvent(
        event_id=event_id,
        event_time_ms=event_time_ms,
        doc_type=doc_type,
        snapshot_status="active",
        anchor_count=count,
        anchors=_anchors(rng, count, level, noise, None, 0.0),
        source="generator",
        model=model,
    )


def _anchors(
    rng: random.Random,
    count: int,
    level: float,
    noise: float,
    kl_level: float | None,
    resample_share: float,
    mix: tuple[str, ...] = DEFAULT_MIX,
    kind_offsets: dict[str, float] | None = None,
) -> list[AnchorSnapshot]:
    anchors: list[AnchorSnapshot] = []
    numbers: dict[str, int] = {}
    position = rng.randint(0, 200)
    for _ in range(count):
        kind = rng.choice(mix)
        numbers[kind] = numbers.get(kind, 0) + 1
        lift = kind_offsets.get(breakdown.anchor_kind(f"{kind}_"), 0.0) if kind_offsets else 0.0
        drift = round(_clip(rng.gauss(level + lift, noise), 0.0, 1.0), 4)
        kl = rng.uniform(0.01, 0.08) if kl_level is None else kl_level * rng.uniform(0.85, 1.15)
        burst = rng.random() < resample_share
        anchors.append(
            AnchorSnapshot(
                anchor_id=f"{kind}_{numbers[kind]:03d}",
                position=position,
                l2_norm=round(rng.uniform(3.0, 6.0), 4),
                cosine_angle=round(_clip(1.0 - drift * rng.uniform(0.2, 0.5), -1.0, 1.0), 4),
                kl_divergence=round(kl, 4),
                drift_score=drift,
                recommendation=RESAMPLE if burst or drift > RESAMPLE_ABOVE else "none",
            )
        )
        position += rng.randint(40, 1500)
    return anchors
