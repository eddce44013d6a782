"""The release gate's report as text (the terminal), Markdown (a pull-request comment) and
JUnit XML (a CI system's test view). Pure: strings and bytes, written by the caller.

Doc types and model names are untrusted text (bounded and visible by the contract): escaped
for Markdown and for XML here, so a name cannot break the table or the document.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Final

from anchorwatch.gate import GateReport, TypeVerdict

# Inline Markdown that could change how a table cell renders (emphasis, code, links, HTML,
# strike-through, the cell separator); inside a cell no block syntax (headings, lists) applies.
_MARKDOWN_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|~&])")
# Characters XML 1.0 cannot hold at all (the contract already refuses control characters).
_NOT_XML: Final = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_STATUS_WORD: Final = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}


def _figure(value: float) -> str:
    return f"{value:.4f}"


def _n(verdict: TypeVerdict, production: bool = False) -> str:
    sample = verdict.production if production else verdict.candidate
    return str(sample.n) if sample is not None else "<2"


def _difference(verdict: TypeVerdict) -> str:
    i = verdict.interval
    if i is None:
        return "-"
    return f"{i.difference:+.4f} [{i.low:+.4f}, {i.high:+.4f}]"


def _title(report: GateReport) -> str:
    cfg = report.config
    against = f" against {cfg.against!r}" if cfg.against is not None else ""
    return f"release gate: {cfg.candidate!r}{against}"


def _totals(report: GateReport) -> str:
    return (
        f"{report.count('pass')} passed, {report.count('fail')} failed, "
        f"{report.count('error')} not judged"
    )


def text(report: GateReport) -> str:
    """One line per doc type, then the totals: what a person at a terminal reads."""
    cfg = report.config
    lines = [f"{_title(report)} (max mean {cfg.max_mean:g}, margin {cfg.margin:g})"]
    for v in report.verdicts:
        mean = _figure(v.candidate.mean) if v.candidate is not None else "-"
        line = f"{_STATUS_WORD[v.status]:<5} {v.doc_type!r}  n={_n(v)}  mean={mean}"
        if cfg.against is not None:
            line += f"  n_prod={_n(v, True)}  diff={_difference(v)}"
        lines.append(line)
        lines.extend(f"      {reason}" for reason in v.reasons)
    lines.append(_totals(report))
    return "\n".join(lines) + "\n"


def escape_markdown(value: str) -> str:
    """Backslash-escape Markdown's punctuation, so a name renders as written in a table."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", value).replace("\n", " ")


def markdown(report: GateReport) -> str:
    """A heading and one table row per doc type, for a pull-request comment."""
    cfg = report.config
    candidate = escape_markdown(cfg.candidate)
    heading = f"### Release gate: {candidate}"
    if cfg.against is not None:
        heading += f" against {escape_markdown(cfg.against)}"
    verdict_word = {"pass": "pass", "fail": "**fail**", "error": "**not judged**"}
    header = ["doc type", "n", "mean drift"]
    if cfg.against is not None:
        header += ["n (production)", f"difference [{cfg.confidence:.0%} interval]"]
    header += ["verdict", "why"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in report.verdicts:
        cells = [
            escape_markdown(v.doc_type),
            _n(v),
            _figure(v.candidate.mean) if v.candidate is not None else "-",
        ]
        if cfg.against is not None:
            cells += [_n(v, True), _difference(v)]
        cells += [verdict_word[v.status], escape_markdown("; ".join(v.reasons)) or "-"]
        rows.append("| " + " | ".join(cells) + " |")
    limits = (
        f"Limits: mean drift at most {cfg.max_mean:g} per doc type, at least "
        f"{cfg.min_docs} documents per type and model"
    )
    if cfg.against is not None:
        limits += f", not shown worse than production by more than {cfg.margin:g}"
    return "\n".join([heading, "", *rows, "", limits + ".", "", _totals(report) + "."]) + "\n"


def _xml_text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def junit(report: GateReport) -> bytes:
    """JUnit XML: one testsuite, one testcase per doc type; a failed type is a <failure>,
    a type that could not be judged an <error>, each with the figures in its message."""
    cfg = report.config
    counts = {
        "tests": str(len(report.verdicts)),
        "failures": str(report.count("fail")),
        "errors": str(report.count("error")),
    }
    suites = ET.Element("testsuites", {"name": "anchorwatch gate", **counts})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": _xml_text(_title(report)), **counts, "skipped": "0", "time": "0"},
    )
    properties = ET.SubElement(suite, "properties")
    settings = {
        "model": cfg.candidate,
        "against": cfg.against or "",
        "max_mean": f"{cfg.max_mean:g}",
        "min_docs": str(cfg.min_docs),
        "margin": f"{cfg.margin:g}",
        "confidence": f"{cfg.confidence:g}",
    }
    for name, value in settings.items():
        ET.SubElement(properties, "property", {"name": name, "value": _xml_text(value)})
    # The model is in the suite's name: a dotted version in classname reads as packages.
    classname = "anchorwatch.gate"
    for v in report.verdicts:
        case = ET.SubElement(
            suite, "testcase", {"classname": classname, "name": _xml_text(v.doc_type), "time": "0"}
        )
        if v.status == "pass":
            continue
        tag, kind = ("failure", "drift") if v.status == "fail" else ("error", "data")
        element = ET.SubElement(
            case, tag, {"message": _xml_text("; ".join(v.reasons)), "type": kind}
        )
        element.text = _xml_text(_details(report, v))
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def _details(report: GateReport, v: TypeVerdict) -> str:
    cfg = report.config
    lines = [f"doc type {v.doc_type!r}, candidate {cfg.candidate!r}"]
    if v.candidate is not None:
        c = v.candidate
        lines.append(f"candidate: n={c.n} mean={_figure(c.mean)} sd={c.variance**0.5:.4f}")
    if v.production is not None:
        p = v.production
        lines.append(
            f"production {cfg.against!r}: n={p.n} mean={_figure(p.mean)} sd={p.variance**0.5:.4f}"
        )
    if v.interval is not None:
        lines.append(f"difference: {_difference(v)}, df={v.interval.df:.1f}")
    lines.extend(v.reasons)
    return "\n".join(lines)
