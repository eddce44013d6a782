"""Validate a parsed snapshot event and encode it for the topic: the hot path of ingestion.

The pydantic model ``SnapshotEvent`` is the contract and stays the authority. Building it
(twelve model instances for a request with eleven anchors) and serializing it back is most
of the ingest service's CPU, so the accept path validates with a TypedDict schema *derived
from the model's own field annotations* (same types, bounds, patterns, strictness; built
at import, never written twice), checks the model's cross-field rules, computes the derived
figures and writes JSON directly. Anything that fails goes through the model itself, whose
``ContractError`` names the fields; if the model accepted what the fast path refused, the
model wins. The bytes equal ``anchorwatch.contracts.encode(SnapshotEvent(...))``; unit tests
hold both properties against generated, malformed and hypothesis-made records.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any, Final, NotRequired, cast

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from anchorwatch.contracts import RESAMPLE, SnapshotEvent, encode, validate


@dataclass(frozen=True, slots=True)
class Accepted:
    """A valid snapshot event, encoded for the snapshots topic (keyed by doc type)."""

    event_id: str
    doc_type: str
    value: bytes


# The model-level rules the derived schema cannot carry: mirrored in _cross_field_ok.
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


def _typed_dict(model: type[BaseModel]) -> Any:
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        annotation = _swap_models(info.rebuild_annotation())
        fields[name] = annotation if info.is_required() else NotRequired[annotation]
    derived = cast(Any, TypedDict)(f"{model.__name__}Dict", fields)
    # The model's strictness and handling of unknown keys.
    config = {k: v for k, v in model.model_config.items() if k in ("strict", "extra")}
    derived.__pydantic_config__ = ConfigDict(**config)  # type: ignore[typeddict-item]
    return derived


def _swap_models(annotation: Any) -> Any:
    """The annotation with every nested contract model replaced by its derived TypedDict."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _typed_dict(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return Annotated[(_swap_models(args[0]), *annotation.__metadata__)]
    if origin is list:
        return list[_swap_models(args[0])]  # type: ignore[misc]
    return annotation


def _check_model_shape() -> None:
    validators = set(SnapshotEvent.__pydantic_decorators__.model_validators)
    if (
        validators != _MIRRORED_VALIDATORS
        or tuple(SnapshotEvent.model_fields) != _FIELDS
        or tuple(SnapshotEvent.model_computed_fields) != _DERIVED
    ):
        raise ImportError(
            "SnapshotEvent's fields, validators or computed fields changed: mirror them in "
            "anchorwatch.connectors.validation"
        )


_check_model_shape()
_FAST: Final = TypeAdapter(_typed_dict(SnapshotEvent))


def snapshot_record(data: Any) -> Accepted:
    """Validate one parsed snapshot event (a dict from orjson) and encode it. Raises
    ContractError naming the bad fields."""
    try:
        event: dict[str, Any] = _FAST.validate_python(data)
    except ValidationError:
        return _by_the_model(data)
    anchors: list[dict[str, Any]] = event.get("anchors", [])
    if not _cross_field_ok(event, anchors):
        return _by_the_model(data)
    # Field order and exclude_none as contracts.encode writes them; the derived figures with
    # the model's own expressions, so that even -0.0 comes out the same.
    out = {
        "event_id": event["event_id"],
        "event_time_ms": event["event_time_ms"],
        "doc_type": event["doc_type"],
        "snapshot_status": event["snapshot_status"],
        "anchor_count": event["anchor_count"],
        "anchors": anchors,
    }
    source = event.get("source")
    if source is not None:
        out["source"] = source
    drifts = [a["drift_score"] for a in anchors]
    out["mean_drift"] = sum(drifts) / len(drifts) if drifts else 0.0
    out["max_drift"] = max(drifts, default=0.0)
    out["max_kl_divergence"] = max((a["kl_divergence"] for a in anchors), default=0.0)
    out["resample_count"] = sum(1 for a in anchors if a["recommendation"] == RESAMPLE)
    return Accepted(event["event_id"], event["doc_type"], orjson.dumps(out))


def _cross_field_ok(event: dict[str, Any], anchors: list[dict[str, Any]]) -> bool:
    # SnapshotEvent._anchors_fit_count.
    if len(anchors) > event["anchor_count"]:
        return False
    return not (event["snapshot_status"] == "disabled" and anchors)


def _by_the_model(data: Any) -> Accepted:
    model = validate(SnapshotEvent, data)  # raises the ContractError naming the fields
    return Accepted(model.event_id, model.doc_type, encode(model))
