"""History files: window aggregates (CSV or NDJSON), baselines and labelled incidents
(NDJSON), read into contract records with errors that name the file, line and field.

The backtest replays these files and the baseline fit fits on them; ``window_from_row`` also
reads the windows held in verdict and window records on a topic.

Window rows (CSV header or NDJSON keys; the contract's own names are accepted too, so a dump
of the windows or verdicts topic reads as is):

======================  =========================================================
``doc_type``            document type
``window_start``        epoch milliseconds or ISO 8601 (``window_start_ms``)
``count``               requests in the window (``request_count``)
``mean``                mean drift of the window (``mean_drift``)
``window_end``          optional; default window_start + the window size
others                  optional contract fields: ``max_drift``, ``p95_drift``,
                        ``stddev_drift``, ``anchor_count``, ``disabled_share``,
                        ``zero_anchor_share``, ``resample_share``,
                        ``mean_kl_divergence``, ``late_count``
======================  =========================================================
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

import orjson

from anchorwatch.contracts import Baseline, ContractError, WindowAggregate, encode, validate
from anchorwatch.errors import AnchorwatchError

MINUTE_MS: Final = 60_000

_ALIASES: Final = {
    "window_start": "window_start_ms",
    "window_end": "window_end_ms",
    "count": "request_count",
    "mean": "mean_drift",
    "max": "max_drift",
    "p95": "p95_drift",
    "stddev": "stddev_drift",
}
_INTS: Final = frozenset({"request_count", "anchor_count", "late_count"})
_TIMES: Final = frozenset({"window_start_ms", "window_end_ms"})
_FLOATS: Final = frozenset(
    {
        "mean_drift",
        "max_drift",
        "p95_drift",
        "stddev_drift",
        "disabled_share",
        "zero_anchor_share",
        "resample_share",
        "mean_kl_divergence",
    }
)
_KNOWN: Final = _INTS | _TIMES | _FLOATS | {"doc_type"}


class BacktestInputError(AnchorwatchError):
    """A history or label file that cannot be read; names the file, line and field."""


def parse_time_ms(value: object) -> int:
    """Epoch milliseconds from an integer (or an integral string) or an ISO 8601 time
    (UTC when it names no zone)."""
    if isinstance(value, bool):
        raise ValueError("expected epoch milliseconds or an ISO 8601 time")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return int(moment.timestamp() * 1000)
    raise ValueError(f"expected epoch milliseconds or an ISO 8601 time, got {value!r}")


def window_from_row(row: Mapping[str, Any], window_ms: int = MINUTE_MS) -> WindowAggregate:
    """One input row (CSV strings or JSON values) as a validated window aggregate.

    Raises ContractError naming the field."""
    if isinstance(row.get("window"), dict):  # a verdict record: the window is inside
        row = row["window"]
    data: dict[str, Any] = {}
    for key, value in row.items():
        name = _ALIASES.get(key, key)
        if name not in _KNOWN or value is None or value == "":
            continue
        try:
            data[name] = _convert(name, value)
        except ValueError as exc:
            from anchorwatch.contracts import FieldProblem

            raise ContractError("WindowAggregate", [FieldProblem(key, str(exc))]) from None
    if "window_start_ms" in data and "window_end_ms" not in data:
        data["window_end_ms"] = data["window_start_ms"] + window_ms
    return validate(WindowAggregate, data)


def _convert(name: str, value: Any) -> Any:
    if name in _TIMES:
        return parse_time_ms(value)
    if name in _INTS:
        if isinstance(value, str):
            return int(value.strip())
        return value
    if name in _FLOATS and isinstance(value, str | int) and not isinstance(value, bool):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("must be a finite number")
        return number
    return value.strip() if isinstance(value, str) else value


def read_windows(
    source: IO[bytes] | Path, *, fmt: str | None = None, window_ms: int = MINUTE_MS
) -> list[WindowAggregate]:
    """Window aggregates from a CSV (``fmt="csv"`` or a ``.csv`` path) or NDJSON file."""
    name = str(source) if isinstance(source, Path) else getattr(source, "name", "<stream>")
    kind = fmt or ("csv" if name.lower().endswith(".csv") else "ndjson")
    if isinstance(source, Path):
        try:
            with source.open("rb") as fh:
                return _read(fh, name, kind, window_ms)
        except OSError as exc:
            raise BacktestInputError(f"{name}: {exc.strerror or exc}") from None
    return _read(source, name, kind, window_ms)


def _read(fh: IO[bytes], name: str, kind: str, window_ms: int) -> list[WindowAggregate]:
    out: list[WindowAggregate] = []
    for line_no, row in _rows(fh, name, kind):
        try:
            out.append(window_from_row(row, window_ms))
        except ContractError as exc:
            problems = "; ".join(str(p) for p in exc.problems)
            raise BacktestInputError(f"{name}:{line_no}: {problems}") from None
    return out


def _rows(fh: IO[bytes], name: str, kind: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if kind == "csv":
        text = (line.decode("utf-8-sig" if i == 0 else "utf-8") for i, line in enumerate(fh))
        reader = csv.DictReader(text)
        missing = {"doc_type"} - set(reader.fieldnames or [])
        if missing or reader.fieldnames is None:
            raise BacktestInputError(f"{name}:1: the CSV header needs a doc_type column")
        for row in reader:
            yield reader.line_num, row
        return
    for line_no, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BacktestInputError(f"{name}:{line_no}: not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise BacktestInputError(f"{name}:{line_no}: expected a JSON object")
        yield line_no, value


def _lines(source: Path) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of an NDJSON file, numbered from 1 for error messages."""
    try:
        lines = source.read_bytes().splitlines()
    except OSError as exc:
        raise BacktestInputError(f"{source}: {exc.strerror or exc}") from None
    for line_no, raw in enumerate(lines, start=1):
        if raw.strip():
            yield line_no, raw


def read_baselines(source: Path) -> dict[str, Baseline]:
    """Baseline records, one JSON object per line (as ``baseline fit --out`` writes them);
    a later line for the same doc type wins, as on the compacted topic."""
    out: dict[str, Baseline] = {}
    for line_no, raw in _lines(source):
        try:
            baseline = validate(Baseline, orjson.loads(raw))
        except (orjson.JSONDecodeError, ContractError) as exc:
            raise BacktestInputError(f"{source}:{line_no}: {exc}") from None
        out[baseline.doc_type] = baseline
    return out


@dataclass(frozen=True)
class Label:
    """A labelled incident (the generator's ``*.labels.ndjson``)."""

    doc_type: str
    start_ms: int
    end_ms: int
    kind: str
    magnitude: float = 0.0


def read_labels(source: Path) -> list[Label]:
    labels = []
    for line_no, raw in _lines(source):
        try:
            d = orjson.loads(raw)
            labels.append(
                Label(
                    str(d["doc_type"]),
                    int(d["start_ms"]),
                    int(d["end_ms"]),
                    str(d["kind"]),
                    float(d.get("magnitude", 0.0)),
                )
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise BacktestInputError(f"{source}:{line_no}: not a label: {exc!r}") from None
    return labels


def write_baselines(path: Path, baselines: Iterable[Baseline]) -> int:
    """One baseline per line, the NDJSON ``read_baselines`` reads."""
    lines = [encode(b) + b"\n" for b in baselines]
    path.write_bytes(b"".join(lines))
    return len(lines)
