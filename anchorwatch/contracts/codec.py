"""orjson encode/decode for the wire contracts, with errors that name the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from anchorwatch.contracts.models import (
    Baseline,
    DriftEvent,
    SnapshotEvent,
    Verdict,
    WindowAggregate,
)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class FieldProblem:
    field: str  # dotted path with list indexes, e.g. "anchors[2].drift_score"; "$" = the record
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class ContractError(ValueError):
    """A record that does not fit its contract. ``problems`` names each field and why."""

    def __init__(self, record: str, problems: list[FieldProblem]) -> None:
        self.record = record
        self.problems = problems
        super().__init__(f"invalid {record}: " + "; ".join(str(p) for p in problems))

    @property
    def first_field(self) -> str:
        return self.problems[0].field if self.problems else "$"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "$"


def _problems(error: ValidationError) -> list[FieldProblem]:
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        msg = str(item["msg"])
        field = _path(tuple(item["loc"]))
        # Cross-field checks raise "field: reason" from a model validator (loc is empty).
        if field == "$" and msg.startswith("Value error, ") and ": " in msg:
            field, _, msg = msg.removeprefix("Value error, ").partition(": ")
        if item["type"] == "missing":
            msg = "required field is missing"
        problems.append(FieldProblem(field, msg))
    return problems


def validate(model: type[M], data: Any) -> M:
    """Validate already-parsed JSON (a dict) into ``model``."""
    if not isinstance(data, dict):
        raise ContractError(
            model.__name__, [FieldProblem("$", f"expected a JSON object, got {_kind(data)}")]
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ContractError(model.__name__, _problems(exc)) from None


def decode(model: type[M], raw: bytes | str) -> M:
    """Parse one JSON document and validate it into ``model``."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ContractError(model.__name__, [FieldProblem("$", f"not valid JSON: {exc}")]) from None
    return validate(model, data)


def encode(record: BaseModel) -> bytes:
    """Encode a contract model (computed fields included) as compact JSON bytes."""
    return orjson.dumps(record.model_dump(mode="json", exclude_none=True))


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def decode_snapshot(raw: bytes | str) -> SnapshotEvent:
    return decode(SnapshotEvent, raw)


def decode_window(raw: bytes | str) -> WindowAggregate:
    return decode(WindowAggregate, raw)


def decode_verdict(raw: bytes | str) -> Verdict:
    return decode(Verdict, raw)


def decode_baseline(raw: bytes | str) -> Baseline:
    return decode(Baseline, raw)


def decode_drift_event(raw: bytes | str) -> DriftEvent:
    return decode(DriftEvent, raw)
