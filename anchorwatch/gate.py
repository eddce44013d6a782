"""The release gate: judge a candidate model's test run per doc type. Pure, no I/O.

A test run is the snapshot events of a fixed test set answered by the candidate (and, for a
comparison, by the production model), each event carrying its ``model``. ``RunTally`` takes
the events one by one, refusing what would make the figures wrong (one event id with two
different records, other models' records under ``strict``); ``judge`` turns the tally into
one verdict per doc type:

- fail when the candidate's mean drift is above ``max_mean``;
- with a production model, fail when the candidate is shown worse: the lower bound of the
  Welch interval of (candidate - production) is above ``margin`` (default 0), i.e. even the
  most favourable reading of the data has the candidate worse by more than the margin;
- error (never a pass) when either model has fewer than ``min_docs`` documents of the type.

A document's figure is the event's ``mean_drift`` (recomputed from its anchors by the
contract): the per-request figure the drift job averages into windows.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.contracts.models import ModelVersion
from anchorwatch.errors import AnchorwatchError
from anchorwatch.gate_stats import Interval, Sample, welch_interval

#: The documents per doc type a release is judged on unless told otherwise.
DEFAULT_MIN_DOCS: Final = 1000
DEFAULT_MAX_MEAN: Final = 0.72
# Names listed in an error about models seen: enough to spot a typo, bounded in size.
_MODELS_LISTED: Final = 5

Status = Literal["pass", "fail", "error"]


class GateDataError(AnchorwatchError):
    """The records cannot be judged (no record of a model, a mixed run, ...): never a pass."""


class GateConfig(BaseModel):
    """What a release is held to; field names are the command's options without dashes."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    candidate: ModelVersion
    against: ModelVersion | None = None
    max_mean: float = Field(DEFAULT_MAX_MEAN, ge=0.0, le=1.0, allow_inf_nan=False)
    min_docs: int = Field(DEFAULT_MIN_DOCS, ge=2, le=100_000_000)
    margin: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    confidence: float = Field(0.95, ge=0.5, lt=1.0, allow_inf_nan=False)
    strict: bool = False

    @model_validator(mode="after")
    def _two_models(self) -> GateConfig:
        if self.against is not None and self.against == self.candidate:
            raise ValueError("against: must name another model than the candidate")
        return self


@dataclass(frozen=True, slots=True)
class _Seen:
    model: str | None
    doc_type: str
    drift: float
    digest: bytes


@dataclass(slots=True)
class RunTally:
    """The documents of one test run, per (model, doc type), one per event id."""

    config: GateConfig
    drifts: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    duplicates: int = 0
    #: Records of models the gate does not judge (None: no model), by model.
    ignored: Counter[str | None] = field(default_factory=Counter)
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def add(self, event: SnapshotEvent) -> None:
        cfg = self.config
        judged = event.model is not None and event.model in (cfg.candidate, cfg.against)
        if not judged:
            if cfg.strict:
                what = "has no model" if event.model is None else f"is of model {event.model!r}"
                raise GateDataError(
                    f"event {event.event_id!r} {what}, neither --model nor --against "
                    "(--strict refuses other records)"
                )
            self.ignored[event.model] += 1
            return
        assert event.model is not None  # judged
        seen = _Seen(
            event.model,
            event.doc_type,
            event.mean_drift,
            hashlib.blake2b(encode(event), digest_size=16).digest(),
        )
        before = self._seen.get(event.event_id)
        if before is not None:
            if before.digest == seen.digest:
                self.duplicates += 1  # redelivered: the same record again counts once
                return
            raise GateDataError(
                f"event {event.event_id!r} appears twice with different {_differs(before, seen)}"
                ": records of more than one run mixed?"
            )
        self._seen[event.event_id] = seen
        self.drifts[(event.model, event.doc_type)].append(seen.drift)

    def models(self) -> set[str]:
        return {model for model, _ in self.drifts}


def _differs(a: _Seen, b: _Seen) -> str:
    if a.model != b.model:
        return f"models ({a.model!r}, {b.model!r})"
    if a.doc_type != b.doc_type:
        return f"doc types ({a.doc_type!r}, {b.doc_type!r})"
    if a.drift != b.drift:
        return f"mean drift ({a.drift:.4f}, {b.drift:.4f})"
    return "values"


@dataclass(frozen=True, slots=True)
class TypeVerdict:
    doc_type: str
    status: Status
    candidate: Sample | None  # None: fewer than 2 documents
    production: Sample | None  # None: fewer than 2 documents, or no --against
    interval: Interval | None  # candidate - production, with --against and enough documents
    reasons: tuple[str, ...]  # why it failed or could not be judged; empty for a pass


@dataclass(frozen=True, slots=True)
class GateReport:
    config: GateConfig
    verdicts: tuple[TypeVerdict, ...]  # sorted by doc type
    duplicates: int
    ignored: int

    def count(self, status: Status) -> int:
        return sum(1 for v in self.verdicts if v.status == status)

    @property
    def exit_code(self) -> int:
        """0: every type passed; 1: a type failed; 2: a type could not be judged."""
        if self.count("error"):
            return 2
        return 1 if self.count("fail") else 0


def _sample(values: list[float]) -> Sample | None:
    return Sample.of(values) if len(values) >= 2 else None


def _unknown_model(model: str, option: str, tally: RunTally) -> GateDataError:
    seen = sorted(tally.models() | {m for m in tally.ignored if m is not None})
    listed = ", ".join(repr(m) for m in seen[:_MODELS_LISTED])
    more = f" and {len(seen) - _MODELS_LISTED} more" if len(seen) > _MODELS_LISTED else ""
    return GateDataError(
        f"{option} {model!r}: no record of this model in the run "
        f"(models seen: {listed + more if seen else 'none'})"
    )


def judge(tally: RunTally) -> GateReport:
    """One verdict per doc type that either model answered; raises ``GateDataError`` when
    the candidate or the production model has no record at all."""
    cfg = tally.config
    models = tally.models()
    if cfg.candidate not in models:
        raise _unknown_model(cfg.candidate, "--model", tally)
    if cfg.against is not None and cfg.against not in models:
        raise _unknown_model(cfg.against, "--against", tally)
    doc_types = sorted({doc_type for _, doc_type in tally.drifts})
    verdicts = tuple(_judge_type(tally, doc_type) for doc_type in doc_types)
    return GateReport(cfg, verdicts, tally.duplicates, sum(tally.ignored.values()))


def _judge_type(tally: RunTally, doc_type: str) -> TypeVerdict:
    cfg = tally.config
    new = tally.drifts.get((cfg.candidate, doc_type), [])
    old = tally.drifts.get((cfg.against, doc_type), []) if cfg.against is not None else []
    candidate, production = _sample(new), _sample(old)
    short = [
        f"{role} {model!r} has {len(docs)} documents of this type, fewer than "
        f"--min-docs {cfg.min_docs}"
        for role, model, docs in (
            ("candidate", cfg.candidate, new),
            ("production", cfg.against, old),
        )
        if model is not None and len(docs) < cfg.min_docs
    ]
    interval = None
    if candidate is not None and production is not None:
        interval = welch_interval(candidate, production, cfg.confidence)
    if short:
        return TypeVerdict(doc_type, "error", candidate, production, interval, tuple(short))
    assert candidate is not None  # min_docs >= 2
    reasons = []
    if candidate.mean > cfg.max_mean:
        reasons.append(f"mean drift {candidate.mean:.4f} above --max-mean {cfg.max_mean:g}")
    if interval is not None and interval.low > cfg.margin:
        reasons.append(
            f"worse than {cfg.against!r} by {interval.difference:+.4f} "
            f"({interval.confidence:.0%} interval {interval.low:+.4f}..{interval.high:+.4f}, "
            f"lower bound above --margin {cfg.margin:g})"
        )
    status: Status = "fail" if reasons else "pass"
    return TypeVerdict(doc_type, status, candidate, production, interval, tuple(reasons))
