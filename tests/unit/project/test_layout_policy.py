"""The detection policy is pure: anchorwatch/policy/ imports the standard library, third-party
libraries, itself and the foundation below it, never the jobs, services, CLI or backtest that
use it (so the live job, the alerting service and the backtest judge with the same code and
no import cycle runs through the policy). Every import counts, function-level ones too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.check_house import imports

PACKAGE = Path(__file__).resolve().parents[3] / "anchorwatch"

# The wire contracts, the error base, and the settings base whose Section the policy's
# config models extend. Each is itself a leaf: it imports only from this set.
FOUNDATION = ("anchorwatch.contracts", "anchorwatch.errors", "anchorwatch.settings")


def outside(module: str, allowed: tuple[str, ...]) -> bool:
    """An anchorwatch module not under one of ``allowed`` (other names: stdlib, third party)."""
    if module != "anchorwatch" and not module.startswith("anchorwatch."):
        return False
    return not any(module == a or module.startswith(a + ".") for a in allowed)


def offenders(
    files: list[Path], allowed: tuple[str, ...], root: Path = PACKAGE.parent
) -> list[str]:
    found = []
    for path in files:
        for line, module in imports(path, root):
            # `from anchorwatch import contracts` names anchorwatch first, then the module.
            if module == "anchorwatch":
                continue
            if outside(module, allowed):
                found.append(f"{path.relative_to(root)}:{line}: {module}")
    return found


def _sources(name: str) -> list[Path]:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def test_policy_imports_nothing_above_it() -> None:
    files = _sources("anchorwatch.policy")
    assert len(files) >= 5
    assert offenders(files, ("anchorwatch.policy", *FOUNDATION)) == []


@pytest.mark.parametrize("name", FOUNDATION)
def test_the_foundation_the_policy_rests_on_is_a_leaf(name: str) -> None:
    assert offenders(_sources(name), FOUNDATION) == []


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walk finds imports inside functions, relative ones and `from anchorwatch import x`."""
    fake = tmp_path / "anchorwatch" / "policy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "leaky.py").write_text(
        "from anchorwatch.contracts import Baseline\n"
        "from . import window\n"
        "def f():\n"
        "    from anchorwatch.jobs import baseline_fit\n"
        "from ..backtest import score\n"
        "from anchorwatch import cli\n"
        "import anchorwatch.alerting.service\n"
    )
    found = offenders(sorted(fake.rglob("*.py")), ("anchorwatch.policy", *FOUNDATION), tmp_path)
    assert {f.split(": ")[1] for f in found} == {
        "anchorwatch.jobs",
        "anchorwatch.jobs.baseline_fit",
        "anchorwatch.backtest",
        "anchorwatch.backtest.score",
        "anchorwatch.cli",
        "anchorwatch.alerting.service",
    }
