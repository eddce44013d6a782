"""`make mutate`: mutation testing of the code where a silent bug costs most, with the unit
tests, in bounded time (docs/testing.md).

Python (mutmut, [tool.mutmut] in pyproject.toml): anchorwatch/contracts, anchorwatch/policy,
alerting/outbox.py and alerting/store.py; per module at most ``--sample`` mutants drawn with
a fixed seed. Rust (cargo-mutants): connectors/native, one shard of its mutants
(``--native-shard``), each judged by the Python unit tests of the ingest path run against the
mutated build (connectors/native/tests/python_suite.rs).

Everything runs in a scratch copy of the committed tree (``git archive HEAD``): the checkout,
its compiled module and anyone's uncommitted work are never touched. Prints the score per
module; a mutant counts as killed when a test failed or timed out (or, in Rust, it did not
build: unviable mutants are left out of the score).

``--again`` keeps the scratch copy of the last run (its mutants, mutmut's map of which test
reaches which function, the results) and takes only the tests (``tests/``, pyproject.toml)
from HEAD anew: mutmut maps new tests by itself, and only the chosen mutants not killed yet
run (again). After adding tests that is the same score as a fresh run, at a fraction of
the time: a killed mutant stays killed while the tests that killed it stay. A larger
``--sample`` then also runs the mutants the last run did not draw.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Module -> the prefix of its mutants' names (mutmut names them by import path).
MODULES = {
    "contracts": "anchorwatch.contracts.",
    "policy": "anchorwatch.policy.",
    "alerting/outbox.py": "anchorwatch.alerting.outbox.",
    "alerting/store.py": "anchorwatch.alerting.store.",
}
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
_RESULT = re.compile(r"^\s+(\S+): (.+)$")


def scratch_copy(workdir: Path) -> Path:
    """The committed tree in ``workdir``, with the compiled module the checkout built."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
    for module in (ROOT / "connectors").glob("_native*.so"):
        shutil.copy2(module, workdir / "connectors" / module.name)
    # mutmut names a mutant by its file's path and matches it with the module's import
    # name: alerting/ must sit where it is imported from (anchorwatch/alerting).
    link = workdir / "anchorwatch" / "alerting"
    link.unlink()
    (workdir / "alerting").rename(link)
    (workdir / "alerting").symlink_to("anchorwatch/alerting")
    return workdir


def refresh_tests(workdir: Path) -> None:
    """The committed tests in a scratch copy made earlier (its sources stay as they were)."""
    shutil.rmtree(workdir / "tests")
    archive = subprocess.run(
        ["git", "archive", "HEAD", "tests", "pyproject.toml"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)


def mutmut(workdir: Path, args: list[str], *, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANCHORWATCH_")}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "mutmut"), *args],
        cwd=workdir, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and result.returncode != 0:
        sys.exit(f"mutmut {' '.join(args[:3])} failed:\n{result.stdout[-3000:]}{result.stderr}")
    return result.stdout


def results(workdir: Path) -> dict[str, str]:
    out = mutmut(workdir, ["results", "--all", "true"])
    return {m.group(1): m.group(2) for line in out.splitlines() if (m := _RESULT.match(line))}


def run_python(
    workdir: Path, modules: list[str], sample: int, seed: int, before: dict[str, str]
) -> dict[str, Counter[str]]:
    """``before``: the results of the run whose scratch copy is kept (--again), else empty."""
    # Generate every mutant and map tests to functions, running none (nothing matches).
    # A changed test selection makes mutmut forget every result: ``before`` keeps them.
    mutmut(workdir, ["run", "--max-children", "2", "no.such.mutant"], check=False)
    every = results(workdir)
    chosen: list[str] = []
    for module in modules:
        names = sorted(n for n in every if n.startswith(MODULES[module]))
        chosen += random.Random(f"{seed}:{module}").sample(names, min(sample, len(names)))
    # What was killed stays killed (the tests that killed it are still there).
    kept = {n: before[n] for n in chosen if before.get(n) in KILLED}
    to_run = [n for n in chosen if n not in kept and every[n] not in KILLED]
    print(f"mutmut: {len(chosen)} of {len(every)} mutants, {len(to_run)} to run", flush=True)
    if to_run:
        mutmut(workdir, ["run", "--max-children", "2", *to_run])
    done = {**results(workdir), **kept}
    scores: dict[str, Counter[str]] = {}
    for module in modules:
        scores[module] = Counter(done[n] for n in chosen if n.startswith(MODULES[module]))
    survivors = sorted(n for n in chosen if done[n] not in KILLED)
    (workdir / "mutmut-survivors.txt").write_text("".join(f"{n}\n" for n in survivors))
    (workdir / "mutmut-results.json").write_text(json.dumps(done, indent=0, sort_keys=True))
    return scores


def run_native(workdir: Path, shard: str, timeout_s: int) -> Counter[str]:
    crate = workdir / "connectors" / "native"
    target = ROOT / "connectors" / "native" / "target"
    if (target / "debug").is_dir():  # the dependencies, built once
        shutil.copytree(target / "debug", crate / "target" / "debug", symlinks=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANCHORWATCH_")},
        "MUTATE_PYTHON": sys.executable,
        "PYO3_PYTHON": sys.executable,
    }
    subprocess.run(
        ["cargo", "mutants", "--in-place", "--shard", shard, "--sharding", "round-robin",
         "--timeout", str(timeout_s), "--build-timeout", "300"],
        cwd=crate, env=env, check=False,
    )  # fmt: skip
    outcomes = json.loads((crate / "mutants.out" / "outcomes.json").read_text())
    counts: Counter[str] = Counter()
    for outcome in outcomes["outcomes"]:
        if outcome["scenario"] == "Baseline":
            continue
        counts[outcome["summary"]] += 1
    return counts


def score(counts: Counter[str], killed: set[str], ignored: set[str]) -> str:
    judged = sum(n for s, n in counts.items() if s not in ignored)
    caught = sum(n for s, n in counts.items() if s in killed)
    percent = 100 * caught / judged if judged else 0.0
    return f"{percent:5.1f}% ({caught} of {judged} killed; {dict(counts)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scratch = Path(tempfile.gettempdir()) / "anchorwatch-mutate"
    parser.add_argument("--workdir", type=Path, default=scratch)
    parser.add_argument("--modules", default=",".join(MODULES), help="Python modules, or none")
    parser.add_argument("--sample", type=int, default=60, help="mutants per Python module")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--native-shard", default="0/6", help="k/n of cargo-mutants (round-robin), or none"
    )
    parser.add_argument("--native-timeout", type=int, default=400)
    parser.add_argument(
        "--again",
        action="store_true",
        help="keep the last run's scratch copy, take the tests from HEAD, run what survived",
    )
    args = parser.parse_args()
    started = time.monotonic()
    before: dict[str, str] = {}
    if args.again and (args.workdir / "mutants").is_dir():
        workdir = args.workdir
        before = results(workdir)
        if (kept := workdir / "mutmut-results.json").exists():  # what mutmut may forget
            before.update(json.loads(kept.read_text()))
        refresh_tests(workdir)
    else:
        workdir = scratch_copy(args.workdir)
    report: dict[str, str] = {}
    modules = [m for m in args.modules.split(",") if m and m != "none"]
    if modules:
        for module, counts in run_python(workdir, modules, args.sample, args.seed, before).items():
            report[module] = score(counts, KILLED, set())
    if args.native_shard != "none":
        counts = run_native(workdir, args.native_shard, args.native_timeout)
        report["connectors/native"] = score(counts, {"CaughtMutant", "Timeout"}, {"Unviable"})
    print(f"\nmutation scores (seed {args.seed}, {time.monotonic() - started:.0f} s):")
    for module, line in report.items():
        print(f"  {module:22} {line}")
    print(f"survivors: {workdir}/mutmut-survivors.txt, {workdir}/connectors/native/mutants.out")


if __name__ == "__main__":
    main()
