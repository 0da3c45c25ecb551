"""The one run lifecycle of every benchmark: `run_benchmark` (evaluate or resume, the finished-run
check, manifest, summary) and `rescore_benchmark` (re-judge saved subject outputs), driven by a
`BenchmarkSpec` (runs/spec.py) that answers only what is the benchmark's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from personalign.errors import ConfigError
from personalign.llm.spec import EMBEDDED_DEFAULT, parse_model_spec
from personalign.runs import schema
from personalign.runs.manifest import environment, identity_hash, now
from personalign.runs.records import RunOutcome
from personalign.runs.spec import BenchmarkSpec, RunContext, Selection, selection_defaults
from personalign.runs.store import RunDir

if TYPE_CHECKING:
    from personalign.llm import CallCache, ModelFactory
    from personalign.runs.batching import BatchSession
    from personalign.runs.records import InstanceRecord, StepRecord
    from personalign.runs.runner import Evaluator

# The evaluation machinery (the model layer with sqlite3 and asyncio, the runner, the progress bar)
# is imported by the functions that evaluate: a re-run of a finished run returns from the finished-run
# check having read only its manifest and summary. Start-up speed is the only reason (no cycle:
# lint-imports checks the layers).

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
    # The benchmark's selection options (CUPID: instance_types; HiCUPID: splits, types, users).
    selection: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    cache_path: Path | None = None
    use_cache: bool = True
    max_cost_usd: float | None = None
    prices: Path | None = None
    progress: bool = True
    # Where the official prompt files are read for --protocol paper (their sha256 are pinned).
    protocol_dir: Path | None = None
    # --batch: model calls through the providers' batch APIs, in rounds (runs/batching.py);
    # batch_poll is the first polling interval in seconds (it grows x1.5 up to 120 s).
    batch: bool = False
    batch_poll: float = 5.0

    def selection_of(self) -> Selection:
        return Selection(self.limit, dict(self.selection))

    def context(self) -> RunContext:
        from personalign.llm.cache import default_cache_path

        cache = (self.cache_path or default_cache_path()) if self.use_cache else None
        return RunContext(seed=self.seed, cache_path=cache, protocol_dir=self.protocol_dir)


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
    import sqlite3

    from personalign.llm.cache import CallCache

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
    from personalign.llm import ModelFactory, PriceTable, UsageTracker, default_cache_path

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
    batch: BatchSession | None = None,
) -> RunOutcome:
    """Evaluate `items` into `run_dir` (skipping finished ones; in rounds with `batch`), then close
    the factory's backends."""
    from personalign.runs.progress import RunProgress
    from personalign.runs.runner import Runner

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
                return await (batch.run(runner, items) if batch else runner.run(items))
        return await (batch.run(runner, items) if batch else runner.run(items))
    finally:
        await factory.aclose()


# --- the one lifecycle --------------------------------------------------------------------------

AnySpec = BenchmarkSpec[Any, Any, Any]


def model_specs(spec: AnySpec, config: Any) -> dict[str, str]:
    """Role -> model spec string of a config (roles the config leaves unset, None, are absent);
    the spec's optional `models_of` hook when the config does not say it attribute by attribute."""
    models_of = getattr(spec, "models_of", None)
    if models_of is not None:
        return dict(models_of(config))
    return {r.name: s for r in spec.roles if (s := getattr(config, r.name, None)) is not None}


def work_items(spec: AnySpec, config: Any, items: Sequence[Any]) -> list[Any]:
    """The units of work for `items`: the spec's optional `expand` hook (a row per sample), else them."""
    expand = getattr(spec, "expand", None)
    return list(expand(config, items)) if expand is not None else list(items)


def run_dir_for(spec: AnySpec, config: Any, identity: dict[str, Any], settings: RunSettings) -> RunDir:
    if settings.run_dir is not None:
        return RunDir(settings.run_dir)
    subject = model_specs(spec, config)["subject"]
    return RunDir(
        default_run_dir(settings.runs_root, spec.name, subject, spec.run_dir_parts(config), identity)
    )


def build_manifest(
    spec: AnySpec, config: Any, dataset: Any, settings: RunSettings, factory: ModelFactory, texts: Any
) -> dict[str, Any]:
    """manifest.json: what defines the results (identity and its hash), how they were obtained
    (models with their options, data, selection, prompts, seed, budget, prices, environment)."""
    identity = spec.identity(config, dataset.source, dataset.sha256, settings.seed)
    extra = spec.manifest_extra(config, texts)
    env_extra = extra.pop("environment", {})
    specs = model_specs(spec, config)
    if (runtime := getattr(spec, "manifest_models", None)) is not None:
        extra.update(runtime(config, {role: factory.get(s) for role, s in specs.items()}))
    return {
        "schema_version": schema.SCHEMA_VERSION,
        "benchmark": spec.name,
        "protocol": config.protocol,
        "identity": identity,
        "identity_hash": identity_hash(identity),
        "config": config.to_record(),
        "models": {role: factory.get(s).spec.to_record() for role, s in specs.items()},
        "data": spec.data_record(dataset),
        "selection": settings.selection_of().to_record(),
        **extra,
        "seed": settings.seed,
        "max_cost_usd": settings.max_cost_usd,
        "prices": factory.prices.source,
        "environment": {**environment(), **env_extra},
    }


def write_summary(
    spec: AnySpec,
    run_dir: RunDir,
    config: Any,
    records: Mapping[str, InstanceRecord],
    status: str,
    factory: ModelFactory,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """summary.json: status, the run's description, the metrics, usage, step health, notices."""
    from personalign.runs.health import health_section

    specs = model_specs(spec, config)
    summary = {
        "schema_version": schema.SCHEMA_VERSION,
        "benchmark": spec.name,
        "protocol": config.protocol,
        "status": status,
        "finished": now(),
        **spec.summary_header(config),
        "models": {role: parse_model_spec(s).label for role, s in specs.items()},
        **spec.summarize(records.values(), config, seed),
        "usage": factory.tracker.to_record(),
        **health_section(records.values()),
        **({"notice": SMALL_MODEL_NOTICE} if EMBEDDED_DEFAULT in specs.values() else {}),
        **(extra or {}),
    }
    run_dir.write_summary(summary)
    return summary


def finished_run(spec: AnySpec, config: Any, settings: RunSettings, data: str | Path) -> RunResult | None:
    """The stored result when this exact run already finished, found without loading the data."""
    source, sha = spec.describe_data(data)
    if sha is None:
        return None
    identity = spec.identity(config, source, sha, settings.seed)
    return finished_result(
        run_dir_for(spec, config, identity, settings), identity, settings.selection_of().to_record()
    )


def run_benchmark(
    spec: AnySpec,
    config: Any,
    settings: RunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a run of `spec` and write its manifest, samples and summary.

    A finished run with the same identity and selection returns at once, without loading data or
    models; a run directory holding another identity is refused (runs/runner.py: locked_run).
    """
    settings = replace(settings, selection=selection_defaults(spec, settings.selection))
    finished = finished_run(spec, config, settings, data)
    if finished is not None:
        return finished
    from personalign.runs.heap import building_long_lived, long_lived_frozen

    texts = spec.protocol_texts(config, settings.context())
    with long_lived_frozen():  # the dataset is never garbage during the run: keep the GC off it
        with building_long_lived():
            dataset = spec.load(data)
        items = spec.select(dataset, settings.selection_of())
        if not items:
            raise ConfigError(f"no {spec.item_noun} selected (check the selection options and --limit)")
        items = work_items(spec, config, items)
        factory = factory or make_factory(settings)
        batch = _batch_session(settings)
        evaluator = _evaluator(spec, config, dataset, texts, settings, factory, batch)
        spec.check(evaluator, items)
        manifest = build_manifest(spec, config, dataset, settings, factory, texts)
        run_dir = run_dir_for(spec, config, manifest["identity"], settings)
        extra = {"selection": settings.selection_of().to_record()}
        return _evaluate(
            spec, config, evaluator, items, run_dir, manifest, factory, settings, extra, batch=batch
        )


def _evaluate(
    spec: AnySpec,
    config: Any,
    evaluator: Evaluator[Any],
    items: Sequence[Any],
    run_dir: RunDir,
    manifest: dict[str, Any],
    factory: ModelFactory,
    settings: RunSettings,
    extra: Mapping[str, Any],
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
    *,
    batch: BatchSession | None = None,
) -> RunResult:
    """Open (or resume) the locked run directory, evaluate the items, write summary.json."""
    import asyncio

    from personalign.runs.runner import locked_run

    if batch is not None:
        batch.journal_root = run_dir.path / "batch"
        manifest = {**manifest, "batch": True}
    with locked_run(run_dir, manifest):
        outcome = asyncio.run(
            execute(
                evaluator,
                items,
                run_dir,
                factory,
                concurrency=settings.concurrency,
                progress=settings.progress,
                label=spec.name,
                previous_steps=previous_steps,
                batch=batch,
            )
        )
        records, status = outcome.records, outcome.status
        if batch is not None:
            extra = {**extra, "batch": batch.record()}
        summary = write_summary(spec, run_dir, config, records, status, factory, settings.seed, extra)
    return RunResult(run_dir, outcome, summary)


def _evaluator(
    spec: AnySpec,
    config: Any,
    dataset: Any,
    texts: Any,
    settings: RunSettings,
    factory: ModelFactory,
    batch: BatchSession | None = None,
) -> Evaluator[Any]:
    models = {role: factory.get(s) for role, s in model_specs(spec, config).items()}
    if batch is not None:
        models = batch.wrap(models)
    return spec.evaluator(config, models, dataset, texts, settings.context())


def _batch_session(settings: RunSettings) -> BatchSession | None:
    """With --batch, the session that runs the evaluation in rounds (runs/batching.py)."""
    if not settings.batch:
        return None
    from personalign.llm.batch import PollPolicy
    from personalign.runs.batching import BatchSession

    return BatchSession(poll=PollPolicy(initial=settings.batch_poll))


def rescore_benchmark(
    spec: AnySpec,
    source: Path,
    settings: RunSettings,
    *,
    models: Mapping[str, str | None] | None = None,
    options: Mapping[str, Any] | None = None,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a run's saved subject outputs with other judges or judge options, into a new run
    directory: the steps `spec.kept_on_rescore` names are reused, every other step runs again."""
    old_dir = RunDir(source)
    manifest = old_dir.read_manifest()
    if schema.benchmark_of(manifest) != spec.name:
        raise ConfigError(
            f"{source} is not a {spec.name} run (its manifest says {manifest.get('benchmark')!r})"
        )
    old = spec.config_from_record(manifest["config"])
    given = {k: v for k, v in (models or {}).items() if v is not None}
    config = spec.rescore_config(old, given, {k: v for k, v in (options or {}).items() if v is not None})
    source_data = data or manifest["data"]["source"]
    if str(source_data).startswith("fixture:"):
        source_data = "fixture"
    dataset = spec.load(source_data)
    if manifest["data"].get("sha256") and dataset.sha256 != manifest["data"]["sha256"]:
        raise ConfigError(f"the data at {source_data} changed since {source} was run (sha256 differs)")
    old_records = old_dir.records()
    # the old run's seed and selection: a re-scored run describes the same items as its source
    settings = replace(settings, seed=int(manifest.get("seed", settings.seed)))
    factory = factory or make_factory(settings)
    texts = spec.protocol_texts(config, settings.context())
    batch = _batch_session(settings)
    evaluator = _evaluator(spec, config, dataset, texts, settings, factory, batch)
    every = work_items(spec, config, spec.items(dataset))
    items = [item for item in every if evaluator.instance_id(item) in old_records]
    new_manifest = build_manifest(spec, config, dataset, settings, factory, texts)
    new_manifest["selection"] = manifest.get("selection")
    new_manifest["rescored_from"] = {"run_dir": str(source), "identity_hash": manifest.get("identity_hash")}
    run_dir = RunDir(settings.run_dir or Path(f"{source}-rescored-{new_manifest['identity_hash'][:8]}"))

    def kept(instance_id: str) -> Mapping[str, StepRecord]:
        steps = old_records[instance_id].steps
        return {k: v for k, v in steps.items() if spec.kept_on_rescore(k)}

    extra = {"rescored_from": str(source)}
    return _evaluate(
        spec, config, evaluator, items, run_dir, new_manifest, factory, settings, extra, kept, batch=batch
    )
