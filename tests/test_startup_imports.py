"""A quick CLI (issue 16): `personalign --help` and the re-run of a finished run load only what they use.

Each command runs in a fresh interpreter, exactly as `python -m personalign ...` does, and reports the
modules it imported; the start-up time itself is measured by benchmarks/cli_startup.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs `python -m personalign <argv>` in this interpreter, then writes the imported modules' names.
_PROBE = (
    "import json, runpy, sys\n"
    "out, sys.argv = sys.argv[1], ['personalign', *sys.argv[2:]]\n"
    "code = 0\n"
    "try:\n"
    "    runpy.run_module('personalign', run_name='__main__', alter_sys=True)\n"
    "except SystemExit as exc:\n"
    "    code = exc.code or 0\n"
    "open(out, 'w').write(json.dumps(sorted(sys.modules)))\n"
    "sys.exit(code)\n"
)


def _modules(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(out), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, set(json.loads(out.read_text()))


def _loaded(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in prefixes or m.startswith(prefixes))


def test_help_loads_no_benchmark_no_pydantic_no_rich(tmp_path: Path) -> None:
    done, modules = _modules(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout and "rescore" in done.stdout and "A benchmark's own commands" in done.stdout
    heavy = ("numpy", "pydantic", "rich", "httpx", "sqlite3", "asyncio")
    assert _loaded(modules, *heavy) == []
    assert _loaded(modules, "personalign.benchmarks", "personalign.runs", "personalign.llm") == []
    assert "typer.rich_utils" not in modules


def test_run_help_lists_benchmarks_without_loading_them(tmp_path: Path) -> None:
    done, modules = _modules(tmp_path, "run", "--help")
    assert done.returncode == 0, done.stderr
    assert "cupid" in done.stdout and "prefeval" in done.stdout
    assert _loaded(modules, "personalign.benchmarks", "numpy", "pydantic", "rich") == []


def test_rerun_of_a_finished_run_reads_its_summary_without_the_evaluator(tmp_path: Path) -> None:
    """The finished-run check returns the stored result: no numpy, no model layer, no async runner,
    no call cache; the printed summary is the one the run printed."""
    args = [
        "run",
        "cupid",
        "--model",
        "scripted/subject",
        "--judge",
        "scripted/judge",
        "--run-dir",
        str(tmp_path / "run"),
        "--cache",
        str(tmp_path / "calls.sqlite"),
        "--no-progress",
    ]
    first, first_modules = _modules(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert "numpy" in first_modules  # the evaluation itself does load them
    again, modules = _modules(tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert (again.stdout, again.stderr) == (first.stdout, first.stderr)  # the same banner and table
    assert "status complete" in again.stdout
    assert _loaded(modules, "numpy", "sqlite3", "asyncio", "httpx") == []
    assert _loaded(modules, "personalign.llm.model", "personalign.llm.cache", "personalign.runs.runner") == []
    assert _loaded(modules, "personalign.benchmarks.cupid.steps", "personalign.metrics") == []
