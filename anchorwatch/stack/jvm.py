"""Pinned JVM artifacts: fetched once from Maven Central (and built) into a cache directory.

The Kafka broker's versions live in ``pom.xml`` beside this file; the jobs' jar (the Flink
Kafka connector plus anchorwatch's own JSON format) is built from ``anchorwatch/jobs/jvm``.
``fetch`` is idempotent: the cache remembers a hash of those sources, and a warm cache is
used without running Maven (so without any network). A change refills the cache into a
fresh directory and swaps it in, so jars of an older version never linger on a classpath.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from anchorwatch.errors import AnchorwatchError

log = logging.getLogger(__name__)

POM = Path(__file__).with_name("pom.xml")
#: Maven project of the jar the Flink jobs run with (connector + the anchorwatch-json format).
JOBS_PROJECT = Path(__file__).parent.parent / "jobs" / "jvm"
JOBS_JAR = "anchorwatch-flink-jobs.jar"
_STAMP = "sources.sha256"


class JvmArtifactsError(AnchorwatchError):
    """The pinned jars are missing and could not be fetched."""


@dataclass(frozen=True)
class JvmArtifacts:
    root: Path

    @property
    def kafka_dir(self) -> Path:
        return self.root / "kafka"

    @property
    def flink_dir(self) -> Path:
        return self.root / "flink"

    def kafka_classpath(self) -> str:
        jars = sorted(self.kafka_dir.glob("*.jar"))
        if not jars:
            raise JvmArtifactsError(
                f"no Kafka jars in {self.kafka_dir}; run `anchorwatch jvm fetch` first"
            )
        return ":".join(str(j) for j in jars)

    def flink_jobs_jar(self) -> Path:
        """The jar every Flink job needs: the Kafka SQL connector and the anchorwatch-json
        format."""
        jar = self.flink_dir / JOBS_JAR
        if not jar.is_file():
            raise JvmArtifactsError(
                f"no {JOBS_JAR} in {self.flink_dir}; run `anchorwatch jvm fetch`"
            )
        return jar

    def is_current(self) -> bool:
        stamp = self.root / _STAMP
        return (
            stamp.is_file()
            and stamp.read_text().strip() == sources_hash()
            and any(self.kafka_dir.glob("kafka_2.13-*.jar"))
            and (self.flink_dir / JOBS_JAR).is_file()
        )


def sources_hash() -> str:
    """SHA-256 of everything the cache is made from: this pom, then the jobs project's files
    in byte order of their paths (the Flink image computes the same with cat | sha256sum)."""
    sources = (p for p in (JOBS_PROJECT / "src").rglob("*") if p.is_file())
    files = [JOBS_PROJECT / "pom.xml", *sources]
    digest = hashlib.sha256(POM.read_bytes())
    for path in sorted(files, key=lambda p: p.relative_to(JOBS_PROJECT).as_posix().encode()):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fetch(cache_dir: Path, *, force: bool = False) -> tuple[JvmArtifacts, bool]:
    """Make sure the pinned jars are in ``cache_dir/jvm``. Returns (artifacts, fetched)."""
    artifacts = JvmArtifacts(cache_dir / "jvm")
    if artifacts.is_current() and not force:
        return artifacts, False
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmArtifactsError("Maven (`mvn`) is not on PATH; install it (Debian: maven)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="jvm.", dir=cache_dir))
    try:
        stamp = sources_hash()
        shutil.copy(POM, staging / "pom.xml")
        # Built from a copy, so an installed (read-only) package works and no target/ is left.
        shutil.copytree(JOBS_PROJECT, staging / "jobs", ignore=shutil.ignore_patterns("target"))
        log.info("fetching pinned JVM artifacts", extra={"cache": str(artifacts.root)})
        for project in (staging / "pom.xml", staging / "jobs" / "pom.xml"):
            cmd = [mvn, "-B", "-q", "-f", str(project), "package",
                   f"-Danchorwatch.cache={staging / 'out'}"]  # fmt: skip
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
                raise JvmArtifactsError(f"Maven could not fetch the pinned artifacts:\n{tail}")
        (staging / "out" / _STAMP).write_text(stamp + "\n")
        old = cache_dir / f"jvm.old.{staging.name}"
        if artifacts.root.exists():
            artifacts.root.rename(old)
        (staging / "out").rename(artifacts.root)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifacts, True
