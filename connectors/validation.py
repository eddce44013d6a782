"""Validate snapshot events and encode them for the topic: the hot path of ingestion.

The pydantic model ``SnapshotEvent`` is the contract and stays the authority. Building it
(twelve model instances for a request with eleven anchors) and serializing it back cost
the ingest service most of its CPU, so the accept path is compiled: ``_native`` (Rust,
``connectors/native/``) reads a Kong body or an NDJSON line in one pass, checks the
contract's fields and cross-field rules, computes the derived figures as the model does and
writes the record as ``contracts.encode`` would, byte for byte, and its summary as
``summary_of`` would (``records.check_native_summary`` compares the two at import).

It decides only what is accepted, never what an error says: whatever it refuses goes
through the model itself (``snapshot_record``), whose ``ContractError`` names the fields.
It must never accept what the model refuses, and the bytes it writes must equal
``contracts.encode(SnapshotEvent(...))``; tests/unit/connectors/test_fastpath.py holds both
against generated, malformed and hypothesis-made records and JSON texts.

The contract's bounds live in the model and, as constants, in the Rust code. At import the
two are compared (``check_native_contract``): a change to a field's type, bounds, default,
alias or exclusion, to the model's configuration, or a validator or serializer added, made
without the Rust code, stops the service from starting, naming what changed. What the
comparison cannot see, the bodies of the cross-field check and of the computed fields that
the Rust code mirrors, only the fast-path tests hold.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Final, Literal, NamedTuple

import annotated_types
import orjson
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from anchorwatch.connectors import _native
from anchorwatch.contracts import (
    RESAMPLE,
    AnchorSnapshot,
    ContractError,
    FieldProblem,
    SnapshotEvent,
    encode,
    validate,
)
from anchorwatch.contracts.avro import encode_summary
from anchorwatch.contracts.breakdown import KINDS, TOP_ANCHORS_PER_EVENT
from anchorwatch.contracts.models import doc_type_text, model_version_text


class Accepted(NamedTuple):
    """A valid snapshot event, encoded for the snapshots topic (keyed by doc type), with
    its summaries-topic record (``summary_of(value)``; the compiled path writes it in the
    same pass, and None here means: not made yet)."""

    event_id: str
    doc_type: str
    value: bytes
    summary: bytes | None = None

    def summary_record(self) -> bytes:
        return self.summary if self.summary is not None else summary_of(self.value)


_ANCHORS_MEMBER: Final = b',"anchors":['
_AFTER_ANCHORS: Final = b'],"'
_KINDS_MEMBER: Final = b',"kinds":{'
# The summary's fields a snapshot event's JSON leaves out when None (contracts.encode).
_OPTIONAL: Final = ("source", "model", "latency_ms")


def summary_of(value: bytes) -> bytes:
    """The summaries-topic record (``SnapshotSummary`` in Avro's single-object encoding,
    ``contracts.avro``) of an encoded snapshot event: the figures the drift job needs, in a
    form it decodes without reading text. ``encode_summary`` gets every field of
    ``SnapshotSummary`` by name (None where the event has none)."""
    fields = orjson.loads(_without_anchors(value))
    for name in _OPTIONAL:
        fields.setdefault(name, None)
    return encode_summary(fields)


def _without_anchors(value: bytes) -> bytes:
    """The event's JSON with the ``anchors`` member cut out (``SnapshotSummary``'s JSON).

    Sound on what ``contracts.encode`` (or the compiled path) writes: compact JSON, the
    anchors member after ``anchor_count``, then strings and numbers up to ``kinds`` (an
    object), then ``top_anchors`` (an array). Inside a JSON string every ``"`` is escaped,
    so ``,"anchors":[``, ``,"kinds":{`` and ``],"`` with a bare quote only occur as
    structure, and ``kinds`` is no key of an anchor: the last ``,"kinds":{`` is the member
    (searched from the end, past at most three top anchors), and the last ``],"`` before
    it closes the anchors (past a few scalars). Parsing this, not the whole event, saves
    reading the anchor log a second time.
    """
    start = value.index(_ANCHORS_MEMBER)
    kinds = value.rfind(_KINDS_MEMBER, start)
    stop = kinds if kinds >= 0 else len(value)  # an event written before the breakdown
    end = value.rindex(_AFTER_ANCHORS, start + len(_ANCHORS_MEMBER) - 1, stop)
    return value[:start] + value[end + 1 :]


class ContractChanged(ImportError):
    """SnapshotEvent changed in a way the compiled fast path does not know about."""


# The model-level rules the compiled path mirrors (lib.rs, Event::encode).
_MIRRORED_VALIDATORS: Final = {"_anchors_fit_count"}
_DERIVED: Final = (
    "mean_drift", "max_drift", "max_kl_divergence", "resample_count", "kinds", "top_anchors",
)  # fmt: skip
# The one pattern of the contract: no control characters.
_PRINTABLE: Final = r"^[^\x00-\x1f\x7f]+$"
# A pydantic bound -> its name in the description.
_BOUNDS: Final = {
    annotated_types.Ge: "ge", annotated_types.Le: "le", annotated_types.Lt: "lt",
    annotated_types.Gt: "gt", annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}  # fmt: skip


def describe_field(annotation: Any, required: bool, default: Any = None) -> dict[str, Any]:
    """One field of the contract as ``_native.contract()`` describes it: its type, bounds,
    whether it must be printable, optional (None allowed), required, else its default."""
    out: dict[str, Any] = {"required": required}
    if not required:
        out["default"] = default
    metadata: list[Any] = []
    if typing.get_origin(annotation) is Annotated:
        annotation, metadata = typing.get_args(annotation)[0], list(annotation.__metadata__)
    args = typing.get_args(annotation)
    if type(None) in args and len(args) == 2:
        out["optional"] = True
        (annotation,) = (a for a in args if a is not type(None))
        if typing.get_origin(annotation) is Annotated:  # `ModelVersion | None`
            annotation, inner = typing.get_args(annotation)[0], annotation.__metadata__
            for m in inner:  # a Field(...) inside keeps its bounds as its own metadata
                metadata.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    origin = typing.get_origin(annotation)
    if annotation in (int, float, str):
        out["type"] = annotation.__name__
    elif origin is Literal:
        out["type"], out["values"] = "literal", list(typing.get_args(annotation))
    elif origin is list and issubclass(typing.get_args(annotation)[0], BaseModel):
        out["type"], out["items"] = "list", typing.get_args(annotation)[0].__name__
    else:
        raise ContractChanged(f"type {annotation!r}: teach connectors/native about it")
    if out["type"] == "str":
        out["printable"] = False
    for m in metadata:
        if (bound := _BOUNDS.get(type(m))) is not None:
            out[bound] = getattr(m, bound)
        elif type(m).__name__ == "AllowInfNan":
            continue  # the compiled path reads finite numbers only (serde_json refuses inf)
        elif type(m).__name__ == "_PydanticGeneralMetadata" and vars(m) == {"pattern": _PRINTABLE}:
            out["printable"] = True
        elif isinstance(m, AfterValidator) and m.func is doc_type_text:
            out["rule"] = "doc_type_text"  # lib.rs: plain_doc_type
        elif isinstance(m, AfterValidator) and m.func is model_version_text:
            out["rule"] = "model_version_text"  # lib.rs: plain_doc_type, its own bound
        else:
            raise ContractChanged(f"constraint {m!r}: teach connectors/native about it")
    return out


# What the compiled path assumes of a model's configuration (frozen changes nothing it does).
_CONFIG: Final = {"strict": True, "extra": "ignore"}


def describe(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    config = dict(model.model_config)
    config.pop("frozen", None)
    if config != _CONFIG:
        raise ContractChanged(f"{model.__name__}: model_config {config}: teach connectors/native")
    decorators = model.__pydantic_decorators__
    for kind in ("validators", "field_validators", "root_validators", "field_serializers"):
        if getattr(decorators, kind):
            raise ContractChanged(f"{model.__name__}: {kind}: teach connectors/native")
    if decorators.model_serializers:
        raise ContractChanged(f"{model.__name__}: a model serializer: teach connectors/native")
    out = {}
    for name, info in model.model_fields.items():
        if info.alias or info.validation_alias or info.serialization_alias or info.exclude:
            raise ContractChanged(
                f"{model.__name__}.{name}: alias or exclude: teach connectors/native"
            )
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        out[name] = describe_field(info.rebuild_annotation(), info.is_required(), default)
    return out


def check_native_contract() -> None:
    """Raise ContractChanged unless the compiled path checks exactly the model's rules."""
    validators = set(SnapshotEvent.__pydantic_decorators__.model_validators)
    if (
        validators != _MIRRORED_VALIDATORS
        or tuple(SnapshotEvent.model_computed_fields) != _DERIVED
        or AnchorSnapshot.__pydantic_decorators__.model_validators
        or AnchorSnapshot.model_computed_fields
    ):
        raise ContractChanged(
            "SnapshotEvent's validators or computed fields changed: mirror them in "
            "connectors/native/src/snapshot.rs (the checks) and lib.rs (contract())"
        )
    native = orjson.loads(_native.contract())
    if native["RESAMPLE"] != RESAMPLE:
        raise ContractChanged(
            f"RESAMPLE is {RESAMPLE!r}; connectors/native counts {native['RESAMPLE']!r}"
        )
    # The breakdown's rules (contracts.breakdown) the compiled path writes (encode.rs).
    breakdown = {"KINDS": list(KINDS), "TOP_ANCHORS_PER_EVENT": TOP_ANCHORS_PER_EVENT}
    for name, value in breakdown.items():
        if native[name] != value:
            raise ContractChanged(
                f"breakdown.{name} is {value!r}; connectors/native writes {native[name]!r}"
            )
    for model in (AnchorSnapshot, SnapshotEvent):
        fields = describe(model)
        if list(fields) != list(native[model.__name__]):
            raise ContractChanged(
                f"{model.__name__}'s fields are {list(fields)}; connectors/native reads "
                f"{list(native[model.__name__])}"
            )
        for name, described in fields.items():
            if described != native[model.__name__][name]:
                raise ContractChanged(
                    f"{model.__name__}.{name} is {described} in the model but "
                    f"{native[model.__name__][name]} in contract() of connectors/native/src/lib.rs"
                )


check_native_contract()


class TimeWindow(NamedTuple):
    """The event times ingestion accepts at one moment, ``now_ms`` (the clock is the
    caller's): from ``max_age_ms`` before it (older events would fall out of the snapshots
    topic's retention at once) to ``max_future_ms`` after it (one event from 2099 must not
    move a partition's watermark and close every window of that partition early)."""

    now_ms: int
    max_future_ms: int
    max_age_ms: int

    @property
    def earliest_ms(self) -> int:
        return self.now_ms - self.max_age_ms

    @property
    def latest_ms(self) -> int:
        return self.now_ms + self.max_future_ms

    def problem(self, time_ms: int) -> str | None:
        """Why ``time_ms`` is outside the window; None when inside."""
        if time_ms > self.latest_ms:
            return (
                f"{time_ms} is {_span(time_ms - self.now_ms)} ahead of the ingest clock "
                f"({self.now_ms}); at most {_span(self.max_future_ms)} is allowed "
                "(ingest.max_future_skew_s)"
            )
        if time_ms < self.earliest_ms:
            return (
                f"{time_ms} is {_span(self.now_ms - time_ms)} old, older than the snapshots "
                f"topic keeps events ({_span(self.max_age_ms)}, ingest.max_event_age_s)"
            )
        return None


def _span(ms: int) -> str:
    seconds = ms / 1000
    for unit, size in (("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:g} s"


def snapshot_record(data: Any, window: TimeWindow | None = None) -> Accepted:
    """Validate one parsed snapshot event (a dict from orjson) with the model and encode
    it; with a ``window``, its time must lie in it. Raises ContractError naming the bad
    fields."""
    model = validate(SnapshotEvent, data)
    if window is not None and (problem := window.problem(model.event_time_ms)) is not None:
        raise ContractError(SnapshotEvent.__name__, [FieldProblem("event_time_ms", problem)])
    value = encode(model)
    return Accepted(model.event_id, model.doc_type, value, summary_of(value))
