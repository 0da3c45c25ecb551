"""CLI start-up and the cached re-run of a finished CUPID run, side by side with an older commit.

    .venv/bin/python benchmarks/cli_startup.py [--baseline 201bbde | --baseline-dir TREE] [--runs 7]

Each measure is the median wall time of `--runs` fresh processes (`python -m personalign ...`, with
PYTHONPATH pointing at the tree's `src/`):

- `personalign --help` and `personalign run --help` (target: under 0.2 s);
- a re-run of a finished 756-instance CUPID run on the scripted model (the finished-run check
  returns at once; target: under 0.35 s). The run is built once per tree, as
  benchmarks/cupid_throughput.py builds its data.

The baseline tree is `git archive` of `--baseline` (a commit) unpacked in a temporary folder, or
`--baseline-dir` (a checkout holding `src/personalign`). Prints each median and the ratio
this tree / baseline.
"""

from __future__ import annotations

import argparse
import io
import os
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
    return [sys.executable, "-m", "personalign", *args]


def env_for(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree / "src"), "NO_COLOR": "1"}


def timed(tree: Path, args: list[str], runs: int) -> float:
    """The median wall time of `runs` processes of `personalign *args` from `tree` (each must exit 0)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(personalign(tree, *args), env=env_for(tree), check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


def measure(tree: Path, data: Path, work: Path, runs: int) -> dict[str, float]:
    """The three measures on `tree`; builds the finished run first (not timed)."""
    work.mkdir(parents=True, exist_ok=True)
    args = run_args(data, work)
    subprocess.run(personalign(tree, *args), env=env_for(tree), check=True, capture_output=True)
    return {
        "--help": timed(tree, ["--help"], runs),
        "run --help": timed(tree, ["run", "--help"], runs),
        "cached re-run": timed(tree, args, runs),
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
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "instances.jsonl"
        generate_instances(args.instances, data)
        old_tree = args.baseline_dir or unpack(args.baseline, tmp / "baseline")
        label = str(args.baseline_dir or args.baseline)
        new = measure(ROOT, data, tmp / "new", args.runs)
        old = measure(old_tree, data, tmp / "old", args.runs)

    print(f"median of {args.runs} processes; {args.instances} CUPID instances; baseline {label}")
    print(f"{'measure':<16}{'baseline s':>12}{'this tree s':>13}{'ratio':>8}{'target s':>10}")
    for name, target in TARGETS.items():
        ratio = new[name] / old[name]
        print(f"{name:<16}{old[name]:>12.3f}{new[name]:>13.3f}{ratio:>8.2f}{target:>10.2f}")


if __name__ == "__main__":
    main()
