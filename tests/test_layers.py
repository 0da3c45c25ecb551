"""The import contracts hold: layers without cycles, as declared in pyproject.toml (docs/architecture.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (a dev dependency)")
    return found


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [_lint_imports(), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_memory_engine_loads_without_any_benchmark_module() -> None:
    """Importing the engine core pulls in no context strategy, benchmark, run module or synthesis."""
    code = (
        "import sys\n"
        "for m in ('engine', 'store', 'index', 'extract', 'select', 'types', 'supersession', 'entities'):\n"
        "    __import__('personalign.memory.' + m)\n"
        "bad = [m for m in sys.modules if m.startswith(('personalign.benchmarks', 'personalign.synth',"
        " 'personalign.data', 'personalign.context'))]\n"
        "print(sorted(bad))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
