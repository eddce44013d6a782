"""Where in the document, which model, at what cost: the pure rules behind the breakdown
figures a snapshot event and a drift window carry next to their mean drift.

Every writer (the models here, the ingest service's compiled path, the drift job in the
JVM, the demo's independent computation) follows these definitions exactly, so the figures
agree to the bit wherever they are computed:

- An anchor's *kind* is its id's text before the first ``_`` (``SECTION_003`` is SECTION)
  when that is one of ``ANCHOR_KINDS``, else ``OTHER_KIND``; case matters.
- An event's figures per kind: the anchors of that kind, their mean drift (Python's ``sum``
  in log order, divided by the count) and their max; kinds in ``KINDS`` order, only those
  present.
- An event's top anchors: up to ``TOP_ANCHORS_PER_EVENT``, by drift (highest first), then
  position, then id. A window keeps its ``TOP_ANCHORS_PER_WINDOW`` by the same order.
- A window's figures per kind: anchors summed over its events, the mean as
  ``sum(count * mean) / sum(count)`` in arrival order, the max of the maxes.
- A window's models: the first ``MODELS_TRACKED_PER_WINDOW`` distinct models (the unknown
  model, ``None``, is one) are counted each; later ones go to ``other``. The
  ``TOP_MODELS_PER_WINDOW`` with most requests (then by name, the unknown last) are listed;
  the rest, tracked or not, are summed as ``other_models``. A model's mean drift is the mean
  of its requests' ``mean_drift``. ``other_models.model_count`` is the unlisted tracked
  models plus one per request of an untracked model (their names are not kept: that is the
  bound); its mean drift sums the unlisted tracked models' drift in first-seen order, then
  the untracked requests' in arrival order.
- Latency quantiles are nearest-rank over the requests' latencies each rounded down to its
  bucket (``latency_bucket``): exact below 128 ms, under 1% low above. The job keeps counts
  per bucket, so its state per window is bounded whatever the latencies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final, Literal, Protocol

#: The anchor kinds the snapshot log names (its anchor ids' prefixes).
ANCHOR_KINDS: Final = (
    "SECTION",
    "ENTITY",
    "TABLE",
    "LIST",
    "CONDITION",
    "TIMELINE",
    "REFERENCE",
)
#: The kind of an anchor whose prefix is none of ``ANCHOR_KINDS``.
OTHER_KIND: Final = "OTHER"
#: Every kind, in the order figures are written.
KINDS: Final = (*ANCHOR_KINDS, OTHER_KIND)
AnchorKind = Literal[
    "SECTION", "ENTITY", "TABLE", "LIST", "CONDITION", "TIMELINE", "REFERENCE", "OTHER"
]  # fmt: skip

TOP_ANCHORS_PER_EVENT: Final = 3
TOP_ANCHORS_PER_WINDOW: Final = 5
#: Distinct models a window counts one by one (the job's state bound per window).
MODELS_TRACKED_PER_WINDOW: Final = 32
#: Models a window lists by name; the rest are summed as ``other_models``.
TOP_MODELS_PER_WINDOW: Final = 5
#: The longest request latency an event may carry (an hour), in milliseconds.
LATENCY_MAX_MS: Final = 3_600_000
#: Significant bits a latency keeps in its bucket (``latency_bucket``).
LATENCY_BUCKET_BITS: Final = 7


class _Anchor(Protocol):
    @property
    def anchor_id(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def drift_score(self) -> float: ...


def anchor_kind(anchor_id: str) -> str:
    prefix = anchor_id.split("_", 1)[0]
    return prefix if prefix in ANCHOR_KINDS else OTHER_KIND


def kind_figures(anchors: Sequence[_Anchor]) -> dict[str, tuple[int, float, float]]:
    """Per kind present, in ``KINDS`` order: (anchor count, mean drift, max drift)."""
    drifts: dict[str, list[float]] = {}
    for anchor in anchors:
        drifts.setdefault(anchor_kind(anchor.anchor_id), []).append(anchor.drift_score)
    return {kind: (len(d), sum(d) / len(d), max(d)) for kind in KINDS if (d := drifts.get(kind))}


def anchor_order(drift: float, position: int, anchor_id: str) -> tuple[float, int, str]:
    """The sort key of the top anchors: highest drift first, then position, then id."""
    return (-drift, position, anchor_id)


def top_anchors(anchors: Iterable[_Anchor], n: int = TOP_ANCHORS_PER_EVENT) -> list[_Anchor]:
    ranked = sorted(anchors, key=lambda a: anchor_order(a.drift_score, a.position, a.anchor_id))
    return ranked[:n]


def latency_bucket(latency_ms: int) -> int:
    """The lowest latency of ``latency_ms``'s bucket: itself below 2**7 ms, else with all
    but its 7 highest bits cleared."""
    shift = max(latency_ms.bit_length() - LATENCY_BUCKET_BITS, 0)
    return (latency_ms >> shift) << shift


def latency_quantile(latencies_ms: Iterable[int], q: float) -> int | None:
    """Nearest-rank ``q`` quantile of the bucketed latencies (None: there are none)."""
    values = sorted(latency_bucket(v) for v in latencies_ms)
    if not values:
        return None
    rank = max(math.ceil(q * len(values)), 1)
    return values[rank - 1]
