"""Run or re-score HiCUPID from Python: the shared lifecycle (runs/lifecycle.py) with HiCUPID's spec."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from personalign.benchmarks.hicupid.schema import TEST_SPLITS
from personalign.benchmarks.hicupid.spec import SPEC
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.llm import ModelFactory
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark

__all__ = ["HiCupidRunResult", "RunSettings", "hicupid_settings", "rescore_hicupid", "run_hicupid"]

HiCupidRunResult = RunResult


def hicupid_settings(
    *,
    splits: Iterable[str] = TEST_SPLITS,
    types: Iterable[str] = (),
    users: Iterable[int] = (),
    seed: int = SPEC.default_seed,
    **settings: Any,
) -> RunSettings:
    """Run settings with HiCUPID's selection (splits, question types, users) and its seed 42."""
    selection = {"splits": tuple(splits), "types": tuple(types), "users": tuple(users)}
    return RunSettings(selection=selection, seed=seed, **settings)


def run_hicupid(config: HiCupidConfig, settings: RunSettings, **kw: Any) -> RunResult:
    """Evaluate (or resume) a run and write its summary (keywords: data, factory; runs/lifecycle.py)."""
    return run_benchmark(SPEC, config, settings, **kw)


def rescore_hicupid(
    source: Path,
    settings: RunSettings,
    *,
    judge: str,
    judge_format: str | None = None,
    both_orders: bool | None = None,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a run's saved answers with another judge, into a new run directory (no subject calls)."""
    options = {"judge_format": judge_format, "both_orders": both_orders}
    return rescore_benchmark(
        SPEC, source, settings, models={"judge": judge}, options=options, data=data, factory=factory
    )
