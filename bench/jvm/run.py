"""The drift job's per-event pieces on their own (no Kafka, no job), compiled against
PyFlink's jars and the jobs' jar:

- FormatBench.java: the anchorwatch-json decoders, CPU per record of the byte scanner and of
  Flink's JSON decoder over generated snapshots, and a differential fuzz of the two;
- IdSetBench.java: a window's id set, ns per id added one at a time and a run at a time,
  and a differential check of the two.

    .venv/bin/python bench/jvm/run.py bench 8                # rounds of CPU per record
    .venv/bin/python bench/jvm/run.py fuzz 1 300000          # seed, mutated records
    .venv/bin/python bench/jvm/run.py idset-bench 7 1000000  # rounds, ids a window
    .venv/bin/python bench/jvm/run.py idset-check 1 300000   # seed, ids
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from pathlib import Path

import pyflink

from anchorwatch.demo.generator import TrafficConfig, generate
from anchorwatch.jobs.settings import JobSettings
from anchorwatch.stack.jvm import fetch


def main() -> None:
    jar = fetch(JobSettings.load().jvm.cache_dir)[0].flink_jobs_jar()
    lib = Path(pyflink.__file__).parent / "lib"
    classpath = f"{lib}/*:{jar}"
    with tempfile.TemporaryDirectory(prefix="aw-format-bench-") as tmp:
        here = Path(__file__).parent
        sources = [str(here / "FormatBench.java"), str(here / "IdSetBench.java")]
        subprocess.run(["javac", "-nowarn", "-d", tmp, "-cp", classpath, *sources], check=True)
        if sys.argv[1].startswith("idset"):
            cmd = ["java", "-cp", f"{tmp}:{classpath}", "dev.anchorwatch.flink.IdSetBench"]
            sys.exit(subprocess.run([*cmd, *sys.argv[1:]], check=False).returncode)
        traffic = generate(TrafficConfig(seed=5, minutes=3, doc_types=16, rate_scale=1.0))
        corpus = Path(tmp) / "corpus.b64"
        records = (r.raw for r in traffic.records() if r.event is not None)
        corpus.write_text("".join(base64.b64encode(r).decode() + "\n" for r in records))
        main_class = "dev.anchorwatch.flink.FormatBench"
        cmd = ["java", "-cp", f"{tmp}:{classpath}", main_class, str(corpus), *sys.argv[1:]]
        sys.exit(subprocess.run(cmd, check=False).returncode)


if __name__ == "__main__":
    main()
