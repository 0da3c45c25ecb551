"""`--context memory` in CUPID runs: the engine picks the sessions, the rest of the run is unchanged."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from personalign.benchmarks.cupid.context import MEMORY_K, select_sessions
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.report import build_report, write_report
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.cli import app


def test_memory_context_selects_k_sessions_in_order_with_the_oracle() -> None:
    instances = load_cupid("fixture").instances
    first = instances[0]  # the factor is a named person: both oracle sessions are found
    chosen = select_sessions(first, "memory")
    assert len(chosen) == MEMORY_K
    assert set(first.oracle_sessions()) <= set(chosen)
    positions = [first.prior_interactions.index(s) for s in chosen]
    assert positions == sorted(positions)  # shown in their original order
    changing = next(i for i in instances if i.instance_type == "changing")
    picked = select_sessions(changing, "memory")
    assert set(changing.oracle_sessions()) <= set(picked)  # the newest preference is shown


def test_cupid_run_with_memory_context_both_tasks(tmp_path: Path) -> None:
    config = CupidConfig(
        subject="scripted/s",
        decomposer="scripted/j",
        matcher="scripted/j",
        judge="scripted/j",
        task="both",
        context="memory",
    )
    settings = RunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, limit=3
    )  # the first persona: one instance of each type
    result = run_cupid(config, settings)
    assert result.outcome.status == "complete"
    assert result.summary["context"] == "memory"
    for task in ("inference", "generation"):
        assert result.summary[task]["n_scored"] == 3
        assert set(result.summary[task]["by_type"]) == {"consistent", "contrastive", "changing"}
    markdown = write_report(build_report([tmp_path / "run"]), tmp_path / "report")
    assert "(memory)" in markdown


def test_cli_accepts_memory_context(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run", "cupid", "--model", "scripted/s", "--judge", "scripted/j", "--context", "memory",
            "--limit", "2", "--run-dir", str(tmp_path / "run"), "--cache", str(tmp_path / "c.sqlite"),
            "--no-progress",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "context memory" in result.output
