"""Validate snapshot events and encode them for the topic: the hot path of ingestion.

The pydantic model ``SnapshotEvent`` is the contract and stays the authority. Building it
(twelve model instances for a request with eleven anchors) and serializing it back is most
of the ingest service's CPU, so the accept path reads JSON text with msgspec, in one pass,
straight into Structs *derived from the model's own field annotations* at import (same
types, bounds, pattern, strictness, defaults; never written twice), checks the model's
cross-field rules, computes the derived figures with the model's own expressions and
writes the record with msgspec's encoder.

Anything the fast path refuses goes through the model itself, whose ``ContractError``
names the fields: the fast path decides only what is accepted, never what an error says.
It must never accept what the model refuses, and the bytes it writes must equal
``contracts.encode(SnapshotEvent(...))``; tests/unit/test_ingest_validation.py and
test_ingest_fastpath.py hold both against generated, malformed and hypothesis-made records
and JSON texts. Where msgspec and orjson + the model differ, the derived types are
stricter, never looser:

- pydantic's patterns use Rust regex, where ``$`` ends the text; Python's ``re`` (msgspec)
  also matches ``$`` before a final newline, so ``$`` becomes ``\\Z``. The pattern (no
  control characters) costs a regex call per string, so text without a backslash or a
  DEL, which JSON cannot make a control character from, is read with types without it;
- orjson reads an integer beyond 64 bits as a float, which the strict model refuses for an
  int field, so int fields get the int64 range;
- msgspec's encoder prints floats from 1e16 up as ``1e16`` where orjson prints ``1e+16``
  (ints, strings and smaller floats come out identical), so floats must lie within
  (-1e16, 1e16) unless the model bounds them tighter (this also makes them finite);
- msgspec does not read the keys the contract ignores (unknown keys; the parts of a Kong
  entry the mapping does not use), so text orjson would refuse there is checked first:
  invalid UTF-8 (``plain_json``). The one difference left, on purpose: a number beyond the
  float range in such a key is ignored with the key, where orjson calls the whole record
  "not JSON" (finding it would cost a scan of every byte, more than the fast path saves).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Final, Literal, NamedTuple

import annotated_types
import msgspec
from pydantic import BaseModel

from anchorwatch.contracts import RESAMPLE, AnchorSnapshot, SnapshotEvent, encode, validate


class Accepted(NamedTuple):
    """A valid snapshot event, encoded for the snapshots topic (keyed by doc type). (A
    named tuple: a frozen dataclass costs more to build than validating an anchor.)"""

    event_id: str
    doc_type: str
    value: bytes


# The model-level rules the derived types cannot carry: mirrored in _encoded.
_MIRRORED_VALIDATORS: Final = {"_anchors_fit_count"}
_FIELDS: Final = (
    "event_id",
    "event_time_ms",
    "doc_type",
    "snapshot_status",
    "anchor_count",
    "anchors",
    "source",
)
_DERIVED: Final = ("mean_drift", "max_drift", "max_kl_divergence", "resample_count")
# orjson reads an integer beyond 64 bits as a float; msgspec bounds must fit an int64.
_INT_RANGE: Final = (-(2**63), 2**63 - 1)
# msgspec prints floats from 1e16 up as 1e16 where orjson (contracts.encode) prints 1e+16;
# below, every float, int and string comes out byte for byte the same (tested). The fast
# types refuse larger floats (the model then decides, and orjson writes them).
_BELOW: Final = 1e16
# The one pattern of the contract: no control characters. Python's re (msgspec) matches $
# also before a final newline; \Z is Rust regex's (pydantic's) $.
_PRINTABLE: Final = r"^[^\x00-\x1f\x7f]+$"


class ContractChanged(ImportError):
    """SnapshotEvent changed in a way the derivation below does not translate."""


# A pydantic bound -> its attribute, which is also the name of msgspec.Meta's argument.
_BOUNDS: Final = {
    annotated_types.Ge: "ge", annotated_types.Le: "le", annotated_types.Lt: "lt",
    annotated_types.Gt: "gt", annotated_types.MinLen: "min_length",
    annotated_types.MaxLen: "max_length",
}  # fmt: skip


def _meta(base: Any, metadata: list[Any], *, patterns: bool) -> Any:
    """``base`` annotated with msgspec constraints equal to the pydantic ``metadata``."""
    constraints: dict[str, Any] = {}
    for m in metadata:
        bound = _BOUNDS.get(type(m))
        if bound is not None:
            constraints[bound] = getattr(m, bound)
        elif type(m).__name__ == "AllowInfNan":
            continue  # nothing to translate: the float bounds below are finite anyway
        elif type(m).__name__ == "_PydanticGeneralMetadata" and set(vars(m)) == {"pattern"}:
            pattern: str = m.pattern
            if pattern != _PRINTABLE:
                raise ContractChanged(f"pattern {pattern!r}: translate it for msgspec")
            if patterns:
                constraints["pattern"] = pattern[:-1] + "\\Z"
        else:
            raise ContractChanged(f"constraint {m!r}: translate it for msgspec")
    if base is int:
        low, high = _INT_RANGE
        if "gt" in constraints:
            constraints["ge"] = constraints.pop("gt") + 1
        if "lt" in constraints:
            constraints["le"] = constraints.pop("lt") - 1
        constraints["ge"] = max(constraints.get("ge", low), low)
        constraints["le"] = min(constraints.get("le", high), high)
    elif base is float:
        # Finite, and where msgspec prints a float as orjson does; a tighter bound stays.
        if (
            not constraints.get("le", _BELOW) < _BELOW
            and not constraints.get("lt", _BELOW) < _BELOW
        ):
            constraints.pop("le", None)
            constraints["lt"] = _BELOW
        if (
            not constraints.get("ge", -_BELOW) > -_BELOW
            and not constraints.get("gt", -_BELOW) > -_BELOW
        ):
            constraints.pop("ge", None)
            constraints["gt"] = -_BELOW
    return Annotated[base, msgspec.Meta(**constraints)] if constraints else base


def _translate(annotation: Any, derived: dict[type[BaseModel], Any], *, patterns: bool) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        base, metadata = args[0], list(annotation.__metadata__)
        inner_origin, inner_args = typing.get_origin(base), typing.get_args(base)
        if inner_origin is typing.Union or inner_origin is type(int | None):
            # Optional[X] with constraints: pydantic applies them to X.
            if len(inner_args) != 2 or type(None) not in inner_args:
                raise ContractChanged(f"{annotation!r}: translate it for msgspec")
            (inner,) = (a for a in inner_args if a is not type(None))
            return _constrained(inner, metadata, derived, patterns=patterns) | None
        return _constrained(base, metadata, derived, patterns=patterns)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return derived[annotation]
    if origin is list:
        return list[_translate(args[0], derived, patterns=patterns)]  # type: ignore[misc]
    if origin is Literal and all(isinstance(a, str) for a in args):
        return annotation
    if origin is typing.Union or origin is type(int | None):
        return typing.Union[tuple(_translate(a, derived, patterns=patterns) for a in args)]  # noqa: UP007
    if annotation in (int, float, str, type(None)):
        return _constrained(annotation, [], derived, patterns=patterns)
    raise ContractChanged(f"type {annotation!r}: translate it for msgspec")


def _constrained(
    base: Any, metadata: list[Any], derived: dict[type[BaseModel], Any], *, patterns: bool
) -> Any:
    if base in (int, float, str):
        return _meta(base, metadata, patterns=patterns)
    return _meta(_translate(base, derived, patterns=patterns), metadata, patterns=patterns)


def _struct(model: type[BaseModel], derived: dict[type[BaseModel], Any], *, patterns: bool) -> Any:
    """A msgspec Struct with the model's fields, in order (msgspec writes them in order)."""
    if model.model_config.get("strict") is not True or model.model_config.get("extra") not in (
        None,
        "ignore",
    ):
        raise ContractChanged(f"{model.__name__}: only strict models that ignore extra keys")
    fields: list[Any] = []
    for name, info in model.model_fields.items():
        annotation = _translate(info.rebuild_annotation(), derived, patterns=patterns)
        if info.is_required():
            fields.append((name, annotation))
        elif info.default_factory is not None:
            factory: Any = info.default_factory
            fields.append((name, annotation, msgspec.field(default_factory=factory)))
        else:
            fields.append((name, annotation, info.default))
    suffix = "" if patterns else "Printable"
    # gc=False: instances hold no cycles (scalars, and a list of such instances), so the
    # collector need not track the eleven-odd allocated per event.
    return msgspec.defstruct(f"Fast{model.__name__}{suffix}", fields, gc=False)


def _check_model_shape() -> None:
    validators = set(SnapshotEvent.__pydantic_decorators__.model_validators)
    if (
        validators != _MIRRORED_VALIDATORS
        or tuple(SnapshotEvent.model_fields) != _FIELDS
        or tuple(SnapshotEvent.model_computed_fields) != _DERIVED
        or AnchorSnapshot.__pydantic_decorators__.model_validators
        or AnchorSnapshot.model_computed_fields
    ):
        raise ContractChanged(
            "SnapshotEvent's fields, validators or computed fields changed: mirror them in "
            "anchorwatch.connectors.validation"
        )


def _types(*, patterns: bool) -> tuple[Any, Any]:
    derived: dict[type[BaseModel], Any] = {}
    derived[AnchorSnapshot] = _struct(AnchorSnapshot, derived, patterns=patterns)
    return derived[AnchorSnapshot], _struct(SnapshotEvent, derived, patterns=patterns)


_check_model_shape()
FastAnchor, FastEvent = _types(patterns=True)
# The same, without the one pattern (no control characters): for text that cannot hold any.
_PrintableAnchor, _PrintableEvent = _types(patterns=False)
_EVENT_JSON: Final = msgspec.json.Decoder(FastEvent)
_PRINTABLE_EVENT_JSON: Final = msgspec.json.Decoder(_PrintableEvent)
# A snapshot log: an array of anchor objects, or one object.
_LOG_JSON: Final = msgspec.json.Decoder(list[FastAnchor] | FastAnchor)  # type: ignore[valid-type]
_PRINTABLE_LOG_JSON: Final = msgspec.json.Decoder(
    list[_PrintableAnchor] | _PrintableAnchor  # type: ignore[valid-type]
)
_ENCODER: Final = msgspec.json.Encoder()
_SOURCE_OK: dict[str, bool] = {}


def plain_json(body: bytes) -> bool:
    """False when ``body`` holds what orjson would refuse in a place that msgspec skips
    without reading: invalid UTF-8. (Checked only for text that is not ASCII.)"""
    if body.isascii():
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _printable_json(text: bytes | str) -> bool:
    """No string in this JSON text can hold a control character: JSON must escape
    U+0000-U+001F, so without a backslash only a raw DEL could."""
    if isinstance(text, str):
        return "\\" not in text and "\x7f" not in text
    return b"\\" not in text and b"\x7f" not in text


def snapshot_record(data: Any) -> Accepted:
    """Validate one parsed snapshot event (a dict from orjson) and encode it. Raises
    ContractError naming the bad fields."""
    try:
        event = msgspec.convert(data, FastEvent)
    except msgspec.ValidationError:
        return _by_the_model(data)
    return _encoded(event) or _by_the_model(data)


def snapshot_json(raw: bytes, *, source: str) -> Accepted | None:
    """Decode and validate one NDJSON line (from a body ``plain_json`` passed); an event
    without a ``source`` gets ``source``. None: not accepted here, take the orjson path,
    which accepts or explains."""
    decoder = _PRINTABLE_EVENT_JSON if _printable_json(raw) else _EVENT_JSON
    try:
        event = decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if event.source is None:
        if not _source_ok(source):
            return None
        event.source = source
    return _encoded(event)


def anchor_log(text: str) -> list[Any] | None:
    """The validated anchors of one snapshot-log header value (a JSON array of anchor
    objects, or one object); None when not accepted here."""
    decoder = _PRINTABLE_LOG_JSON if _printable_json(text) else _LOG_JSON
    try:
        anchors = decoder.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return anchors if isinstance(anchors, list) else [anchors]


def event_record(
    event_id: str,
    event_time_ms: int,
    doc_type: str,
    snapshot_status: str,
    anchor_count: int,
    anchors: list[Any],
    source: str,
) -> Accepted | None:
    """Validate an event assembled from parts (``anchors`` from ``anchor_log``) and encode
    it; None when not accepted here."""
    data = {
        "event_id": event_id,
        "event_time_ms": event_time_ms,
        "doc_type": doc_type,
        "snapshot_status": snapshot_status,
        "anchor_count": anchor_count,
        "anchors": anchors,  # validated already: msgspec passes Struct instances through
        "source": source,
    }
    printable = event_id.isprintable() and doc_type.isprintable()
    try:
        event = msgspec.convert(data, _PrintableEvent if printable else FastEvent)
    except msgspec.ValidationError:
        return None
    return _encoded(event)


def _encoded(event: Any) -> Accepted | None:
    anchors: list[Any] = event.anchors
    # SnapshotEvent._anchors_fit_count.
    if len(anchors) > event.anchor_count or (event.snapshot_status == "disabled" and anchors):
        return None
    # Field order and exclude_none as contracts.encode writes them; the derived figures with
    # the model's own expressions, so that even -0.0 comes out the same.
    out = {
        "event_id": event.event_id,
        "event_time_ms": event.event_time_ms,
        "doc_type": event.doc_type,
        "snapshot_status": event.snapshot_status,
        "anchor_count": event.anchor_count,
        "anchors": anchors,
    }
    if event.source is not None:
        out["source"] = event.source
    if anchors:
        drifts = [a.drift_score for a in anchors]
        out["mean_drift"] = sum(drifts) / len(drifts)
        out["max_drift"] = max(drifts)
        out["max_kl_divergence"] = max([a.kl_divergence for a in anchors])
        out["resample_count"] = [a.recommendation for a in anchors].count(RESAMPLE)
    else:
        out["mean_drift"] = out["max_drift"] = out["max_kl_divergence"] = 0.0
        out["resample_count"] = 0
    return Accepted(event.event_id, event.doc_type, _ENCODER.encode(out))


def _source_ok(source: str) -> bool:
    ok = _SOURCE_OK.get(source)
    if ok is None:
        try:
            msgspec.convert(source, FastEvent.__annotations__["source"])
            ok = True
        except msgspec.ValidationError:
            ok = False
        _SOURCE_OK[source] = ok
    return ok


def _by_the_model(data: Any) -> Accepted:
    model = validate(SnapshotEvent, data)  # raises the ContractError naming the fields
    return Accepted(model.event_id, model.doc_type, encode(model))
