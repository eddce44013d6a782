"""JSON Schemas of the wire contracts, generated from the models and checked in.

``anchorwatch contracts schemas --write`` regenerates ``schemas/*.json``; a unit test fails
when the checked-in files differ from the models.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from anchorwatch.contracts.models import (
    SCHEMA_VERSION,
    Baseline,
    DeadLetter,
    DriftEvent,
    SnapshotEvent,
    SnapshotSummary,
    Verdict,
    WindowAggregate,
)

SCHEMA_DIR = Path(__file__).parent / "schemas"

#: file stem -> model; the stem plus the version is the schema's file name and $id.
CONTRACTS: dict[str, type[BaseModel]] = {
    "snapshot-event": SnapshotEvent,
    "snapshot-summary": SnapshotSummary,
    "window-aggregate": WindowAggregate,
    "verdict": Verdict,
    "baseline": Baseline,
    "drift-event": DriftEvent,
    "dead-letter": DeadLetter,
}


def schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}.v{SCHEMA_VERSION}.schema.json"


def render(name: str) -> str:
    """The schema of a record as written on the wire (computed fields included)."""
    schema = CONTRACTS[name].model_json_schema(mode="serialization")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://anchorwatch.dev/schemas/{name}.v{SCHEMA_VERSION}.schema.json",
        **schema,
    }
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_all() -> list[Path]:
    SCHEMA_DIR.mkdir(exist_ok=True)
    paths = []
    for name in CONTRACTS:
        path = schema_path(name)
        path.write_text(render(name), encoding="utf-8")
        paths.append(path)
    return paths
