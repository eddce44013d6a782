"""The house's limits (tools/check_house.py, run by `make lint`): each check finds what it
is for in a small tree of its own, and the repository itself keeps them all."""

from __future__ import annotations

from pathlib import Path

from tools import check_house as house


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_deployable_reaching_the_demo_through_another_module_is_named(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "anchorwatch/__init__.py": "",
            "anchorwatch/helpers.py": "def f():\n    from anchorwatch.demo import generator\n",
            "anchorwatch/demo/__init__.py": "",
            "anchorwatch/demo/generator.py": "",
            "anchorwatch/alerting/__init__.py": "",
            "anchorwatch/alerting/service.py": "from .. import helpers\n",
            "anchorwatch/jobs/__init__.py": "from anchorwatch.contracts import x\n",
            "anchorwatch/connectors/__init__.py": "",
        },
    )
    found = house.demo_breaches(tmp_path)
    assert any(
        "anchorwatch.alerting.service -> anchorwatch.helpers -> anchorwatch.demo" in line
        for line in found
    ), found
    assert not any("anchorwatch.jobs" in line for line in found)


def test_deployables_that_leave_the_demo_alone_pass(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "anchorwatch/__init__.py": "",
            "anchorwatch/demo/__init__.py": "from anchorwatch.alerting import service\n",
            "anchorwatch/alerting/__init__.py": "",
            "anchorwatch/alerting/service.py": "import json\n",
        },
    )
    assert house.demo_breaches(tmp_path) == []


def test_a_policy_module_importing_one_above_it_is_named(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "anchorwatch/__init__.py": "",
            "anchorwatch/policy/__init__.py": "",
            "anchorwatch/policy/window.py": "",
            "anchorwatch/policy/fitting.py": "from anchorwatch.policy.incidents import T\n",
            "anchorwatch/policy/incidents.py": (
                "from anchorwatch.policy.window import W\ndef f():\n    from .fitting import fit\n"
            ),
            "anchorwatch/policy/extra.py": "",
        },
    )
    found = house.policy_breaches(tmp_path)
    assert found == [
        "anchorwatch/policy/extra.py: not in tools/check_house.py POLICY_LAYERS",
        "anchorwatch/policy/incidents.py:3: imports policy.fitting, which is not below "
        "policy.incidents",
    ]


def test_a_source_file_past_the_line_limit_is_named(tmp_path: Path) -> None:
    at_limit = tmp_path / "ok.py"
    at_limit.write_text("x = 1\n" * house.MAX_SOURCE_LINES)
    over = tmp_path / "big.rs"
    over.write_text("// x\n" * (house.MAX_SOURCE_LINES + 1))
    data = tmp_path / "data.json"
    data.write_text("1\n" * 5000)
    found = house.long_sources([at_limit, over, data], tmp_path)
    assert found == [
        f"big.rs: {house.MAX_SOURCE_LINES + 1} lines (at most 600): split it by responsibility"
    ]


def test_table_cells_split_on_bare_pipes_only() -> None:
    assert house.table_cells("| a | `x | y` | b \\| c |") == ["a", "`x | y`", "b \\| c"]
    assert house.table_cells("|---|:-:|") == ["---", ":-:"]


def test_a_long_cell_and_a_long_readme_are_named(tmp_path: Path) -> None:
    long_cell = "w" * (house.MAX_TABLE_CELL + 1)
    _write(
        tmp_path,
        {
            "README.md": "line\n" * (house.MAX_README_LINES + 1),
            "docs/a.md": f"| k | v |\n|---|---|\n| x | {long_cell} |\n{long_cell} prose\n",
            "docs/b.md": "| k | " + "v" * house.MAX_TABLE_CELL + " |\n",
        },
    )
    files = [tmp_path / "README.md", tmp_path / "docs/a.md", tmp_path / "docs/b.md"]
    assert house.doc_breaches(files, tmp_path) == [
        f"README.md: {house.MAX_README_LINES + 1} lines (at most 200)",
        "docs/a.md:3: a table cell of 201 characters (at most 200): move the story under the table",
    ]


def test_the_repository_keeps_the_house_limits() -> None:
    found = house.breaches()
    assert found == [], "\n".join(found)
