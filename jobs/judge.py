"""The drift job's per-doc-type logic, apart from Flink: pure, no I/O, no clock.

Per doc type the job keeps three things between windows: the latest baseline (a baseline
with an older ``fitted_at_ms`` never replaces a newer one: compaction and replays deliver
them out of order), the late events not yet reported, and the ``FlatLine`` state that lets a
flat line show on windows carrying only count and mean. ``DocTypeJudge`` holds them as plain
values (``JudgeState``, which the Flink function stores in its keyed state) and turns each
closed window into a verdict with ``anchorwatch.policy.window.judge_window``, with the type's
pin in the policy's settings if it has one (a pin on the baseline record comes with it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from anchorwatch.contracts import ContractError, Verdict, WindowAggregate, decode_baseline
from anchorwatch.contracts.models import Baseline, BaselinePin
from anchorwatch.policy.window import (
    FlatLine,
    QualityLimits,
    StaticRule,
    judge_window,
    verdict_for,
)

log = logging.getLogger(__name__)

#: A window's breakdown (anchorwatch.contracts.breakdown), as the drift job hands it over.
BREAKDOWN_FIELDS: Final = (
    "kinds", "top_anchors", "models", "other_models", "latency_count", "latency_p50_ms",
    "latency_p95_ms",
)  # fmt: skip


@dataclass
class JudgeState:
    """One doc type's state between windows, as plain values."""

    baseline: str | None = None  # the latest baseline record, as received
    late: int = 0  # late events not yet reported in a verdict
    flat: FlatLine = field(default_factory=FlatLine)

    def flat_json(self) -> str:
        return json.dumps(asdict(self.flat))

    @staticmethod
    def flat_from_json(text: str | None) -> FlatLine:
        """The stored ``FlatLine``; a missing or unreadable one starts afresh (a state from
        before flat lines were tracked, say)."""
        if not text:
            return FlatLine()
        try:
            raw = json.loads(text)
            return FlatLine(raw["mean"], int(raw["run"]), float(raw["varying"]))
        except (ValueError, KeyError, TypeError):
            return FlatLine()


class DocTypeJudge:
    """Judges the windows of one doc type, keeping its ``JudgeState`` (``state``)."""

    def __init__(
        self,
        job_version: str,
        static: StaticRule,
        quality: QualityLimits,
        state: JudgeState | None = None,
        pins: Mapping[str, BaselinePin] | None = None,
    ) -> None:
        """``pins``: the pins in the policy's settings, by doc type."""
        self.job_version = job_version
        self.static = static
        self.quality = quality
        self.state = state if state is not None else JudgeState()
        self.pins = pins or {}
        self._decoded: tuple[str, Baseline] | None = None  # the record last decoded

    def add_baseline(self, raw: str) -> Baseline:
        """Keep ``raw`` unless the baseline held was fitted later. Returns the decoded
        record; raises ``ContractError`` for one that is not a valid baseline."""
        baseline = decode_baseline(raw)
        held = self.baseline()
        if held is None or held.fitted_at_ms <= baseline.fitted_at_ms:
            self.state.baseline = raw
        return baseline

    def baseline(self) -> Baseline | None:
        stored = self.state.baseline
        if not stored:
            return None
        if self._decoded is not None and self._decoded[0] == stored:
            return self._decoded[1]
        try:
            baseline = decode_baseline(stored)
        except ContractError:
            return None  # only valid records are stored; a contract change may orphan one
        self._decoded = (stored, baseline)
        return baseline

    def add_late(self, count: int) -> None:
        """Events of this type the window operator dropped as late: reported in the next
        verdict."""
        self.state.late += max(count, 0)

    def judge(self, figures: Mapping[str, Any]) -> Verdict:
        """The verdict on a closed window (``figures``: WindowAggregate fields, None for a
        figure not computed); the late tally so far goes into it and starts again."""
        present = {k: v for k, v in figures.items() if v is not None}
        try:
            window = WindowAggregate(late_count=self.state.late, **present)
        except ValidationError as exc:
            # The job holds the breakdown to the contract; should a value still slip past
            # it (a foreign producer's text Java and Python read apart), the window is
            # judged without its breakdown rather than stop the job.
            if not any(k in present for k in BREAKDOWN_FIELDS):
                raise
            log.warning(
                "window breakdown refused by the contract; judged without it",
                extra={"doc_type": present.get("doc_type"), "error": str(exc)},
            )
            core = {k: v for k, v in present.items() if k not in BREAKDOWN_FIELDS}
            window = WindowAggregate(late_count=self.state.late, **core)
        self.state.late = 0
        self.state.flat = self.state.flat.after(window)
        judgement = judge_window(
            window,
            self.baseline(),
            self.static,
            self.quality,
            flat=self.state.flat,
            pin=self.pins.get(window.doc_type),
        )
        return verdict_for(window, judgement, self.job_version)
