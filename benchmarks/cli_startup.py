"""CLI start-up and the cached re-run of a finished CUPID run, side by side with an older commit.

    .venv/bin/python benchmarks/cli_startup.py [--baseline 201bbde | --baseline-dir TREE] [--runs 7]

Each measure is the median wall time of `--runs` fresh processes (`python -m personalign ...`, with
PYTHONPATH pointing at the tree's `src/`):

- `personalign --help` and `personalign run --help` (target: under 0.2 s);
- a re-run of a finished 756-instance CUPID run on the scripted model (the finished-run check
  returns at once; target: under 0.35 s). The run is built once per tree, as
  benchmarks/cupid_throughput.py builds its data.

Wall and CPU time (user + system of the process) are both printed: where other work shares the
cores the wall time mostly measures the queue, and the CPU time is the figure to compare.

Both trees are copied into a temporary folder without `__pycache__`, so they run alike with respect
to bytecode: by default each tree's `.pyc` files are written by its first (building) run and read
afterwards, as an installed package runs; with `--no-bytecode-cache` no `.pyc` is written and every
process compiles the personalign sources it imports (~0.1 s more per measure, either tree).
The baseline tree is `git archive` of `--baseline` (a commit) unpacked in a temporary folder, or
`--baseline-dir` (a checkout holding `src/personalign`). Prints each median and the ratio
this tree / baseline.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from cupid_throughput import generate_instances  # noqa: E402

TARGETS = {"--help": 0.2, "run --help": 0.2, "cached re-run": 0.35}


def personalign(tree: Path, *args: str) -> list[str]:
    """The command line (the tree is chosen by PYTHONPATH, see `env_for`)."""
    return [sys.executable, "-m", "personalign", *args]


BYTECODE_CACHE = True  # main() sets it from --no-bytecode-cache


def env_for(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "NO_COLOR": "1"}
    if BYTECODE_CACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def once(tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) time of one `personalign *args` process from `tree` (it must
    exit 0). On a machine shared with other work the wall time mostly measures the others; the CPU
    time is what the process itself costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(personalign(tree, *args), env=env_for(tree), check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_args(data: Path, work: Path) -> list[str]:
    return [
        "run",
        "cupid",
        "--model",
        "scripted/subject",
        "--judge",
        "scripted/judge",
        "--data",
        str(data),
        "--run-dir",
        str(work / "run"),
        "--cache",
        str(work / "calls.sqlite"),
        "--concurrency",
        "64",
        "--no-progress",
    ]


def measure(
    trees: dict[str, Path], data: Path, work: Path, runs: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Median per tree and measure. The trees alternate within each repetition, so a change in the
    machine's load (other processes) weighs on both alike. Each tree's finished run is built first."""
    commands: dict[str, dict[str, list[str]]] = {}
    for label, tree in trees.items():
        args = run_args(data, work / label)
        subprocess.run(personalign(tree, *args), env=env_for(tree), check=True, capture_output=True)
        commands[label] = {"--help": ["--help"], "run --help": ["run", "--help"], "cached re-run": args}
    times: dict[str, dict[str, list[tuple[float, float]]]] = {k: {m: [] for m in TARGETS} for k in trees}
    for _ in range(runs):
        for name in TARGETS:
            for label, tree in trees.items():
                times[label][name].append(once(tree, commands[label][name]))
    return {
        label: {
            m: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for m, v in by.items()
        }
        for label, by in times.items()
    }


def unpack(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="201bbde", help="Commit to compare with (git archive).")
    parser.add_argument("--baseline-dir", type=Path, help="A checkout to compare with instead.")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--instances", type=int, default=756)
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="Write no .pyc (compile at every start)."
    )
    args = parser.parse_args()
    global BYTECODE_CACHE
    BYTECODE_CACHE = not args.no_bytecode_cache

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "instances.jsonl"
        generate_instances(args.instances, data)
        old_tree = args.baseline_dir or unpack(args.baseline, tmp / "baseline")
        new_tree = tmp / "this"
        shutil.copytree(ROOT / "src", new_tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
        label = str(args.baseline_dir or args.baseline)
        medians = measure({"old": old_tree, "new": new_tree}, data, tmp, args.runs)
        old, new = medians["old"], medians["new"]

    load = os.getloadavg()[0]
    print(
        f"median of {args.runs} processes each; {args.instances} CUPID instances; "
        f"baseline {label}; load {load:.1f}; bytecode {'cached' if BYTECODE_CACHE else 'not written'}"
    )
    print(
        f"{'measure':<15}{'wall: baseline':>15}{'this':>8}{'ratio':>7}"
        f"{'cpu: baseline':>15}{'this':>8}{'ratio':>7}"
    )
    for name, target in TARGETS.items():
        (old_wall, old_cpu), (new_wall, new_cpu) = old[name], new[name]
        print(
            f"{name:<15}{old_wall:>15.3f}{new_wall:>8.3f}{new_wall / old_wall:>7.2f}"
            f"{old_cpu:>15.3f}{new_cpu:>8.3f}{new_cpu / old_cpu:>7.2f}   target {target:.2f} s"
        )


if __name__ == "__main__":
    main()
