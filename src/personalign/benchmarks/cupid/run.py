"""Run or re-score CUPID from Python: the shared lifecycle (runs/lifecycle.py) with CUPID's spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.spec import SPEC
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import ModelFactory
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark

__all__ = ["RunSettings", "rescore_cupid", "run_cupid"]


def run_cupid(config: CupidConfig, settings: RunSettings, **kw: Any) -> RunResult:
    """Evaluate (or resume) a run and write its summary (keywords: data, factory; runs/lifecycle.py)."""
    return run_benchmark(SPEC, config, settings, **kw)


def rescore_cupid(
    source: Path,
    settings: RunSettings,
    *,
    judge: str | None = None,
    decomposer: str | None = None,
    matcher: str | None = None,
    matcher_format: str | None = None,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a finished run's saved subject outputs with other judges, into a new run directory."""
    models = {"judge": judge, "decomposer": decomposer, "matcher": matcher}
    options = {"matcher_format": matcher_format}
    return rescore_benchmark(
        SPEC, source, settings, models=models, options=options, data=data, factory=factory
    )
