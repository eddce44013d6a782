"""Test modules share code through tests/support/ only: no module under tests/ or bench/
imports a test module (``test_*.py``) or a conftest.py. A helper that lives in a test
module drags that module's tests (and its fixtures) into every importer, and moving or
renaming the test breaks the others."""

from __future__ import annotations

from pathlib import Path

from tools.check_house import imports

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (functions included), by full name;
    ``from package import name`` counts ``package.name`` too, which may be a module."""
    return {module for _, module in imports(path, ROOT)}


def is_test_module(module: str) -> bool:
    if not module.startswith(("tests.", "bench.")):
        return False
    last = module.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def test_the_walker_sees_imports_and_names_test_modules() -> None:
    path = ROOT / "tests" / "unit" / "alerting" / "test_render.py"
    found = imported_modules(path)
    assert "tests.support.rendering" in found
    assert "tests.support.rendering.view" in found
    assert is_test_module("tests.unit.alerting.test_render")
    assert is_test_module("tests.unit.conftest")
    assert not is_test_module("tests.support.rendering")
    assert not is_test_module("anchorwatch.alerting.test_mode")  # product code, not a test


def test_no_module_under_tests_or_bench_imports_a_test_module() -> None:
    offending = sorted(
        (str(path.relative_to(ROOT)), module)
        for top in ("tests", "bench")
        for path in (ROOT / top).rglob("*.py")
        for module in imported_modules(path)
        if is_test_module(module)
    )
    new = offending
    assert new == [], "move these helpers to tests/support/ (named for what they hold):\n" + (
        "\n".join(f"{path} imports {module}" for path, module in new)
    )
