"""Run CUPID end to end: load data, build models, open (or resume) the run, evaluate, summarize."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.data import LoadedDataset, describe_source, load_cupid
from personalign.benchmarks.cupid.protocol import CupidPaperPrompts, load_paper_prompts
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.benchmarks.cupid.steps import (
    SUBJECT_STEPS,
    CupidBenchmark,
    CupidConfig,
    CupidModels,
    prompt_hashes,
    summarize,
)
from personalign.errors import ConfigError
from personalign.llm import ModelFactory
from personalign.llm.spec import EMBEDDED_DEFAULT, parse_model_spec
from personalign.runs import lifecycle
from personalign.runs.health import health_section
from personalign.runs.heap import building_long_lived, long_lived_frozen
from personalign.runs.lifecycle import SMALL_MODEL_NOTICE, RunResult, execute, finished_result, make_factory
from personalign.runs.lifecycle import RunSettings as RunSettings  # re-exported: callers import it from here
from personalign.runs.manifest import environment, identity_hash, now
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.runner import RunOutcome, locked_run
from personalign.runs.store import RunDir


def _selection(settings: RunSettings) -> dict[str, Any]:
    return {"limit": settings.limit, "instance_types": list(settings.instance_types)}


def select(instances: Sequence[CupidInstance], settings: RunSettings) -> list[CupidInstance]:
    chosen = [
        i for i in instances if not settings.instance_types or i.instance_type in settings.instance_types
    ]
    return chosen[: settings.limit] if settings.limit is not None else chosen


def cupid_identity(config: CupidConfig, data: LoadedDataset, seed: int) -> dict[str, Any]:
    return cupid_identity_from(config, data.source, data.sha256, seed)


def cupid_identity_from(config: CupidConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
    models = {
        role: parse_model_spec(getattr(config, role)).label
        for role in ("subject", "decomposer", "matcher", "judge")
    }
    cfg = {k: v for k, v in config.to_record().items() if k not in models}
    return {
        "benchmark": "cupid",
        "config": cfg,
        "models": models,
        "data": {"source": source, "sha256": sha256},
        "seed": seed,
    }


def paper_prompts_for(config: CupidConfig, settings: RunSettings) -> CupidPaperPrompts | None:
    """The verified official prompts when the run uses the paper protocol, else None."""
    return load_paper_prompts(settings.protocol_dir) if config.protocol == "paper" else None


def build_manifest(
    config: CupidConfig,
    data: LoadedDataset,
    settings: RunSettings,
    factory: ModelFactory,
    paper: CupidPaperPrompts | None = None,
) -> dict[str, Any]:
    identity = cupid_identity(config, data, settings.seed)
    return {
        "benchmark": "cupid",
        "protocol": config.protocol,
        "identity": identity,
        "identity_hash": identity_hash(identity),
        "config": config.to_record(),
        "models": {
            role: factory.get(getattr(config, role)).spec.to_record()
            for role in ("subject", "decomposer", "matcher", "judge")
        },
        "data": {"source": data.source, "sha256": data.sha256, "n_instances": len(data.instances)},
        "selection": {"limit": settings.limit, "instance_types": list(settings.instance_types)},
        "prompts": paper.hashes() if paper is not None else prompt_hashes(),
        **({"upstream": dict(paper.source)} if paper is not None else {}),
        "seed": settings.seed,
        "max_cost_usd": settings.max_cost_usd,
        "prices": factory.prices.source,
        "environment": environment(),
    }


def default_run_dir(config: CupidConfig, identity: dict[str, Any], root: Path) -> Path:
    parts = [config.context, config.task] + (["paper"] if config.protocol == "paper" else [])
    return lifecycle.default_run_dir(root, "cupid", config.subject, parts, identity)


def write_summary(
    run_dir: RunDir,
    config: CupidConfig,
    records: Mapping[str, InstanceRecord],
    status: str,
    factory: ModelFactory,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metrics = summarize(records.values(), config.tasks, seed=seed)
    uses_default = EMBEDDED_DEFAULT in {config.subject, config.judge, config.matcher, config.decomposer}
    summary = {
        "benchmark": "cupid",
        "protocol": config.protocol,
        "status": status,
        "finished": now(),
        "task": config.task,
        "context": config.context,
        "models": {
            r: parse_model_spec(getattr(config, r)).label
            for r in ("subject", "decomposer", "matcher", "judge")
        },
        **metrics,
        "usage": factory.tracker.to_record(),
        **health_section(records.values()),
        **({"notice": SMALL_MODEL_NOTICE} if uses_default else {}),
        **(extra or {}),
    }
    run_dir.write_summary(summary)
    return summary


async def _execute(
    config: CupidConfig,
    instances: Sequence[CupidInstance],
    run_dir: RunDir,
    factory: ModelFactory,
    settings: RunSettings,
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
    paper: CupidPaperPrompts | None = None,
) -> RunOutcome:
    models = CupidModels(
        subject=factory.get(config.subject),
        decomposer=factory.get(config.decomposer),
        matcher=factory.get(config.matcher),
        judge=factory.get(config.judge),
    )
    return await execute(
        CupidBenchmark(config, models, paper),
        instances,
        run_dir,
        factory,
        concurrency=settings.concurrency,
        progress=settings.progress,
        label="cupid",
        previous_steps=previous_steps,
    )


def _finished_run(config: CupidConfig, settings: RunSettings, data: str | Path) -> RunResult | None:
    source, sha = describe_source(data)
    if sha is None:
        return None
    identity = cupid_identity_from(config, source, sha, settings.seed)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, identity, settings.runs_root))
    return finished_result(run_dir, identity, _selection(settings))


def run_cupid(
    config: CupidConfig,
    settings: RunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a CUPID run and write its summary."""
    finished = _finished_run(config, settings, data)
    if finished is not None:
        return finished
    paper = paper_prompts_for(config, settings)
    with ExitStack() as held:
        with long_lived_frozen():  # the dataset is never garbage during the run: keep the GC off it
            with building_long_lived():
                dataset = load_cupid(data)
            instances = select(dataset.instances, settings)
            if not instances:
                raise ConfigError("no instances selected (check --instance-type and --limit)")
            factory = factory or make_factory(settings)
            manifest = build_manifest(config, dataset, settings, factory, paper)
            run_dir = RunDir(
                settings.run_dir or default_run_dir(config, manifest["identity"], settings.runs_root)
            )
            held.enter_context(locked_run(run_dir, manifest))
            outcome = asyncio.run(_execute(config, instances, run_dir, factory, settings, paper=paper))
        summary = write_summary(
            run_dir,
            config,
            outcome.records,
            outcome.status,
            factory,
            settings.seed,
            {"selection": _selection(settings)},
        )
    return RunResult(run_dir, outcome, summary)


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
    old_dir = RunDir(source)
    manifest = old_dir.read_manifest()
    if manifest.get("benchmark") != "cupid":
        raise ConfigError(f"{source} is not a CUPID run")
    old = CupidConfig(**manifest["config"])
    changes: dict[str, Any] = {}
    if judge:
        changes.update(judge=judge, decomposer=decomposer or judge, matcher=matcher or judge)
    if decomposer:
        changes["decomposer"] = decomposer
    if matcher:
        changes["matcher"] = matcher
    if matcher_format:
        changes["matcher_format"] = matcher_format
    if not changes:
        raise ConfigError("rescore needs at least one of --judge, --decomposer, --matcher, --matcher-format")
    config = replace(old, **changes)
    source_data = data or manifest["data"]["source"]
    if str(source_data).startswith("fixture:"):
        source_data = "fixture"
    dataset = load_cupid(source_data)
    if manifest["data"].get("sha256") and dataset.sha256 != manifest["data"]["sha256"]:
        raise ConfigError(f"the data at {source_data} changed since {source} was run (sha256 differs)")
    old_records = old_dir.records()
    instances = [i for i in dataset.instances if i.id in old_records]
    paper = paper_prompts_for(config, settings)
    factory = factory or make_factory(settings)
    new_manifest = build_manifest(config, dataset, settings, factory, paper)
    new_manifest["rescored_from"] = {"run_dir": str(source), "identity_hash": manifest.get("identity_hash")}
    target = settings.run_dir or Path(f"{source}-rescored-{new_manifest['identity_hash'][:8]}")
    run_dir = RunDir(target)

    def kept(instance_id: str) -> Mapping[str, StepRecord]:
        steps = old_records[instance_id].steps
        return {k: v for k, v in steps.items() if k in SUBJECT_STEPS or k.startswith("summary/")}

    with locked_run(run_dir, new_manifest):
        outcome = asyncio.run(
            _execute(config, instances, run_dir, factory, settings, previous_steps=kept, paper=paper)
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
