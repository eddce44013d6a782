"""jobs/, connectors/ and alerting/ live at the top of the repository and ship as
anchorwatch.jobs, anchorwatch.connectors and anchorwatch.alerting (symlinks in anchorwatch/).
The static tools must see each of their files once: ruff at its top-level path, mypy under
the module name the code imports it by."""

from __future__ import annotations

import io
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from mypy.config_parser import parse_config_file
from mypy.find_sources import create_source_list
from mypy.options import Options

ROOT = Path(__file__).resolve().parents[3]
LINKED = ("jobs", "connectors", "alerting")


def _linked_sources() -> set[Path]:
    return {p.resolve() for d in LINKED for p in (ROOT / d).rglob("*.py")}


def test_the_package_links_the_top_level_directories() -> None:
    for name in LINKED:
        link = ROOT / "anchorwatch" / name
        assert link.is_symlink(), link
        assert link.resolve() == ROOT / name


def test_ruff_checks_each_file_once_at_its_top_level_path() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    listed = subprocess.run(
        [str(ruff), "check", "--show-files", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    files = [Path(p) for p in listed if p.endswith(".py")]
    assert files, "ruff listed no files"
    real = Counter(p.resolve() for p in files)
    assert [p for p, n in real.items() if n > 1] == []
    linked = _linked_sources()
    assert linked <= set(real)
    for path in files:
        if path.resolve() in linked:
            assert path.relative_to(ROOT).parts[0] in LINKED, path


def test_mypy_checks_each_file_once_under_its_import_name(monkeypatch: pytest.MonkeyPatch) -> None:
    options = Options()
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the checkout
    parse_config_file(
        options, lambda: None, str(ROOT / "pyproject.toml"), io.StringIO(), io.StringIO()
    )
    sources = create_source_list(options.files or [], options)
    real = Counter(Path(s.path).resolve() for s in sources if s.path)
    assert [p for p, n in real.items() if n > 1] == []
    modules = {Path(s.path).resolve(): s.module for s in sources if s.path}
    for path in _linked_sources():
        module = modules.get(path)
        assert module is not None, f"mypy does not check {path}"
        top = path.relative_to(ROOT).parts[0]
        assert module.startswith(f"anchorwatch.{top}"), (path, module)
