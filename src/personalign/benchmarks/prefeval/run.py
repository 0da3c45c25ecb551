"""Run or re-score PrefEval from Python: the shared lifecycle (runs/lifecycle.py) with PrefEval's spec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from personalign.benchmarks.prefeval.spec import SPEC
from personalign.benchmarks.prefeval.steps import PrefEvalConfig
from personalign.llm import ModelFactory
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark

__all__ = ["RunSettings", "rescore_prefeval", "run_prefeval"]


def run_prefeval(
    config: PrefEvalConfig,
    settings: RunSettings,
    *,
    turns: Sequence[int] | None = None,
    forms: Sequence[str] | None = None,
    topics: Sequence[str] | None = None,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a PrefEval run and write its summary. `turns`, `forms` and `topics`
    choose the items (they join `settings.selection`; None leaves it as it is)."""
    chosen = {
        k: tuple(v) for k, v in (("turns", turns), ("forms", forms), ("topics", topics)) if v is not None
    }
    settings = replace(settings, selection={**settings.selection, **chosen})
    return run_benchmark(SPEC, config, settings, data=data, factory=factory)


def rescore_prefeval(
    source: Path,
    settings: RunSettings,
    *,
    judge: str | None = None,
    judge_max_tokens: int | None = None,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a generation run's saved responses with another judge, into a new run directory."""
    return rescore_benchmark(
        SPEC,
        source,
        settings,
        models={"judge": judge},
        options={"judge_max_tokens": judge_max_tokens},
        data=data,
        factory=factory,
    )
