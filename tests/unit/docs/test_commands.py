"""Every `anchorwatch ...` command the README and docs/ show exists in the command line,
with the options they give it.

Commands are resolved through click's own command tree from the root group, so a command
that moves between modules keeps passing as long as its name stays, and a renamed or
regrouped one fails here until the docs follow.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from anchorwatch.cli import cli

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Commands appear in code: fenced blocks and inline code spans. Prose ("anchorwatch
# watches ...") and names such as anchorwatch.snapshots or anchorwatch_ingest_* do not.
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
# `docker run --entrypoint anchorwatch IMAGE ...`: the words after it are docker's.
_INVOCATION = re.compile(r"(?:^|(?<=[\s/(`'\"$;&|]))(?<!--entrypoint )anchorwatch[ \t]+([^\n#]*)")


_OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


def _code(text: str) -> list[str]:
    blocks = [m[1] for m in _FENCE.finditer(text)]
    prose = _FENCE.sub("", text)
    return blocks + [m[1] for m in _SPAN.finditer(prose)]


def invocations(text: str) -> list[list[str]]:
    """The words after each `anchorwatch` in the code of a Markdown text."""
    found = []
    for code in _code(text):
        for line in code.splitlines():
            for match in _INVOCATION.finditer(line):
                found.append(match[1].replace("\\|", "|").split())
    return found


def resolve(words: list[str], root: click.Group = cli) -> str | None:
    """None when the words name an existing command; else what is wrong with them."""
    command: click.Command = root
    path = "anchorwatch"
    i = 0
    while isinstance(command, click.Group) and i < len(words):
        word = words[i].strip(".,;:)]}'\"")
        if word.startswith("-"):
            # An option of the group itself (--config FILE), with its value if it takes one.
            option = next((p for p in command.params if word in getattr(p, "opts", ())), None)
            if option is None:
                return f"{path}: no option {word}"
            takes_value = isinstance(option, click.Option) and not option.is_flag
            i += 2 if takes_value and "=" not in word else 1
            continue
        if not word or word in {"|", "&&", ";"} or word.startswith(("<", "[", "$", "...")):
            return None  # a placeholder or the end of the command: nothing more to check
        for name in word.split("|"):  # `local-slack|local-jira`: each alternative
            if name not in command.commands:
                known = ", ".join(sorted(command.commands))
                return f"{path}: no command {name!r} (it has: {known})"
        command = command.commands[word.split("|")[0]]
        path += f" {word}"
        i += 1
    if isinstance(command, click.Group):
        return None
    # The command's own options, as far as the words are its arguments.
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for word in words[i:]:
        if word in {"|", "&&", ";", ">", "<"}:
            break
        for option in _OPTION.findall(word):
            if option not in options:
                return f"{path}: no option {option}"
    return None


def test_the_resolver_tells_commands_from_mistakes() -> None:
    assert resolve(["stack", "up", "--flink"]) is None
    assert resolve(["--config", "aw.toml", "stack", "status"]) is None
    assert resolve(["alerting", "local-slack|local-jira"]) is None
    assert resolve(["stack", "<command>"]) is None
    assert resolve([]) is None
    assert resolve(["stack", "sideways"]) is not None
    assert resolve(["alerting", "local-slack|local-zendesk"]) is not None
    assert resolve(["no-such-group", "serve"]) is not None
    assert resolve(["--no-such-option"]) is not None
    assert resolve(["stack", "up", "[--flink]", "--partitions=3", "x-request-id"]) is None
    assert resolve(["stack", "up", "--flimk"]) is not None
    assert resolve(["read", "TOPIC", "|", "grep", "--count"]) is None


def test_invocations_are_read_from_code_only() -> None:
    text = (
        "anchorwatch watches drift, see `anchorwatch stack up` and\n\n"
        "```sh\n.venv/bin/anchorwatch ingest replay - # comment\n"
        "anchorwatch.snapshots anchorwatch_ingest_records_total\n"
        "docker compose run --entrypoint anchorwatch job-submitter job list\n```\n"
        "| `anchorwatch ingest serve [--workers N]` /"
        " `anchorwatch alerting local-slack\\|local-jira` |"
    )
    assert invocations(text) == [
        ["ingest", "replay", "-"],
        ["stack", "up"],
        ["ingest", "serve", "[--workers", "N]"],
        ["alerting", "local-slack|local-jira"],
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_exists(doc: Path) -> None:
    problems = []
    for words in invocations(doc.read_text(encoding="utf-8")):
        problem = resolve(words)
        if problem:
            problems.append(f"`anchorwatch {' '.join(words)}`: {problem}")
    assert not problems, "\n".join(problems)


def test_the_docs_show_commands_at_all() -> None:
    # The test above passes vacuously if the reader stops finding commands.
    said = [w for doc in DOCS for w in invocations(doc.read_text(encoding="utf-8"))]
    pairs = {" ".join(w[:2]) for w in said}
    assert {"stack up", "ingest serve", "alerting serve", "baseline fit"} <= pairs
    assert "demo" in {w[0] for w in said if w}
    assert len(pairs) > 20
