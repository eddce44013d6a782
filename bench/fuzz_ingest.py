"""The ingest reader's fuzz corpus (connectors/native/fuzz/corpus/): seed it, and replay it
through both paths, the compiled reader and the reference path (orjson + the pydantic
contract), counting what each input decided and every difference between the two.

The fuzz targets (connectors/native/fuzz, `make fuzz`) grow the corpus by coverage of the
compiled reader and check it alone (no panic, same decision twice, records that read back
as themselves); whether the reference path agrees is checked here, on every input they
kept. tests/unit/connectors/test_fuzz_corpus.py replays the committed corpus the same way.

    .venv/bin/python -m bench.fuzz_ingest seed connectors/native/fuzz/corpus
    .venv/bin/python -m bench.fuzz_ingest replay connectors/native/fuzz/corpus
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from anchorwatch.connectors import records
from anchorwatch.connectors.kong import DEFAULT_FORMAT, KongFormat
from anchorwatch.connectors.records import Batch, kong_body, ndjson_body
from anchorwatch.connectors.validation import TimeWindow
from anchorwatch.contracts import SnapshotEvent, encode
from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.demo.kong_entry import to_kong_entry
from tests.support.fastpath import FORMATS, outcome

TARGETS = ("kong", "ndjson")
CORPUS = Path(__file__).resolve().parent.parent / "connectors/native/fuzz/corpus"
SOURCE = "fuzz"
# Each input is decided without a time window and with one that takes the seeds' middle
# event and neither of the others (one too old, one ahead of the clock).
WINDOWS = (None, TimeWindow(now_ms=1_764_403_290_000, max_future_ms=0, max_age_ms=60_000))

# What one input decided: the outcome of `outcome`, or the BodyError (the 400) as text.
Decision = Any


def decide(
    parse: Callable[..., Batch], body: bytes, *args: Any, window: TimeWindow | None, fast: bool
) -> Decision:
    try:
        return outcome(parse(body, *args, source=SOURCE, window=window, fast=fast))
    except ValueError as exc:  # BodyError: the 400
        return str(exc)


@dataclass(frozen=True, slots=True)
class Difference:
    target: str
    name: str  # the corpus file
    fmt: KongFormat | None
    window: TimeWindow | None
    fast: Decision
    reference: Decision


@dataclass(slots=True)
class Figures:
    inputs: int = 0
    comparisons: int = 0  # inputs x Kong formats x windows
    whole_body_refusals: int = 0  # 400 on both paths
    accepted: int = 0
    fast_accepted: int = 0  # of those, by the compiled reader itself
    rejected: int = 0
    differences: list[Difference] = field(default_factory=list)

    def add(self, decision: Decision) -> None:
        self.comparisons += 1
        if isinstance(decision, str):
            self.whole_body_refusals += 1
        else:
            self.accepted += len(decision[0])
            self.rejected += len(decision[1])


def fast_accepts(target: str, body: bytes, fmt: KongFormat | None, window: Any) -> int:
    """How many entries the compiled reader accepts itself, leaving none to the reference
    path; the comparison means most where this is high."""
    bounds = records._bounds(window)
    if fmt is not None:
        return sum(a is not None for a in records._reader(fmt).kong(body, SOURCE, *bounds) or [])
    reader = records._reader(DEFAULT_FORMAT)
    lines = (line.rstrip(b"\r") for line in body.split(b"\n"))
    return sum(reader.ndjson_line(line, SOURCE, *bounds) is not None for line in lines)


def compare(target: str, name: str, body: bytes, figures: Figures) -> None:
    """Decide ``body`` on both paths, add to ``figures``; a difference is recorded."""
    figures.inputs += 1
    cases: Iterable[tuple[Callable[..., Batch], tuple[Any, ...], KongFormat | None]]
    if target == "kong":
        cases = [(kong_body, (fmt,), fmt) for fmt in FORMATS]
    else:
        cases = [(ndjson_body, (), None)]
    for parse, args, fmt in cases:
        for window in WINDOWS:
            fast = decide(parse, body, *args, window=window, fast=True)
            reference = decide(parse, body, *args, window=window, fast=False)
            figures.add(reference)
            figures.fast_accepted += fast_accepts(target, body, fmt, window)
            if fast != reference:
                figures.differences.append(Difference(target, name, fmt, window, fast, reference))


def corpus_files(root: Path, target: str, *, work: bool = True) -> list[Path]:
    """The target's inputs under ``root``: ``root/<target>/`` and, with ``work``,
    ``root/.work/<target>/`` (what `make fuzz` runs added, not committed)."""
    dirs = [root / target, *([root / ".work" / target] if work else [])]
    return sorted(p for d in dirs if d.is_dir() for p in d.iterdir() if p.is_file())


def replay(root: Path, *, work: bool = True) -> dict[str, Figures]:
    out = {}
    for target in TARGETS:
        figures = out[target] = Figures()
        for path in corpus_files(root, target, work=work):
            compare(target, path.name, path.read_bytes(), figures)
    return out


# ---------------------------------------------------------------------- seeds


def _events() -> list[SnapshotEvent]:
    """Events spread over three minutes (see WINDOWS), one disabled, one without anchors."""
    traffic = generate(TrafficConfig(seed=11, minutes=3, doc_types=3))
    events = [
        r.event for r in traffic.records() if r.event is not None and len(r.event.anchors) > 1
    ]
    spread = [events[0], events[len(events) // 2], events[-1]]
    quiet = {"anchors": [], "anchor_count": 0}
    return [
        *spread,
        spread[1].model_copy(update={**quiet, "snapshot_status": "disabled"}),
        spread[1].model_copy(update=quiet),
    ]


def _small(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry with only what the mapping reads: small inputs mutate faster."""
    return {
        "request": {"headers": entry["request"]["headers"]},
        "response": {"headers": entry["response"]["headers"]},
        "started_at": entry["started_at"],
    }


def seeds() -> dict[str, list[bytes]]:
    events = _events()
    entries = [to_kong_entry(e) for e in events]
    small = [_small(e) for e in entries]
    kong = [orjson.dumps(e) for e in small]  # one entry, not in an array
    kong += [orjson.dumps(small), orjson.dumps(entries[:2]), b"[]"]
    # One anchor, as an object rather than an array; a repeated header as a list.
    one = _small(to_kong_entry(events[0]))
    log = orjson.loads(one["response"]["headers"]["x-anthropic-snapshot-log"])
    one["response"]["headers"]["x-anthropic-snapshot-log"] = orjson.dumps(log[0]).decode()
    one["response"]["headers"]["x-anthropic-anchor-count"] = "1"
    one["request"]["headers"]["x-anthropic-doc-type"] = ["invoice", " invoice "]
    kong.append(orjson.dumps([one]))
    ndjson = [encode(e) for e in events]
    ndjson.append(b"\n".join(encode(e.model_copy(update={"source": None})) for e in events[:2]))
    return {"kong": kong, "ndjson": ndjson}


def write_seeds(root: Path) -> int:
    written = 0
    for target, inputs in seeds().items():
        (root / target).mkdir(parents=True, exist_ok=True)
        for data in inputs:
            # Named as libFuzzer names its inputs, so a seed is not stored twice.
            (root / target / hashlib.sha1(data, usedforsecurity=False).hexdigest()).write_bytes(
                data
            )
            written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=["seed", "replay"])
    parser.add_argument(
        "corpus", type=Path, nargs="?", default=CORPUS, help="one folder per target"
    )
    args = parser.parse_args()
    if args.command == "seed":
        print(f"{write_seeds(args.corpus)} seed inputs written under {args.corpus}")
        return
    differences = []
    for target, f in replay(args.corpus).items():
        print(
            f"{target}: {f.inputs} inputs, {f.comparisons} comparisons of both paths: "
            f"{f.accepted} entries accepted ({f.fast_accepted} by the compiled reader), "
            f"{f.rejected} dead-lettered, "
            f"{f.whole_body_refusals} whole bodies refused (400), "
            f"{len(f.differences)} differences"
        )
        differences += f.differences
    for d in differences:
        print(f"DIFFERENCE {d.target}/{d.name} format={d.fmt} window={d.window}:")
        print(f"  fast:      {d.fast!r}"[:2000])
        print(f"  reference: {d.reference!r}"[:2000])
    if differences:
        sys.exit(1)


if __name__ == "__main__":
    main()
