"""Mutation-test the pure core with mutmut, then print the score and the survivors.

    python scripts/mutate.py            # every mutant in scope (minutes on 2 cores)
    python scripts/mutate.py --survivors  # re-run only the last run's survivors (after new tests)
    python scripts/mutate.py --report   # only re-read the last run's results

The scope is a list of mutmut name patterns (functions, not whole files, where a module mixes pure
code with I/O); `[tool.mutmut]` in pyproject.toml names the files to mutate and the fast unit tests
that run against each mutant. See docs/mutation-testing.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCOPE = (
    "personalign.metrics.*",
    "personalign.judges.*",
    "personalign.memory.supersession.*",
    # llm/cache.py: the key only (the rest is SQLite and threads); json_string is memoized with
    # functools.lru_cache, and mutmut does not mutate decorated functions.
    "personalign.llm.cache.x_cache_key*",
    "personalign.llm.cache.x_config_json*",
    # report/: the cells (values, CIs, n, and which column each lands in), not file writing or printing
    "personalign.report.tables.xǁTableǁ*",
    "personalign.benchmarks.cupid.report.x__prf_cells*",
    "personalign.benchmarks.cupid.report.x__ci*",
    "personalign.benchmarks.cupid.report.x__mean_cell*",
    "personalign.benchmarks.cupid.report.x_build_report*",
    "personalign.benchmarks.benchpres.report.x__pct*",
    "personalign.benchmarks.benchpres.report.x__rate_cell*",
    "personalign.benchmarks.hicupid.report.x__score_cells*",
    "personalign.benchmarks.hicupid.report.x__wtl_cells*",
)

KILLED = {1, 3, 36, 37, -24, 24, 152, 255}  # failing tests, timeouts, type-check rejections
STATUS = {0: "survived", 33: "no tests", 5: "no tests", None: "not checked"}


def results() -> dict[str, int | None]:
    """Exit code per in-scope mutant from the last run's `mutants/**/*.meta` files."""
    out: dict[str, int | None] = {}
    for meta in sorted((ROOT / "mutants" / "src").rglob("*.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in SCOPE):
                out[name] = code
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="only summarize the last run")
    parser.add_argument("--survivors", action="store_true", help="re-run only the last run's survivors")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    if not args.report:
        names = SCOPE
        if args.survivors:
            names = tuple(name for name, code in results().items() if code not in KILLED)
            if not names:
                print("no survivors to re-run")
        mutmut = Path(sys.executable).with_name("mutmut")
        if names:
            command = [str(mutmut), "run", "--max-children", str(args.max_children), *names]
            subprocess.run(command, cwd=ROOT, check=False)
    codes = results()
    if not codes:
        print("no mutmut results in scope: run without --report first", file=sys.stderr)
        return 1
    killed = sum(1 for c in codes.values() if c in KILLED)
    counts = Counter("killed" if c in KILLED else STATUS.get(c, f"exit {c}") for c in codes.values())
    print(f"\nmutation score: {killed}/{len(codes)} killed ({100 * killed / len(codes):.1f}%)")
    print("  " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    survivors = sorted(name for name, c in codes.items() if c not in KILLED)
    for name in survivors:
        print(f"  {STATUS.get(codes[name], codes[name])}: {name}")
    if survivors:
        print("inspect one with: mutmut show <name>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
