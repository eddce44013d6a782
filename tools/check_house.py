"""The house's limits, checked by `make lint` (and by tests/unit/project/test_house.py):

- no source file over 600 lines (bench, tools and tests included): past that a file holds
  more than one responsibility and nobody reads it top to bottom;
- the README at most 200 lines, and no Markdown table cell over 200 characters (the story
  goes under the table, the table stays a table);
- the three deployables (anchorwatch.connectors, .jobs, .alerting) never import the demo
  (anchorwatch.demo), directly or through anything they import;
- the policy package reads top-down: each of its modules imports only modules below it.

Usage: python -m tools.check_house  (exit status 1 and one line per breach)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MAX_SOURCE_LINES = 600
MAX_README_LINES = 200
MAX_TABLE_CELL = 200
SOURCE_SUFFIXES = (".py", ".rs", ".java", ".js", ".ts", ".go", ".sh")

DEPLOYABLES = ("anchorwatch.connectors", "anchorwatch.jobs", "anchorwatch.alerting")
DEMO = "anchorwatch.demo"

#: The policy's modules, bottom to top: each may import only the ones before it.
POLICY_LAYERS = (
    "window",
    "config",
    "series",
    "tail",
    "seasons",
    "static_rule",
    "adaptation",
    "incident_types",
    "evidence",
    "spikes",
    "quiet",
    "incidents",
    "sigma",
    "fitting",
    "refit",
)


# --------------------------------------------------------------------------- imports


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of a file under ``root`` (``a/b/__init__.py`` is ``a.b``)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, functions included;
    ``from a import b`` yields ``a.b`` too, since b may be a submodule."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file that defines module ``name`` under ``root``, or None (not ours, or a name
    inside a module rather than a module)."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def package_files(name: str, root: Path = ROOT) -> list[Path]:
    """Every Python file of package (or module) ``name``, following the symlinks that put
    jobs/, connectors/ and alerting/ under anchorwatch/."""
    base = root.joinpath(*name.split("."))
    if base.is_dir():
        return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)
    single = base.with_suffix(".py")
    return [single] if single.is_file() else []


def import_chains(starts: Iterable[str], root: Path = ROOT) -> dict[str, list[str]]:
    """Every module of ours reachable from ``starts`` by imports (parent packages count:
    importing a.b runs a/__init__.py), each with the chain that reaches it."""
    chains: dict[str, list[str]] = {}
    todo = [(s, [s]) for s in starts]
    while todo:
        name, chain = todo.pop()
        if name in chains:
            continue
        path = module_file(name, root)
        if path is None:
            continue
        chains[name] = chain
        parent = name.rpartition(".")[0]
        if parent:
            todo.append((parent, [*chain, parent]))
        for _, imported in imports(path, root):
            if imported.split(".")[0] == "anchorwatch":
                todo.append((imported, [*chain, imported]))
    return chains


def demo_breaches(root: Path = ROOT) -> list[str]:
    starts = [module_name(p, root) for d in DEPLOYABLES for p in package_files(d, root)]
    return [
        f"a deployable imports the demo: {' -> '.join(chain)}"
        for name, chain in sorted(import_chains(starts, root).items())
        if name == DEMO or name.startswith(DEMO + ".")
    ]


def policy_breaches(root: Path = ROOT) -> list[str]:
    found = []
    prefix = "anchorwatch.policy."
    for path in package_files("anchorwatch.policy", root):
        own = module_name(path, root).removeprefix(prefix)
        if own == "anchorwatch.policy":
            continue
        if own not in POLICY_LAYERS:
            found.append(f"{path.relative_to(root)}: not in tools/check_house.py POLICY_LAYERS")
            continue
        for line, imported in imports(path, root):
            if not imported.startswith(prefix):
                continue
            target = imported.removeprefix(prefix).split(".")[0]
            if target in POLICY_LAYERS and POLICY_LAYERS.index(target) >= POLICY_LAYERS.index(own):
                found.append(
                    f"{path.relative_to(root)}:{line}: imports policy.{target}, which is "
                    f"not below policy.{own}"
                )
    return sorted(set(found))


# --------------------------------------------------------------------------- sizes


def tracked_files(root: Path = ROOT) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [root / name for name in listed.split("\0") if name]


def long_sources(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
            continue
        count = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
        if count > MAX_SOURCE_LINES:
            found.append(
                f"{path.relative_to(root)}: {count} lines (at most {MAX_SOURCE_LINES}): "
                "split it by responsibility"
            )
    return found


def table_cells(line: str) -> list[str]:
    """The cells of a Markdown table row (pipes escaped as \\| or inside `code` stay)."""
    cells, cell, in_code, i = [], [], False, 0
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            cell.append(body[i : i + 2])
            i += 2
            continue
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(char)
        i += 1
    if "".join(cell).strip():
        cells.append("".join(cell).strip())
    return cells


def doc_breaches(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    found = []
    for path in files:
        if path.suffix != ".md" or not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        rel = path.relative_to(root)
        if rel == Path("README.md") and len(lines) > MAX_README_LINES:
            found.append(f"README.md: {len(lines)} lines (at most {MAX_README_LINES})")
        for number, line in enumerate(lines, 1):
            if not line.lstrip().startswith("|"):
                continue
            for cell in table_cells(line):
                if len(cell) > MAX_TABLE_CELL:
                    found.append(
                        f"{rel}:{number}: a table cell of {len(cell)} characters (at most "
                        f"{MAX_TABLE_CELL}): move the story under the table"
                    )
    return found


def breaches(root: Path = ROOT) -> list[str]:
    files = tracked_files(root)
    docs = [p for p in files if p.parent == root / "docs" or p == root / "README.md"]
    return [
        *long_sources(files, root),
        *doc_breaches(docs, root),
        *demo_breaches(root),
        *policy_breaches(root),
    ]


def main() -> int:
    found = breaches()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
