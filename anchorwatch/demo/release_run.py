"""Deterministic test runs of a model release: a fixed test set of documents per doc type,
each answered by the candidate model and the production model, with a known true difference
in drift. What ``anchorwatch gate`` judges, for its tests and for trying it out.

A document has a true drift (the type's production level plus the document's own offset,
shared by every model: the same test set); a model reads it with its own per-document
deviation, the candidate shifted by the type's ``difference``; the anchors scatter around
that. So a type's expected mean drift is its ``production_drift`` for the production model
and ``production_drift + difference`` for the candidate (levels stay well inside [0, 1], so
clipping the anchors' scores moves no mean measurably). Pure: the caller writes the lines.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from anchorwatch.contracts import encode
from anchorwatch.demo.generator import answered_event
from anchorwatch.demo.routing import check_model

#: 2025-11-29T08:00Z, as the generator's runs start.
START_MS: Final = 1_764_403_200_000
# A document's true level is kept in here, so that clipped anchors leave the means alone.
_LEVEL_BOUNDS: Final = (0.05, 0.95)


@dataclass(frozen=True, slots=True)
class TypeTruth:
    """One doc type of the test set and the truth the gate should find."""

    doc_type: str
    production_drift: float  # the production model's true mean drift on the type
    difference: float = 0.0  # the candidate's true mean drift minus production's
    docs: int = 1000  # documents the candidate answered
    production_docs: int | None = None  # documents production answered; None: docs

    @property
    def candidate_drift(self) -> float:
        return self.production_drift + self.difference


@dataclass(frozen=True, slots=True)
class ReleaseRunConfig:
    types: tuple[TypeTruth, ...]
    candidate: str = "summarizer-2.1"
    production: str | None = "summarizer-2.0"  # None: the candidate alone
    other_models: tuple[str, ...] = ()  # more models answering the same set (a mixed run)
    seed: int = 7
    document_spread: float = 0.05  # sd of the documents' true drift within a type
    model_noise: float = 0.03  # sd of a model's per-document deviation
    anchor_noise: float = 0.05  # sd of the anchors' scores around a document's level
    anchors_mean: float = 6.0

    def __post_init__(self) -> None:
        if not self.types:
            raise ValueError("types: a test run needs at least one doc type")
        if len({t.doc_type for t in self.types}) != len(self.types):
            raise ValueError("types: each doc type once")
        for name, model in self.models():
            check_model(name, model)
        if len({m for _, m in self.models()}) != len(self.models()):
            raise ValueError("models: each model version once")
        for t in self.types:
            for drift in (t.production_drift, t.candidate_drift):
                if not _LEVEL_BOUNDS[0] + 0.1 <= drift <= _LEVEL_BOUNDS[1] - 0.1:
                    raise ValueError(
                        f"{t.doc_type}: true drift {drift} outside [0.15, 0.85], where "
                        "clipped anchor scores would move the mean"
                    )
            if t.docs < 0 or (t.production_docs or 0) < 0:
                raise ValueError(f"{t.doc_type}: document counts must be >= 0")
        for name in ("document_spread", "model_noise", "anchor_noise"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 0.1):
                raise ValueError(f"{name}: must be in [0, 0.1], got {value!r}")

    def models(self) -> list[tuple[str, str]]:
        """(role, version) of every model answering the set, the candidate first."""
        out = [("candidate", self.candidate)]
        if self.production is not None:
            out.append(("production", self.production))
        out += [("other_models", m) for m in self.other_models]
        return out


def _rng(seed: int, *parts: object) -> random.Random:
    # A string seed is hashed with SHA-512: the same stream in every process.
    return random.Random(":".join(str(p) for p in (seed, "release", *parts)))


def release_run(config: ReleaseRunConfig) -> Iterator[bytes]:
    """The run's NDJSON line bodies (no newline): per type, per model, per document."""
    for t_index, truth in enumerate(config.types):
        # The documents' own drift: one test set, the same for every model.
        documents = _rng(config.seed, "documents", t_index)
        count = max(truth.docs, truth.production_docs or 0, 1)
        offsets = [documents.gauss(0.0, config.document_spread) for _ in range(count)]
        for m_index, (role, model) in enumerate(config.models()):
            docs = truth.docs
            if role == "production" and truth.production_docs is not None:
                docs = truth.production_docs
            shift = truth.difference if role == "candidate" else 0.0
            rng = _rng(config.seed, "answers", t_index, m_index)
            for i in range(docs):
                level = truth.production_drift + offsets[i] + shift
                level += rng.gauss(0.0, config.model_noise)
                event = answered_event(
                    rng,
                    event_id=f"run{config.seed}-t{t_index}-m{m_index}-d{i}",
                    event_time_ms=START_MS + i * 1_000,
                    doc_type=truth.doc_type,
                    level=min(max(level, _LEVEL_BOUNDS[0]), _LEVEL_BOUNDS[1]),
                    noise=config.anchor_noise,
                    anchors_mean=config.anchors_mean,
                    model=model,
                )
                yield encode(event)
