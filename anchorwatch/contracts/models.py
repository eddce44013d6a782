"""Typed wire contracts shared by the connectors, the Flink jobs and the alerting service.

Pure data: no I/O, no client libraries. Every record on a project topic is one of these
models encoded as a JSON object (see ``codec.py``); the JSON Schemas in ``schemas/`` are
generated from them and checked in, so the two can never drift apart unnoticed.

Times are integer milliseconds since the Unix epoch (UTC): the unit Kong's log serializer
uses (``started_at``) and the one Flink turns into event time without string parsing.
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Annotated, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from anchorwatch.contracts import breakdown
from anchorwatch.contracts.breakdown import (
    LATENCY_MAX_MS,
    TOP_ANCHORS_PER_EVENT,
    TOP_ANCHORS_PER_WINDOW,
    TOP_MODELS_PER_WINDOW,
    AnchorKind,
)

#: Bumped when a change to a model is not backward compatible; part of each schema's $id.
SCHEMA_VERSION = 1

# 2000-01-01 .. 2100-01-01: anything outside is a unit mistake (seconds, microseconds).
EpochMillis = Annotated[int, Field(ge=946_684_800_000, lt=4_102_444_800_000)]
Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
_DOC_TYPE_MAX_CHARS = 512
#: The longest doc type and identifier (event id, ...) the contracts allow, in characters.
DOC_TYPE_MAX_CHARS: Final = _DOC_TYPE_MAX_CHARS
IDENTIFIER_MAX_CHARS: Final = 200
# Code points a doc type must not hold: control, format (zero-width, bidi overrides, soft
# hyphen ...) and line/paragraph separators. Two names that look the same must be the same
# doc type, and none may reorder or hide text where it is shown.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# Letters and symbols that render as blank space (Hangul fillers, the braille blank).
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def doc_type_text(value: str) -> str:
    """A doc type, NFC-normalised (one name, one byte sequence); raises naming the first
    code point that is not allowed, or when nothing visible is left."""
    text = unicodedata.normalize("NFC", value)
    for char in text:
        category = unicodedata.category(char)
        if category in _REFUSED_CATEGORIES:
            raise PydanticCustomError(
                "doc_type_char",
                "U+{code} ({category}) not allowed",
                {"code": f"{ord(char):04X}", "category": category},
            )
    if len(text) > _DOC_TYPE_MAX_CHARS:
        raise PydanticCustomError(
            "doc_type_length", "longer than {max} characters", {"max": _DOC_TYPE_MAX_CHARS}
        )
    if all(c.isspace() or c in _BLANK or unicodedata.category(c) in ("Mn", "Me") for c in text):
        raise PydanticCustomError("doc_type_blank", "only whitespace or invisible characters")
    return text


# Doc types come from request headers: untrusted text. Bounded, visible, escaped on output.
DocType = Annotated[
    str,
    Field(min_length=1, max_length=_DOC_TYPE_MAX_CHARS),
    AfterValidator(doc_type_text),
]
Identifier = Annotated[
    str, Field(min_length=1, max_length=IDENTIFIER_MAX_CHARS, pattern=r"^[^\x00-\x1f\x7f]+$")
]

#: The longest model version a snapshot event may name, in characters.
MODEL_VERSION_MAX_CHARS: Final = 128


def model_version_text(value: str) -> str:
    """A model version, held to a doc type's rules (NFC, no control or format characters,
    something visible) with a shorter bound: it is a label, and printed in gate reports."""
    text = unicodedata.normalize("NFC", value)
    if len(text) > MODEL_VERSION_MAX_CHARS:
        raise PydanticCustomError(
            "model_length", "longer than {max} characters", {"max": MODEL_VERSION_MAX_CHARS}
        )
    return doc_type_text(text)


ModelVersion = Annotated[
    str,
    Field(min_length=1, max_length=MODEL_VERSION_MAX_CHARS),
    AfterValidator(model_version_text),
]

SnapshotStatus = Literal["active", "disabled"]
#: The recommendation that marks an anchor the model should re-read; its share is a signal.
RESAMPLE = "re-sample"


class _Contract(BaseModel):
    # strict: "0.5" is not a number and 1 is not a string on our wire. Unknown keys are
    # ignored so that an older reader accepts a newer writer's additions. (Lists, not
    # tuples: strict mode takes JSON arrays only as lists.)
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class AnchorSnapshot(_Contract):
    """The model's state at one semantic anchor of the prompt (one JSON object of the log)."""

    anchor_id: Identifier = Field(description="Anchor marker id, e.g. SECTION_003.")
    position: int = Field(ge=0, description="Token offset of the anchor in the prompt.")
    l2_norm: NonNegative
    cosine_angle: float = Field(ge=-1.0, le=1.0, allow_inf_nan=False)
    kl_divergence: NonNegative
    drift_score: Probability = Field(description="How far the model's grip slipped, 0..1.")
    recommendation: str = Field(
        min_length=1, max_length=64, description='e.g. "none", "re-sample".'
    )


class KindFigures(_Contract):
    """The anchors of one kind (``breakdown.anchor_kind``) in a request or a window."""

    anchor_count: int = Field(ge=1)
    mean_drift: Probability
    max_drift: Probability


class TopAnchor(_Contract):
    """One of the highest-drift anchors (``breakdown.top_anchors``); in a window, with the
    request it came from."""

    anchor_id: Identifier
    position: int = Field(ge=0)
    drift_score: Probability
    event_id: Identifier | None = None


class ModelFigures(_Contract):
    """The requests of one model version in a window (``model`` None: they named none)."""

    model: ModelVersion | None = None  # None is dropped on encode: absent reads as None
    request_count: int = Field(ge=1)
    mean_drift: Probability


class OtherModels(_Contract):
    """A window's requests of the models it does not list, summed."""

    model_count: int = Field(ge=1, description="Distinct models, or more when untracked.")
    request_count: int = Field(ge=1)
    mean_drift: Probability


class SnapshotEvent(_Contract):
    """One gateway request's semantic snapshot: the record on the snapshots topic, with the
    optional version of the model that answered it."""

    event_id: Identifier = Field(description="Unique per request; the idempotency key.")
    event_time_ms: EpochMillis = Field(description="When the request started (event time).")
    doc_type: DocType
    snapshot_status: SnapshotStatus
    anchor_count: int = Field(ge=0, le=100_000, description="Anchors the gateway counted.")
    anchors: list[AnchorSnapshot] = Field(
        default_factory=list, max_length=10_000, description="The per-anchor snapshot log."
    )
    source: str | None = Field(
        default=None, max_length=200, description="Where the record came from (gateway, file)."
    )
    # Mirrored by the ingest service's compiled path (connectors/native), like every field.
    model: ModelVersion | None = Field(
        default=None,
        description="Version of the model that answered, e.g. summarizer-2.1; absent: unknown.",
    )
    latency_ms: int | None = Field(
        default=None,
        ge=0,
        le=LATENCY_MAX_MS,
        description="The request's latency as the gateway measured it (Kong's "
        "latencies.request); absent: unknown.",
    )

    @model_validator(mode="after")
    def _anchors_fit_count(self) -> SnapshotEvent:
        if len(self.anchors) > self.anchor_count:
            raise ValueError(
                f"anchors: the log lists {len(self.anchors)} anchors "
                f"but anchor_count is {self.anchor_count}"
            )
        if self.snapshot_status == "disabled" and self.anchors:
            raise ValueError("anchors: must be empty when snapshot_status is 'disabled'")
        return self

    # Request-level figures, derived here once so the per-event path in Flink reads scalars
    # instead of unnesting the anchor list. They are written on encode and recomputed (never
    # trusted) on decode. A request without anchors has drift 0.0: the "stuck at zero"
    # data-quality signature, which the job counts separately.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_drift(self) -> float:
        if not self.anchors:
            return 0.0
        return sum(a.drift_score for a in self.anchors) / len(self.anchors)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_drift(self) -> float:
        return max((a.drift_score for a in self.anchors), default=0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def max_kl_divergence(self) -> float:
        return max((a.kl_divergence for a in self.anchors), default=0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def resample_count(self) -> int:
        return sum(1 for a in self.anchors if a.recommendation == RESAMPLE)

    # Where in the document (``breakdown``): per anchor kind, and the worst anchors.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def kinds(self) -> dict[AnchorKind, KindFigures]:
        return {
            kind: KindFigures(anchor_count=n, mean_drift=mean, max_drift=top)  # type: ignore[misc]
            for kind, (n, mean, top) in breakdown.kind_figures(self.anchors).items()
        }

    @computed_field  # type: ignore[prop-decorator]
    @property
    def top_anchors(self) -> list[TopAnchor]:
        return [
            TopAnchor(anchor_id=a.anchor_id, position=a.position, drift_score=a.drift_score)
            for a in breakdown.top_anchors(self.anchors, TOP_ANCHORS_PER_EVENT)
        ]


class SnapshotSummary(_Contract):
    """A snapshot event without its anchor log: what the drift job reads, on the summaries
    topic (``topics.summaries``) next to the full event on the snapshots topic. Its JSON is
    the event's own encoding with the ``anchors`` member cut out, so the request-level
    figures here are the ones computed from that log (stored, not recomputed)."""

    event_id: Identifier = Field(description="The snapshot event's event_id.")
    event_time_ms: EpochMillis
    doc_type: DocType
    snapshot_status: SnapshotStatus
    anchor_count: int = Field(ge=0, le=100_000)
    source: str | None = Field(default=None, max_length=200)
    model: ModelVersion | None = None
    latency_ms: int | None = Field(default=None, ge=0, le=LATENCY_MAX_MS)
    mean_drift: Probability
    max_drift: Probability
    max_kl_divergence: NonNegative
    resample_count: int = Field(ge=0, le=10_000)
    # Absent from a writer before they existed: read as none.
    kinds: dict[AnchorKind, KindFigures] = Field(default_factory=dict)
    top_anchors: list[TopAnchor] = Field(default_factory=list, max_length=TOP_ANCHORS_PER_EVENT)

    @classmethod
    def of(cls, event: SnapshotEvent) -> SnapshotSummary:
        return cls.model_validate(event.model_dump(exclude={"anchors"}))


class WindowAggregate(_Contract):
    """Per doc type, per event-time window: what the window saw."""

    doc_type: DocType
    window_start_ms: EpochMillis
    window_end_ms: EpochMillis
    request_count: int = Field(ge=0)
    mean_drift: Probability
    max_drift: Probability | None = None
    p95_drift: Probability | None = None
    stddev_drift: NonNegative | None = None
    anchor_count: int | None = Field(default=None, ge=0)
    disabled_share: Probability | None = None
    zero_anchor_share: Probability | None = None
    resample_share: Probability | None = None
    mean_kl_divergence: NonNegative | None = None
    late_count: int | None = Field(default=None, ge=0)
    # The breakdown (``breakdown``): absent from a job before it, read as unknown.
    kinds: dict[AnchorKind, KindFigures] | None = None
    top_anchors: list[TopAnchor] | None = Field(default=None, max_length=TOP_ANCHORS_PER_WINDOW)
    models: list[ModelFigures] | None = Field(default=None, max_length=TOP_MODELS_PER_WINDOW)
    other_models: OtherModels | None = None
    latency_count: int | None = Field(default=None, ge=0, description="Requests with a latency.")
    latency_p50_ms: int | None = Field(default=None, ge=0, le=LATENCY_MAX_MS)
    latency_p95_ms: int | None = Field(default=None, ge=0, le=LATENCY_MAX_MS)

    @model_validator(mode="after")
    def _window_ordered(self) -> WindowAggregate:
        if self.window_end_ms <= self.window_start_ms:
            raise ValueError("window_end_ms: must be after window_start_ms")
        return self


BreachLevel = Literal["none", "warning", "critical"]
RuleKind = Literal["baseline", "static"]


class Reason(_Contract):
    code: str = Field(min_length=1, max_length=64, description='e.g. "above_threshold".')
    message: str = Field(max_length=2_000)


class Verdict(_Contract):
    """One per (doc type, window): the window compared with that type's baseline."""

    verdict_id: Identifier = Field(description="Deterministic; see verdict_id().")
    job_version: str = Field(min_length=1, max_length=64)
    window: WindowAggregate
    rule: RuleKind
    baseline_version: str | None = Field(default=None, max_length=64)
    threshold: Probability
    critical_threshold: Probability
    min_requests: int = Field(ge=1)
    breach_level: BreachLevel
    reasons: list[Reason] = Field(default_factory=list)


BaselineStatus = Literal["fitted", "insufficient_history"]
PinSource = Literal["command", "settings"]
#: The longest reason a pin carries, in characters.
PIN_REASON_MAX_CHARS: Final = 1000
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


def pin_problem(
    threshold: float | None, critical_threshold: float | None, min_requests: int | None, mute: bool
) -> str | None:
    """What is wrong with a pin's figures together, as ``field: reason``, or a reason about
    the whole pin (None: nothing). The bounds of each figure are the fields' own."""
    if critical_threshold is not None and threshold is None:
        return "critical_threshold: pinned only together with a threshold"
    if threshold is None and min_requests is None and not mute:
        return "nothing to pin (give a threshold, min_requests or mute)"
    if critical_threshold is not None and threshold is not None and critical_threshold < threshold:
        return "critical_threshold: must not be below threshold"
    return None


class BaselinePin(_Contract):
    """An owner's decision for one doc type, which no refit overwrites: a fixed threshold,
    a minimum volume, or mute (see docs/detection.md, "Pinned overrides")."""

    threshold: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="A fixed warning threshold: the type is judged by it alone (no hourly "
        "profile, pooled evidence or adaptation).",
    )
    critical_threshold: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="A fixed critical threshold. Absent: as far above threshold as the "
        "type's critical threshold was above its warning threshold.",
    )
    min_requests: int | None = Field(
        default=None, ge=1, description="Windows with fewer requests do not count."
    )
    mute: bool = Field(
        default=False, description="Judged, but never opens an incident (no page, no ticket)."
    )
    source: PinSource = Field(default="command", description="command or settings.")
    author: str | None = Field(default=None, max_length=200, pattern=_PRINTABLE)
    reason: str | None = Field(default=None, max_length=PIN_REASON_MAX_CHARS, pattern=_PRINTABLE)
    pinned_at_ms: EpochMillis | None = None

    @model_validator(mode="after")
    def _something_pinned(self) -> BaselinePin:
        problem = pin_problem(self.threshold, self.critical_threshold, self.min_requests, self.mute)
        if problem is not None:
            raise ValueError(problem)
        return self


class Baseline(_Contract):
    """A doc type's normal drift, fitted on history. Keyed by doc type on a compacted topic."""

    doc_type: DocType
    version: str = Field(min_length=1, max_length=64, description="Changes on every refit.")
    status: BaselineStatus
    fitted_at_ms: EpochMillis
    history_start_ms: EpochMillis
    history_end_ms: EpochMillis
    window_count: int = Field(ge=0, description="How many one-minute windows it rests on.")
    center: Probability = Field(description="Median of window mean drift.")
    spread: NonNegative = Field(
        description="Robust spread of a window mean at typical_request_count requests; "
        "at n requests: spread x sqrt(typical_request_count / n)."
    )
    p95: Probability
    p99: Probability
    typical_request_count: NonNegative
    threshold: Probability = Field(description="A window mean above this breaches (warning).")
    critical_threshold: Probability = Field(description="A window mean above this is critical.")
    min_requests: int = Field(ge=1, description="Fewer requests than this prove nothing.")
    hourly_center: list[Probability] | None = Field(
        default=None, description="Per hour-of-day center (24 values) when history allows."
    )
    weekday_offset: list[Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]] | None = (
        Field(
            default=None,
            min_length=7,
            max_length=7,
            description="Per day of the week (Monday first, UTC) how far that day's center "
            "sits from the hourly profile (or the flat center), when two weeks of history "
            "show a weekly cycle.",
        )
    )
    autocorrelation: float | None = Field(
        default=None,
        ge=0.0,
        lt=1.0,
        description="Lag-1 autocorrelation of the history's window means (0 when windows "
        "are independent; for a wandering level under window noise, that of the AR(1) "
        "series whose sums vary as much); pooled evidence is discounted by it. Absent: "
        "treated as 0.",
    )
    significance: float | None = Field(
        default=None,
        gt=0.0,
        description="Standard errors by which a window smaller than min_requests must clear "
        "the threshold to count alone (the fit's policy figure). Absent: 3.",
    )
    extreme_threshold: Probability | None = Field(
        default=None,
        description="A judged window above this is beyond anything the history showed (its "
        "highest window mean plus the margin, at least critical_threshold): it opens a "
        "critical incident on its own. Absent: one window never does.",
    )
    spike_record: list[NonNegative] | None = Field(
        default=None,
        max_length=8,
        description="The type's ordinary spikes: item k-1 is how far above the center the "
        "history stayed for k windows in a row at most, read past a short history at the "
        "page budget's rate. An excursion of k windows no higher is not paged. Absent: no "
        "spike is ordinary.",
    )
    page_budget: NonNegative | None = Field(
        default=None, description="Pages per week the fit allowed the history's replay."
    )
    replayed_pages_per_week: NonNegative | None = Field(
        default=None,
        description="Pages per week the history's replay raised against these thresholds, "
        "outside the sustained excursions the fit left out.",
    )
    threshold_basis: str | None = Field(
        default=None,
        max_length=200,
        description="How the threshold was chosen (the spread, or raised to keep the "
        "replay within the page budget).",
    )
    pin: BaselinePin | None = Field(
        default=None,
        description="An owner's pin: its figures win over the fitted ones above, which stay "
        "as the fit gave them; refits leave a pinned type alone. Absent: not pinned.",
    )

    @model_validator(mode="after")
    def _history_ordered(self) -> Baseline:
        if self.critical_threshold < self.threshold:
            raise ValueError("critical_threshold: must not be below threshold")
        if self.history_end_ms < self.history_start_ms:
            raise ValueError("history_end_ms: must not be before history_start_ms")
        if self.hourly_center is not None and len(self.hourly_center) != 24:
            raise ValueError("hourly_center: must hold exactly 24 values")
        return self


DriftEventType = Literal["ANCHOR_DRIFT_ALERT", "ANCHOR_DRIFT_RESOLVED"]
Severity = Literal["warning", "critical"]


class DriftEvidence(_Contract):
    window_start_ms: EpochMillis
    mean_drift: Probability
    threshold: Probability
    request_count: int = Field(ge=0)
    baseline_version: str | None = None
    reasons: list[Reason] = Field(default_factory=list)
    # Where, which model, at what cost: the window's breakdown (``breakdown``), when the
    # job carried one.
    kinds: dict[AnchorKind, KindFigures] | None = None
    top_anchors: list[TopAnchor] | None = Field(default=None, max_length=TOP_ANCHORS_PER_WINDOW)
    models: list[ModelFigures] | None = Field(default=None, max_length=TOP_MODELS_PER_WINDOW)
    other_models: OtherModels | None = None
    latency_p50_ms: int | None = Field(default=None, ge=0, le=LATENCY_MAX_MS)
    latency_p95_ms: int | None = Field(default=None, ge=0, le=LATENCY_MAX_MS)


class DriftEvent(_Contract):
    """Downstream event for services such as a RAG retriever; keyed by doc type."""

    event_id: Identifier = Field(description="Deterministic: incident id + event type.")
    event_type: DriftEventType
    incident_id: Identifier
    doc_type: DocType
    severity: Severity
    opened_at_ms: EpochMillis
    emitted_at_ms: EpochMillis
    resolved_at_ms: EpochMillis | None = None
    evidence: DriftEvidence

    @model_validator(mode="after")
    def _resolution_has_time(self) -> DriftEvent:
        if (self.event_type == "ANCHOR_DRIFT_RESOLVED") != (self.resolved_at_ms is not None):
            raise ValueError("resolved_at_ms: set exactly when event_type is ANCHOR_DRIFT_RESOLVED")
        return self


def verdict_id(doc_type: str, window_start_ms: int, job_version: str) -> str:
    """The same window judged by the same job version always gets the same id.

    Hashed so the id stays short and safe whatever characters the doc type holds.
    """
    digest = hashlib.sha256(f"{doc_type}\x1f{window_start_ms}\x1f{job_version}".encode())
    return f"v1-{digest.hexdigest()[:32]}"


class DeadLetter(_Contract):
    """A rejected input record, kept with the reason so nothing is silently dropped."""

    raw: str = Field(description="The rejected bytes, as UTF-8 text (invalid bytes replaced).")
    reason: str = Field(max_length=2_000, description="What was wrong, naming the field.")
    field: str = Field(max_length=500, description='The first bad field ("$" = the record).')
    source: str = Field(max_length=200, description="Where it came from (connector, file).")
    rejected_at_ms: EpochMillis
