"""Run PrefEval end to end: load rows, build models, open (or resume) the run, evaluate, summarize."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.prefeval.data import LoadedPrefEval, PrefEvalRow, load_prefeval
from personalign.benchmarks.prefeval.protocol import PaperBudgets, Texts, load_paper, own_texts
from personalign.benchmarks.prefeval.steps import (
    SUBJECT_STEPS,
    PrefEvalBenchmark,
    PrefEvalConfig,
    PrefEvalItem,
    PrefEvalModels,
    budgets_for,
    expand,
    summarize,
)
from personalign.errors import ConfigError
from personalign.llm import ModelFactory
from personalign.llm.spec import EMBEDDED_DEFAULT, parse_model_spec
from personalign.runs import lifecycle
from personalign.runs.health import health_section
from personalign.runs.lifecycle import (
    SMALL_MODEL_NOTICE,
    RunResult,
    RunSettings,
    execute,
    finished_result,
    make_factory,
)
from personalign.runs.manifest import environment, identity_hash, now
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.runner import RunOutcome, locked_run
from personalign.runs.store import RunDir

BENCHMARK = "prefeval"


def load_data(config: PrefEvalConfig, data: str | Path) -> LoadedPrefEval:
    return load_prefeval(
        data,
        forms=config.forms,
        topics=config.topics or None,
        need_mcq=config.task == "mcq",
        need_distractors=max(config.turns) > 0,
    )


def load_texts(config: PrefEvalConfig, protocol_dir: Path | None) -> tuple[Texts, PaperBudgets | None]:
    if config.protocol == "paper":
        return load_paper(protocol_dir)
    return own_texts(config.max_words), None


def select(rows: Sequence[PrefEvalRow], settings: RunSettings) -> list[PrefEvalRow]:
    return list(rows[: settings.limit]) if settings.limit is not None else list(rows)


def prefeval_identity(
    config: PrefEvalConfig, data: LoadedPrefEval, texts: Texts, seed: int
) -> dict[str, Any]:
    models = {role: parse_model_spec(spec).identity for role, spec in config.model_specs().items()}
    cfg = {k: v for k, v in config.to_record().items() if k not in ("subject", "judge")}
    return {
        "benchmark": BENCHMARK,
        "config": cfg,
        "models": models,
        "data": {"source": data.source, "sha256": data.sha256},
        "prompts": dict(texts.sha256),
        "seed": seed,
    }


def build_manifest(
    config: PrefEvalConfig, data: LoadedPrefEval, texts: Texts, settings: RunSettings, factory: ModelFactory
) -> dict[str, Any]:
    identity = prefeval_identity(config, data, texts, settings.seed)
    return {
        "benchmark": BENCHMARK,
        "identity": identity,
        "identity_hash": identity_hash(identity),
        "config": config.to_record(),
        "condition": config.condition,
        "protocol": config.protocol,
        "models": {role: factory.get(spec).spec.to_record() for role, spec in config.model_specs().items()},
        "data": {
            "source": data.source,
            "sha256": data.sha256,
            "n_rows": len(data.rows),
            "files": dict(sorted(data.files.items())),
        },
        "selection": {"limit": settings.limit},
        "prompts": dict(texts.sha256),
        **({"upstream": dict(texts.source)} if texts.source else {}),
        "seed": settings.seed,
        "max_cost_usd": settings.max_cost_usd,
        "prices": factory.prices.source,
        "environment": environment(),
    }


def write_summary(
    run_dir: RunDir,
    config: PrefEvalConfig,
    records: Mapping[str, InstanceRecord],
    status: str,
    factory: ModelFactory,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    uses_default = EMBEDDED_DEFAULT in {parse_model_spec(s).label for s in config.model_specs().values()}
    summary = {
        "benchmark": BENCHMARK,
        "status": status,
        "finished": now(),
        "condition": config.condition,
        "task": config.task,
        "setting": config.setting,
        "protocol": config.protocol,
        "turns": list(config.turns),
        "models": {role: parse_model_spec(spec).label for role, spec in config.model_specs().items()},
        **summarize(records.values(), config.task, seed=seed),
        "usage": factory.tracker.to_record(),
        **health_section(records.values()),
        **({"notice": SMALL_MODEL_NOTICE} if uses_default else {}),
        **(extra or {}),
    }
    run_dir.write_summary(summary)
    return summary


async def _execute(
    config: PrefEvalConfig,
    data: LoadedPrefEval,
    texts: Texts,
    budgets: PaperBudgets | None,
    items: Sequence[PrefEvalItem],
    run_dir: RunDir,
    factory: ModelFactory,
    settings: RunSettings,
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
) -> RunOutcome:
    models = PrefEvalModels(
        subject=factory.get(config.subject),
        judge=factory.get(config.judge) if config.task == "generation" else None,
    )
    benchmark = PrefEvalBenchmark(
        config, models, data, texts, budgets_for(config, budgets), seed=settings.seed
    )
    return await execute(
        benchmark,
        items,
        run_dir,
        factory,
        concurrency=settings.concurrency,
        progress=settings.progress,
        label=BENCHMARK,
        previous_steps=previous_steps,
    )


def default_run_dir(config: PrefEvalConfig, identity: dict[str, Any], root: Path) -> Path:
    turns = "t" + "-".join(str(t) for t in sorted(config.turns))
    return lifecycle.default_run_dir(root, BENCHMARK, config.subject, [config.condition, turns], identity)


def run_prefeval(
    config: PrefEvalConfig,
    settings: RunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a PrefEval run and write its summary."""
    dataset = load_data(config, data)
    texts, budgets = load_texts(config, settings.protocol_dir)
    identity = prefeval_identity(config, dataset, texts, settings.seed)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, identity, settings.runs_root))
    finished = finished_result(run_dir, identity, {"limit": settings.limit})
    if finished is not None:
        return finished
    rows = select(dataset.rows, settings)
    if not rows:
        raise ConfigError("no rows selected (check --limit, --form and --topic)")
    factory = factory or make_factory(settings)
    manifest = build_manifest(config, dataset, texts, settings, factory)
    with locked_run(run_dir, manifest):
        items = expand(rows, config.turns)
        outcome = asyncio.run(_execute(config, dataset, texts, budgets, items, run_dir, factory, settings))
        summary = write_summary(
            run_dir,
            config,
            outcome.records,
            outcome.status,
            factory,
            settings.seed,
            {"selection": {"limit": settings.limit}},
        )
    return RunResult(run_dir, outcome, summary)


def rescore_prefeval(
    source: Path,
    settings: RunSettings,
    *,
    judge: str,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> RunResult:
    """Re-judge a generation run's saved responses with another judge, into a new run directory.

    The subject is not called: every saved subject step is reused as it is.
    """
    old_dir = RunDir(source)
    manifest = old_dir.read_manifest()
    if manifest.get("benchmark") != BENCHMARK:
        raise ConfigError(f"{source} is not a PrefEval run")
    old = PrefEvalConfig.from_record(manifest["config"])
    if old.task != "generation":
        raise ConfigError(f"{source} is an MCQ run: it has no judge to replace")
    config = replace(old, judge=judge)
    source_data = data or manifest["data"]["source"]
    if str(source_data).startswith("fixture:"):
        source_data = "fixture"
    elif str(source_data).startswith("upstream:"):
        source_data = "upstream"
    dataset = load_data(config, source_data)
    if manifest["data"].get("sha256") and dataset.sha256 != manifest["data"]["sha256"]:
        raise ConfigError(f"the data at {source_data} changed since {source} was run (sha256 differs)")
    texts, budgets = load_texts(config, settings.protocol_dir)
    old_records = old_dir.records()
    items = [item for item in expand(dataset.rows, config.turns) if item.id in old_records]
    factory = factory or make_factory(settings)
    new_manifest = build_manifest(config, dataset, texts, settings, factory)
    new_manifest["rescored_from"] = {"run_dir": str(source), "identity_hash": manifest.get("identity_hash")}
    run_dir = RunDir(settings.run_dir or Path(f"{source}-rescored-{new_manifest['identity_hash'][:8]}"))

    def kept(item_id: str) -> Mapping[str, StepRecord]:
        return {k: v for k, v in old_records[item_id].steps.items() if k in SUBJECT_STEPS}

    with locked_run(run_dir, new_manifest):
        outcome = asyncio.run(
            _execute(config, dataset, texts, budgets, items, run_dir, factory, settings, previous_steps=kept)
        )
        summary = write_summary(
            run_dir,
            config,
            outcome.records,
            outcome.status,
            factory,
            settings.seed,
            {"rescored_from": str(source)},
        )
    return RunResult(run_dir, outcome, summary)
