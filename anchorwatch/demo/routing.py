"""Who answers a generated doc type's requests, what its documents hold and what a request
costs: the model versions a type routes to (``routes``: during a rollout a type's requests
are split between its production version and a candidate), the mix of anchor kinds its
documents hold (``anchor_mix``, by what the documents are: invoices are tables and
entities, contracts sections and conditions) and the request latency Kong measures
(``latency_ms``: a model's answer time, a little per anchor snapshotted, and a re-sample's
cost for every anchor re-sampled, so drift shows in latency).

Pure draws from the generator's own seeded streams; no state.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Final

from pydantic import TypeAdapter, ValidationError

from anchorwatch.contracts.breakdown import ANCHOR_KINDS, LATENCY_MAX_MS, anchor_kind
from anchorwatch.contracts.models import ModelVersion

#: A type's model versions, one line per family: (production, candidate).
MODEL_LINES: Final = (
    ("extractor-1.4", "extractor-1.5"),
    ("summarizer-2.0", "summarizer-2.1"),
    ("claude-docs-3.5", "claude-docs-3.6"),
)
#: Share of types in a rollout, and the candidate's share of such a type's requests.
ROLLOUT_CHANCE: Final = 0.5
ROLLOUT_SHARE: Final = (0.1, 0.5)

Routes = tuple[tuple[str, float], ...]  # (model version, share of the type's requests)

_MODEL_VERSION: Final = TypeAdapter(ModelVersion)


def check_model(name: str, value: object) -> None:
    """Raise ValueError unless ``value`` is a model version the contract accepts."""
    try:
        _MODEL_VERSION.validate_python(value, strict=True)
    except ValidationError as exc:
        reason = exc.errors(include_url=False, include_input=False)[0]["msg"]
        raise ValueError(f"{name}: {reason}") from None


def routes(rng: random.Random) -> Routes:
    """One type's model versions: its line's production version alone, or (in a rollout)
    that and the candidate with a share of the requests. Always the same three draws."""
    production, candidate = rng.choice(MODEL_LINES)
    rollout = rng.random() < ROLLOUT_CHANCE
    share = round(rng.uniform(*ROLLOUT_SHARE), 2)
    return (
        ((production, round(1.0 - share, 2)), (candidate, share))
        if rollout
        else ((production, 1.0),)
    )


def rollout(line: Routes, candidate_share: float) -> Routes:
    """``line``'s production and candidate versions at ``candidate_share`` of the requests."""
    production = line[0][0]
    candidate = next(c for p, c in MODEL_LINES if p == production)
    return ((production, round(1.0 - candidate_share, 2)), (candidate, candidate_share))


def pick_model(line: Routes, u: float) -> str:
    """The version answering a request whose uniform draw is ``u`` in [0, 1)."""
    for model, share in line:
        u -= share
        if u < 0:
            return model
    return line[-1][0]


# Seven slots per type (repeats are weights): the generator draws one per anchor with
# ``rng.choice``, and a tuple of seven costs the same draws as the one before kinds were
# per type, so every type's drift values stayed as they were. CLAUSE is not a kind the
# breakdown knows: it counts as OTHER, as an unknown prefix from a real gateway would.
_MIXES: Final = {
    "purchase_contract": "SECTION SECTION CONDITION CONDITION ENTITY REFERENCE CLAUSE",
    "medical_report": "SECTION SECTION ENTITY ENTITY TIMELINE LIST TABLE",
    "invoice": "TABLE TABLE TABLE ENTITY ENTITY LIST SECTION",
    "nda": "SECTION SECTION CONDITION CONDITION ENTITY REFERENCE CLAUSE",
    "lease_agreement": "SECTION SECTION CONDITION ENTITY TIMELINE REFERENCE CLAUSE",
    "insurance_claim": "ENTITY ENTITY TIMELINE TABLE CONDITION SECTION LIST",
    "radiology_report": "SECTION SECTION ENTITY ENTITY LIST REFERENCE TIMELINE",
    "discharge_summary": "SECTION SECTION TIMELINE TIMELINE LIST ENTITY ENTITY",
    "bank_statement": "TABLE TABLE TABLE TIMELINE ENTITY ENTITY SECTION",
    "patent_filing": "SECTION SECTION REFERENCE REFERENCE CONDITION LIST ENTITY",
    "employment_contract": "SECTION SECTION CONDITION ENTITY TIMELINE REFERENCE CLAUSE",
    "rag_kb_article": "SECTION SECTION SECTION LIST LIST REFERENCE TABLE",
    "tax_form": "TABLE TABLE ENTITY ENTITY CONDITION SECTION REFERENCE",
    "clinical_trial_protocol": "SECTION SECTION CONDITION TIMELINE TABLE LIST REFERENCE",
    "research_paper": "SECTION SECTION SECTION TABLE REFERENCE REFERENCE LIST",
    "loan_application": "ENTITY ENTITY TABLE CONDITION SECTION TIMELINE CLAUSE",
    "privacy_policy": "SECTION SECTION SECTION CONDITION LIST REFERENCE CLAUSE",
    "support_ticket": "SECTION TIMELINE TIMELINE ENTITY LIST REFERENCE SECTION",
}
#: The mix of a type without one of its own (and of a model's test runs).
DEFAULT_MIX: Final = ("SECTION", "SECTION", "SECTION", "TABLE", "ENTITY", "ENTITY", "CLAUSE")


def anchor_mix(base_name: str) -> tuple[str, ...]:
    """The anchor-id prefixes of a type's documents, seven slots (``DOC_TYPE_NAMES``'s
    base name of the type)."""
    mix = _MIXES.get(base_name)
    return tuple(mix.split()) if mix else DEFAULT_MIX


def main_kind(mix: tuple[str, ...]) -> str:
    """The breakdown kind most of a mix's anchors are (not OTHER; the first in
    ``ANCHOR_KINDS`` order on a tie): where a kind-only incident shows best."""
    counts = Counter(anchor_kind(f"{p}_") for p in mix)
    return max(ANCHOR_KINDS, key=lambda k: (counts[k], -ANCHOR_KINDS.index(k)))


def kind_share(mix: tuple[str, ...], kind: str) -> float:
    """The share of a mix's anchors of breakdown kind ``kind``."""
    return sum(anchor_kind(f"{p}_") == kind for p in mix) / len(mix)


# A model's answer: lognormal around LATENCY_MEDIAN_MS; each anchor snapshotted adds a
# little, each anchor re-sampled a generation of its span.
LATENCY_MEDIAN_MS: Final = 1_400
LATENCY_SIGMA: Final = 0.35
PER_ANCHOR_MS: Final = 12
RESAMPLE_MS: Final = (150.0, 350.0)


def latency_ms(rng: random.Random, anchors: int, resampled: int) -> int:
    """A request's latency (Kong's ``latencies.request``); always the same draws."""
    answer = rng.lognormvariate(math.log(LATENCY_MEDIAN_MS), LATENCY_SIGMA)
    resample = rng.uniform(*RESAMPLE_MS)
    total = answer + PER_ANCHOR_MS * anchors + resample * resampled
    return min(LATENCY_MAX_MS, int(total))
