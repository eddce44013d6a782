"""Pinned JVM artifacts: fetched once from Maven Central into a cache directory.

The versions live in ``pom.xml`` beside this file. ``fetch`` is idempotent: the cache
remembers the hash of the pom it was filled from, and a warm cache is used without
running Maven (so without any network). A changed pom refills the cache into a fresh
directory and swaps it in, so jars of an older version never linger on a classpath.
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
_STAMP = "pom.sha256"


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

    def kafka_connector_jar(self) -> Path:
        jars = sorted(self.flink_dir.glob("flink-sql-connector-kafka-*.jar"))
        if not jars:
            raise JvmArtifactsError(
                f"no Flink Kafka connector jar in {self.flink_dir}; run `anchorwatch jvm fetch`"
            )
        return jars[-1]

    def is_current(self) -> bool:
        stamp = self.root / _STAMP
        return (
            stamp.is_file()
            and stamp.read_text().strip() == pom_hash()
            and any(self.kafka_dir.glob("kafka_2.13-*.jar"))
            and any(self.flink_dir.glob("flink-sql-connector-kafka-*.jar"))
        )


def pom_hash() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


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
        shutil.copy(POM, staging / "pom.xml")
        cmd = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(staging / "pom.xml"),
            "package",
            f"-Danchorwatch.cache={staging / 'out'}",
        ]
        log.info("fetching pinned JVM artifacts", extra={"cache": str(artifacts.root)})
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise JvmArtifactsError(f"Maven could not fetch the pinned artifacts:\n{tail}")
        (staging / "out" / _STAMP).write_text(pom_hash() + "\n")
        old = cache_dir / f"jvm.old.{staging.name}"
        if artifacts.root.exists():
            artifacts.root.rename(old)
        (staging / "out").rename(artifacts.root)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifacts, True
