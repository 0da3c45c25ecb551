"""What every benchmark run shares: the model factory, the run directory's name, the finished-run
check, and executing an evaluator over its items with progress and resume.

Each benchmark's ``*_run.py`` keeps only what is its own: selection, identity, manifest, summary.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from personalign.errors import ConfigError
from personalign.llm import CallCache, ModelFactory, PriceTable, UsageTracker, default_cache_path
from personalign.llm.spec import parse_model_spec
from personalign.runs.manifest import identity_hash
from personalign.runs.progress import RunProgress
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.runner import Evaluator, Runner, RunOutcome
from personalign.runs.store import RunDir

T = TypeVar("T")

SMALL_MODEL_NOTICE = (
    "Numbers from the bundled 135M-parameter model demonstrate the pipeline, not any model's "
    "ability; use --model/--judge with real models for meaningful results."
)


@dataclass(frozen=True)
class RunSettings:
    """How to run (not what): none of these change the results."""

    run_dir: Path | None = None
    runs_root: Path = Path("runs")
    concurrency: int = 8
    limit: int | None = None
    instance_types: tuple[str, ...] = ()
    seed: int = 0
    cache_path: Path | None = None
    use_cache: bool = True
    max_cost_usd: float | None = None
    prices: Path | None = None
    progress: bool = True
    # Where the official prompt files are read for --protocol paper (their sha256 are pinned).
    protocol_dir: Path | None = None


@dataclass
class RunResult:
    run_dir: RunDir
    outcome: RunOutcome
    summary: dict[str, Any]


class CacheSettings(Protocol):
    """The part of a benchmark's run settings that builds the model factory."""

    @property
    def cache_path(self) -> Path | None: ...
    @property
    def use_cache(self) -> bool: ...
    @property
    def max_cost_usd(self) -> float | None: ...
    @property
    def prices(self) -> Path | None: ...


def open_cache(path: Path) -> CallCache:
    """The call cache at `path`; a folder, a file that is not SQLite or an unwritable place is a
    `ConfigError` naming the path and what to do."""
    if path.is_dir():
        raise ConfigError(f"--cache {path} is a directory; give a file path, e.g. {path / 'calls.sqlite'}")
    try:
        return CallCache(path)
    except (sqlite3.DatabaseError, OSError) as exc:
        raise ConfigError(
            f"--cache {path} cannot be used as the call cache ({exc}); point --cache at a new file, "
            "or at a cache personalign wrote"
        ) from None


def make_factory(settings: CacheSettings) -> ModelFactory:
    """One factory per run: the shared call cache, usage tracker (with the budget) and price table."""
    cache = open_cache(settings.cache_path or default_cache_path()) if settings.use_cache else None
    return ModelFactory(
        cache=cache,
        tracker=UsageTracker(max_cost_usd=settings.max_cost_usd),
        prices=PriceTable.load(settings.prices),
    )


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def default_run_dir(
    root: Path, benchmark: str, subject: str, parts: Sequence[str], identity: dict[str, Any]
) -> Path:
    """``root/benchmark/<subject>__<part>__...__<identity hash>``: readable, and unique per identity."""
    name = "__".join([slug(parse_model_spec(subject).label.replace("/", "-")), *parts])
    return root / benchmark / f"{name}__{identity_hash(identity)[:8]}"


def finished_result(run_dir: RunDir, identity: dict[str, Any], selection: Any) -> RunResult | None:
    """The stored result when this exact run (identity and selection) already finished cleanly.

    Lets a re-run of a finished evaluation return at once, without loading data or models.
    """
    if not run_dir.exists():
        return None
    manifest, summary = run_dir.read_manifest(), run_dir.read_summary()
    if (
        summary is None
        or summary.get("status") != "complete"
        or manifest.get("identity") != identity
        or summary.get("selection") != selection
    ):
        return None
    return RunResult(run_dir, RunOutcome("complete", 0, summary["n_instances"]), summary)


@dataclass
class Reusing(Generic[T]):
    """An evaluator given another run's saved steps to reuse (re-scoring without subject calls)."""

    evaluator: Evaluator[T]
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None]

    def instance_id(self, item: T) -> str:
        return self.evaluator.instance_id(item)

    async def evaluate(self, item: T, previous: Mapping[str, StepRecord] | None = None) -> InstanceRecord:
        return await self.evaluator.evaluate(item, previous or self.previous_steps(self.instance_id(item)))


async def execute(
    evaluator: Evaluator[T],
    items: Sequence[T],
    run_dir: RunDir,
    factory: ModelFactory,
    *,
    concurrency: int,
    progress: bool,
    label: str,
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
) -> RunOutcome:
    """Evaluate `items` into `run_dir` (skipping finished ones), then close the factory's backends."""
    bar = RunProgress(factory.tracker, total=len(items), label=label) if progress else None
    runner: Runner[T] = Runner(
        Reusing(evaluator, previous_steps) if previous_steps else evaluator,
        run_dir,
        factory.tracker,
        concurrency=concurrency,
        on_done=(lambda _record: bar.advance()) if bar else None,
        on_skipped=bar.advance_by if bar else None,
    )
    try:
        if bar:
            with bar:
                return await runner.run(items)
        return await runner.run(items)
    finally:
        await factory.aclose()
