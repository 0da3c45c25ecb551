"""Run directories of every benchmark, made once per session with the scripted models (no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.cli import app


def make_run(benchmark: str, run_dir: Path, *extra: str) -> Path:
    """Run `benchmark` on its fixture with scripted models into `run_dir`."""
    args = ["run", benchmark, "--model", "scripted/a", "--judge", "scripted/b", "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, [*args, "--no-cache", "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return run_dir


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/ with a CUPID (both tasks), a HiCUPID and a BenchPreS run; CUPID also as a second run."""
    root = tmp_path_factory.mktemp("runs")
    make_run("cupid", root / "cupid" / "a", "--task", "both")
    make_run("hicupid", root / "hicupid" / "a")
    make_run("benchpres", root / "benchpres" / "a")
    return root


@pytest.fixture()
def runs(runs_root: Path, tmp_path: Path) -> Path:
    """A private copy of the session's runs, which a test may change."""
    root = tmp_path / "runs"
    shutil.copytree(runs_root, root)
    return root


def read_json(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
