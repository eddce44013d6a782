"""Relative links in the README and docs/ point at files that exist, and their #anchors at
headings that exist (GitHub's anchor rules)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`[^`\n]+`")
# [text](target) and ![alt](target), target without spaces, optional "title".
_LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(])*?\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", re.MULTILINE)


def links(text: str) -> list[str]:
    prose = _SPAN.sub("", _FENCE.sub("", text))
    return [m[1] for m in _LINK.finditer(prose)]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_FENCE.sub("", text)):
        base = anchor(m[1])
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(doc: Path) -> list[str]:
    problems = []
    text = doc.read_text(encoding="utf-8")
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path_part, _, fragment = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and path.suffix == ".md" and fragment not in anchors(path.read_text()):
            problems.append(f"{target}: no heading with that anchor in {path.name}")
    return problems


def test_the_reader_finds_links_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Title\n\n## The `demo`, step by step\n")
    (tmp_path / "pic.png").write_bytes(b"")
    doc = tmp_path / "doc.md"
    doc.write_text(
        'See [other](other.md#the-demo-step-by-step), ![pic](pic.png "a picture"),\n'
        "[web](https://example.com), [self](#local), [gone](missing.md),\n"
        "[bad anchor](other.md#nope) and `[not a link](nowhere.md)`.\n\n## Local\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#nope: no heading with that anchor in other.md",
    ]
    assert anchors("# A\n## A\n## Ingest: gateway logs (Kong)\n") == {
        "a",
        "a-1",
        "ingest-gateway-logs-kong",
    }


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_what_exists(doc: Path) -> None:
    problems = broken_links(doc)
    assert not problems, "\n".join(problems)
