"""This checkout against another commit, side by side: a bench script run alternately from
both, in one session on this machine, and its headline figures compared per pair of runs.

    .venv/bin/python bench/versions.py --prepare f194281 /tmp/before
    .venv/bin/python bench/versions.py --against /tmp/before --pairs 3 -- \\
        job.py --events 3000000 --rounds 1 --latency-samples 2 --input summaries
    .venv/bin/python bench/versions.py --against /tmp/before --pairs 3 -- \\
        ingest.py --events 100000 --workers 2 --concurrency 32 --rounds 1

`--prepare REV DIR` makes DIR a git worktree of REV that runs on its own code: a virtual
environment that reuses this one's packages (a .pth line) with REV's anchorwatch installed
editable over them (its Rust extension compiled, CARGO_TARGET_DIR under DIR), and REV's
Flink jobs' jar built into DIR/.cache (XDG_CACHE_HOME, so this checkout's jar is left
alone). `--against DIR` then runs `bench/SCRIPT ARGS...` from each checkout in turn, the
order flipped every pair (A B, B A, ...) so that neither always runs on a warmer or a
busier machine, each run starting its own private Kafka. Every run's figures are printed as
it ends; at the end, per figure, each side's median and the median of the per-pair ratios
(this checkout over the other: above 1 is faster, for CPU per event above 1 is dearer).

Figures read from the scripts' output: job.py's `median over N rounds: drift job [...]`
lines (events/s and CPU per event, and CPU per event without the JIT's share where the line
gives it), the medians of its floor jobs' `round N read-...` lines (what reading the records,
and parsing them, costs without the job's logic) and ingest.py's per-setup lines (events/s,
CPU per event). Both sides run the
bench script of their own commit, with its own traffic generator: compare commits whose
bench scripts take the same arguments.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# (figure's name from the line, value) per headline line of each script.
JOB_LINE = re.compile(
    r"^median over \d+ rounds: (?P<name>drift job(?: \[\w+\])?) (?P<rate>[\d,]+) events/s"
    r".*?; CPU per event (?P<cpu>[\d.]+) µs(?: \(JIT (?P<jit>[\d.]+)\))?"
)
# job.py's per-run lines of its floor jobs (read-discard, read-parse-discard), whose medians
# it does not print on a line of their own: what reading (and parsing) the records alone costs.
FLOOR_LINE = re.compile(
    r"^round \d+ (?P<name>read-[\w-]+(?: \[\w+\])?)\s+wall .*?(?P<rate>[\d,]+) events/s\s+"
    r"(?P<cpu>[\d.]+) CPU-µs/event(?: \((?P<jit>[\d.]+) of it JIT\))?"
)
INGEST_LINE = re.compile(
    r"^\s+(?P<name>ingest(?: \+ summaries)? over HTTP, \d+ worker\(s\), \d+ connections): "
    r"\s*(?P<rate>[\d,]+) events/s.*?, (?P<cpu>[\d.]+) us CPU per event"
)


def figures(output: str) -> dict[str, float]:
    """The headline figures in one run's output: '<name> events/s' and '<name> CPU-µs' (a
    floor job's: the median of its rounds)."""
    found: dict[str, float] = {}
    floors: dict[str, list[float]] = {}
    for line in output.splitlines():
        floor = FLOOR_LINE.match(line)
        if floor:
            name = floor["name"]
            floors.setdefault(f"{name}: events/s", []).append(float(floor["rate"].replace(",", "")))
            floors.setdefault(f"{name}: CPU-µs/event", []).append(float(floor["cpu"]))
            if floor["jit"] is not None:
                floors.setdefault(f"{name}: CPU-µs/event without JIT", []).append(
                    float(floor["cpu"]) - float(floor["jit"])
                )
            continue
        match = JOB_LINE.match(line) or INGEST_LINE.match(line)
        if match:
            name = match["name"]
            found[f"{name}: events/s"] = float(match["rate"].replace(",", ""))
            found[f"{name}: CPU-µs/event"] = float(match["cpu"])
            if match.groupdict().get("jit") is not None:
                # The JIT compiling the job's classes in each run: a start-up cost, not a
                # per-event one (bench/job.py).
                found[f"{name}: CPU-µs/event without JIT"] = float(match["cpu"]) - float(
                    match["jit"]
                )
    found.update((key, statistics.median(values)) for key, values in floors.items())
    return found


def prepare(rev: str, target: Path) -> None:
    """A worktree of rev at target with its own editable install and jar (see the docstring)."""
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "-f", str(target), rev], check=True)
    venv = target / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    here_site = Path(sysconfig.get_paths()["purelib"])
    # This environment's packages (pyflink, confluent-kafka, ...) without its own anchorwatch:
    # a .pth inside a directory named by a .pth line is not read, so its editable finder
    # stays out.
    (site / "reuse.pth").write_text(f"{here_site}\n")
    env = dict(os.environ, CARGO_TARGET_DIR=str(target / ".cargo-target"))
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--editable", str(target)],
        check=True, env=env,
    )  # fmt: skip
    subprocess.run(
        [str(venv / "bin" / "anchorwatch"), "jvm", "fetch"], check=True, env=side_env(target)
    )


def side_env(checkout: Path) -> dict[str, str]:
    """The environment a checkout's bench runs in: another checkout's jar in its own cache."""
    env = dict(os.environ)
    if checkout != HERE:
        env["XDG_CACHE_HOME"] = str(checkout / ".cache")
    return env


def run(checkout: Path, script: list[str], keep: Path | None = None) -> dict[str, float]:
    """One run of the bench script from checkout: its headline figures (its whole output
    written to ``keep`` when given)."""
    python = checkout / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(checkout / "bench" / script[0]), *script[1:]],
        cwd=checkout, env=side_env(checkout), capture_output=True, text=True,
    )  # fmt: skip
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"{checkout}: bench/{script[0]} failed (exit {done.returncode})")
    found = figures(done.stdout)
    if not found:
        raise SystemExit(f"{checkout}: no headline figure in bench/{script[0]}'s output")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--prepare", nargs=2, metavar=("REV", "DIR"))
    parser.add_argument("--against", type=Path, metavar="DIR")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, metavar="DIR",
        help="write each run's whole output to DIR/pair<N>-<commit>.txt (the other jobs' "
        "figures of the same run: read-discard, the floors, hot methods)",
    )  # fmt: skip
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare[0], Path(args.prepare[1]).resolve())
        return
    script = [a for a in args.script if a != "--"]
    if not args.against or not script:
        parser.error("--against DIR and a bench script with its arguments are required")
    other = args.against.resolve()
    head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    base = subprocess.run(["git", "-C", str(other), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"this checkout {head} against {other} ({base}): bench/{' '.join(script)}")
    mine: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for pair in range(args.pairs):
        order = [(HERE, mine), (other, theirs)]
        for checkout, results in order if pair % 2 == 0 else order[::-1]:
            label = head if checkout == HERE else base
            keep = args.keep / f"pair{pair + 1}-{label}.txt" if args.keep else None
            results.append(run(checkout, script, keep))
            shown = ", ".join(f"{k} {v:,.1f}" for k, v in results[-1].items())
            print(f"pair {pair + 1} {label}: {shown}", flush=True)
    for name in mine[0]:
        a = [m[name] for m in mine if name in m]
        b = [t[name] for t in theirs if name in t]
        pairs = zip(mine, theirs, strict=True)
        ratios = [m[name] / t[name] for m, t in pairs if name in m and name in t]
        if not ratios:
            continue
        print(
            f"{name}: {head} {statistics.median(a):,.1f} vs {base} {statistics.median(b):,.1f}; "
            f"median ratio over {len(ratios)} pairs {statistics.median(ratios):.2f}x "
            f"(per pair: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
