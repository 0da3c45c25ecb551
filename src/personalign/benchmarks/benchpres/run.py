"""Run or re-score BenchPreS from Python: the shared lifecycle (runs/lifecycle.py) with its spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from personalign.benchmarks.benchpres.spec import SPEC, defaults_for
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.llm import ModelFactory
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark

__all__ = ["RunSettings", "defaults_for", "rescore_benchpres", "run_benchpres"]


def run_benchpres(config: BenchPresConfig, settings: RunSettings, **kw: Any) -> RunResult:
    """Evaluate (or resume) a run and write its summary (keywords: data, factory; runs/lifecycle.py)."""
    return run_benchmark(SPEC, config, settings, **kw)


def rescore_benchpres(
    source: Path,
    settings: RunSettings,
    *,
    judge: str | None = None,
    completeness_judge: str | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a run's saved responses with other judges, into a new run directory.

    The subject is not called: every saved `generate` step is reused as it is.
    """
    models = {"judge": judge, "completeness_judge": completeness_judge}
    return rescore_benchmark(SPEC, source, settings, models=models, factory=factory)
