"""Run BenchPreS end to end: load rows, build models, open (or resume) the run, evaluate, summarize."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.benchpres.data import LoadedBenchPres, describe_source, load_benchpres
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.benchmarks.benchpres.steps import (
    JUDGE_MAX_TOKENS,
    SUBJECT_MAX_TOKENS,
    SUBJECT_STEPS,
    BenchPresBenchmark,
    BenchPresConfig,
    BenchPresItem,
    BenchPresModels,
    expand,
    prompt_hashes,
    summarize,
)
from personalign.errors import ConfigError, ModelCallError
from personalign.llm import GenerateConfig, ModelFactory
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

ROLES = ("subject", "judge", "completeness_judge")

# The embedded 135M model writes ~20 tokens/s on 2 cores; these keep its default run on the
# 24-row fixture to a few minutes. Real models get the paper's protocol (3 samples) and budgets
# with room for reasoning (benchmarks.benchpres.SUBJECT_MAX_TOKENS / JUDGE_MAX_TOKENS).
EMBEDDED_SAMPLES = 1
EMBEDDED_MAX_TOKENS = 160
EMBEDDED_JUDGE_MAX_TOKENS = 256
DEFAULT_SAMPLES = 3
DEFAULT_MAX_TOKENS = SUBJECT_MAX_TOKENS


@dataclass(frozen=True)
class Defaults:
    samples: int
    max_tokens: int
    judge_max_tokens: int = JUDGE_MAX_TOKENS


def defaults_for(subject: str, judges: Sequence[str] = ()) -> Defaults:
    """Samples, subject and judge max tokens when the user gives none (see docs/benchpres.md):
    lower for the embedded model, which never reasons, so demo runs stay fast."""
    embedded = parse_model_spec(subject).label == EMBEDDED_DEFAULT
    judges_embedded = bool(judges) and all(parse_model_spec(j).label == EMBEDDED_DEFAULT for j in judges)
    judge_tokens = EMBEDDED_JUDGE_MAX_TOKENS if judges_embedded else JUDGE_MAX_TOKENS
    if embedded:
        return Defaults(EMBEDDED_SAMPLES, EMBEDDED_MAX_TOKENS, judge_tokens)
    return Defaults(DEFAULT_SAMPLES, DEFAULT_MAX_TOKENS, judge_tokens)


def select(rows: Sequence[BenchPresRow], settings: RunSettings) -> list[BenchPresRow]:
    return list(rows[: settings.limit]) if settings.limit is not None else list(rows)


def benchpres_identity(config: BenchPresConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
    # `identity`: the label, plus options that change the output (?reasoning_effort=high)
    models = {role: parse_model_spec(spec).identity for role, spec in config.model_specs().items()}
    cfg = {k: v for k, v in config.to_record().items() if k not in models}
    return {
        "benchmark": "benchpres",
        "config": cfg,
        "models": models,
        "data": {"source": source, "sha256": sha256},
        "seed": seed,
    }


def build_manifest(
    config: BenchPresConfig, data: LoadedBenchPres, settings: RunSettings, factory: ModelFactory
) -> dict[str, Any]:
    identity = benchpres_identity(config, data.source, data.sha256, settings.seed)
    subject = factory.get(config.subject)
    return {
        "benchmark": "benchpres",
        "identity": identity,
        "identity_hash": identity_hash(identity),
        "config": config.to_record(),
        "condition": config.condition,
        "protocol": config.protocol,
        "models": {role: factory.get(spec).spec.to_record() for role, spec in config.model_specs().items()},
        "reasoning_control": bool(getattr(subject.backend, "supports_reasoning", False)),
        "data": {"source": data.source, "sha256": data.sha256, "n_rows": len(data.rows)},
        "selection": {"limit": settings.limit},
        "prompts": prompt_hashes(),
        "seed": settings.seed,
        "max_cost_usd": settings.max_cost_usd,
        "prices": factory.prices.source,
        "environment": environment(),
    }


def default_run_dir(config: BenchPresConfig, identity: dict[str, Any], root: Path) -> Path:
    return lifecycle.default_run_dir(root, "benchpres", config.subject, [config.condition], identity)


def check_reasoning(config: BenchPresConfig, factory: ModelFactory) -> None:
    """Refuse to label a run 'reasoning on' when the subject's backend cannot turn it on, and
    a run 'reasoning off' whose requests the model's capability row refuses (o-series models
    cannot turn reasoning off): better at the start than as an error on every response."""
    if config.reasoning == "default":
        return
    backend = factory.get(config.subject).backend
    if config.reasoning == "on" and not getattr(backend, "supports_reasoning", False):
        raise ConfigError(
            f"--reasoning on: the backend of {config.subject} cannot turn reasoning on "
            "(local models cannot; for OpenAI-compatible servers set ?reasoning_param=...)"
        )
    payload = getattr(backend, "payload", None)
    if callable(payload):
        try:
            payload([], GenerateConfig(reasoning=config.reasoning == "on"))
        except ModelCallError as exc:
            raise ConfigError(f"--reasoning {config.reasoning}: {exc}") from None


def write_summary(
    run_dir: RunDir,
    config: BenchPresConfig,
    records: Mapping[str, InstanceRecord],
    status: str,
    factory: ModelFactory,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metrics = summarize(records.values(), seed=seed)
    uses_default = EMBEDDED_DEFAULT in {config.subject, config.judge, config.completeness_judge}
    summary = {
        "benchmark": "benchpres",
        "status": status,
        "finished": now(),
        "condition": config.condition,
        "protocol": config.protocol,
        "mitigation": config.mitigation,
        "reasoning": config.reasoning,
        "context": config.context,
        "samples": config.samples,
        "temperature": config.temperature,
        "models": {role: parse_model_spec(spec).label for role, spec in config.model_specs().items()},
        **metrics,
        "usage": factory.tracker.to_record(),
        **health_section(records.values()),
        **({"notice": SMALL_MODEL_NOTICE} if uses_default else {}),
        **(extra or {}),
    }
    run_dir.write_summary(summary)
    return summary


async def _execute(
    config: BenchPresConfig,
    items: Sequence[BenchPresItem],
    run_dir: RunDir,
    factory: ModelFactory,
    settings: RunSettings,
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
) -> RunOutcome:
    models = BenchPresModels(
        subject=factory.get(config.subject),
        judge=factory.get(config.judge),
        completeness_judge=factory.get(config.completeness_judge),
        memory_judge=factory.get(config.selection_judge) if config.selection_judge else None,
    )
    return await execute(
        BenchPresBenchmark(config, models),
        items,
        run_dir,
        factory,
        concurrency=settings.concurrency,
        progress=settings.progress,
        label="benchpres",
        previous_steps=previous_steps,
    )


def _finished_run(config: BenchPresConfig, settings: RunSettings, data: str | Path) -> RunResult | None:
    source, sha = describe_source(data)
    if sha is None:
        return None
    identity = benchpres_identity(config, source, sha, settings.seed)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, identity, settings.runs_root))
    return finished_result(run_dir, identity, {"limit": settings.limit})


def run_benchpres(
    config: BenchPresConfig,
    settings: RunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> RunResult:
    """Evaluate (or resume) a BenchPreS run and write its summary."""
    finished = _finished_run(config, settings, data)
    if finished is not None:
        return finished
    dataset = load_benchpres(data)
    rows = select(dataset.rows, settings)
    if not rows:
        raise ConfigError("no rows selected (check --limit)")
    factory = factory or make_factory(settings)
    check_reasoning(config, factory)
    manifest = build_manifest(config, dataset, settings, factory)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, manifest["identity"], settings.runs_root))
    with locked_run(run_dir, manifest):
        items = expand(rows, config.samples)
        outcome = asyncio.run(_execute(config, items, run_dir, factory, settings))
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
    old_dir = RunDir(source)
    manifest = old_dir.read_manifest()
    if manifest.get("benchmark") != "benchpres":
        raise ConfigError(f"{source} is not a BenchPreS run")
    if not judge and not completeness_judge:
        raise ConfigError("rescore needs --judge and/or --completeness-judge")
    old = BenchPresConfig(**manifest["config"])
    config = replace(
        old,
        judge=judge or old.judge,
        completeness_judge=completeness_judge or judge or old.completeness_judge,
        # the context step (the memory engine's decisions) is reused, so its judge stays the old one
        memory_judge=old.selection_judge,
    )
    source_data = manifest["data"]["source"]
    if str(source_data).startswith("fixture:"):
        source_data = "fixture"
    dataset = load_benchpres(source_data)
    if manifest["data"].get("sha256") and dataset.sha256 != manifest["data"]["sha256"]:
        raise ConfigError(f"the data at {source_data} changed since {source} was run (sha256 differs)")
    old_records = old_dir.records()
    items = [item for item in expand(dataset.rows, config.samples) if item.id in old_records]
    factory = factory or make_factory(settings)
    new_manifest = build_manifest(config, dataset, settings, factory)
    new_manifest["rescored_from"] = {"run_dir": str(source), "identity_hash": manifest.get("identity_hash")}
    run_dir = RunDir(settings.run_dir or Path(f"{source}-rescored-{new_manifest['identity_hash'][:8]}"))

    def kept(item_id: str) -> Mapping[str, StepRecord]:
        return {k: v for k, v in old_records[item_id].steps.items() if k in SUBJECT_STEPS}

    with locked_run(run_dir, new_manifest):
        outcome = asyncio.run(_execute(config, items, run_dir, factory, settings, previous_steps=kept))
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
