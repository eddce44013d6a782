from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


@pytest.mark.slow
def test_wheel_puts_only_anchorwatch_in_site_packages(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("anchorwatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "anchorwatch",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    # The top-level jobs/, connectors/ and alerting/ ship under the project's name,
    # with the data files the code needs at run time.
    for path in (
        "anchorwatch/jobs/drift_job.py",
        "anchorwatch/connectors/publisher.py",
        "anchorwatch/alerting/__init__.py",
        "anchorwatch/stack/pom.xml",
        # Sources of the jobs' jar, which `anchorwatch jvm fetch` builds on the user's machine.
        "anchorwatch/jobs/jvm/pom.xml",
        "anchorwatch/jobs/jvm/src/main/java/dev/anchorwatch/flink/AnchorwatchJsonFormatFactory.java",
        "anchorwatch/jobs/jvm/src/main/resources/META-INF/services/"
        "org.apache.flink.table.factories.Factory",
        "anchorwatch/contracts/schemas/snapshot-event.v1.schema.json",
    ):
        assert path in names
    # The ingest fast path, compiled from connectors/native, with its types; not its build.
    assert any(n.startswith("anchorwatch/connectors/_native.") and n.endswith(".so") for n in names)
    assert "anchorwatch/connectors/_native.pyi" in names
    assert not [n for n in names if "/native/" in n]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "anchorwatch = anchorwatch.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
