"""Run or re-score CUPID from Python: the shared lifecycle (runs/lifecycle.py) with CUPID's spec."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from personalign.benchmarks.cupid.spec import SPEC
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import ModelFactory
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark

__all__ = ["RunSettings", "rescore_cupid", "run_cupid"]


def run_cupid(
    config: CupidConfig,
    settings: RunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a CUPID run and write its summary."""
    return run_benchmark(SPEC, config, _with_types(settings), data=data, factory=factory)


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
    return rescore_benchmark(
        SPEC,
        source,
        settings,
        models={"judge": judge, "decomposer": decomposer, "matcher": matcher},
        options={"matcher_format": matcher_format},
        data=data,
        factory=factory,
    )


def _with_types(settings: RunSettings) -> RunSettings:
    """CUPID's selection always records its instance types (an empty list: all), as it always has."""
    types = tuple(settings.selection.get("instance_types") or ())
    return replace(settings, selection={**settings.selection, "instance_types": types})
