"""BenchPreS as a plug-in: what the shared run lifecycle and CLI need to know of it (runs/spec.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.benchpres.data import LoadedBenchPres, describe_source, load_benchpres
from personalign.benchmarks.benchpres.judges import category_of
from personalign.benchmarks.benchpres.report import build_report, print_run_summary, write_report
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.benchmarks.benchpres.steps import (
    JUDGE_MAX_TOKENS,
    SUBJECT_MAX_TOKENS,
    SUBJECT_STEPS,
    BenchPresBenchmark,
    BenchPresConfig,
    BenchPresItem,
    expand,
    prompt_hashes,
    summarize,
)
from personalign.errors import ConfigError, ModelCallError
from personalign.llm.model import Model
from personalign.llm.spec import EMBEDDED_DEFAULT, parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.runs.records import InstanceRecord
from personalign.runs.runner import Evaluator
from personalign.runs.spec import SUBJECT, Option, Role, RunContext, Selection

# The embedded 135M model writes ~20 tokens/s on 2 cores; these keep its default run on the
# 24-row fixture to a few minutes. Real models get the paper's protocol (3 samples) and budgets
# with room for reasoning (SUBJECT_MAX_TOKENS / JUDGE_MAX_TOKENS in steps.py).
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


def check_reasoning(config: BenchPresConfig, subject: Model) -> None:
    """Refuse to label a run 'reasoning on' when the subject's backend cannot turn it on, and
    a run 'reasoning off' whose requests the model's capability row refuses (o-series models
    cannot turn reasoning off): better at the start than as an error on every response."""
    if config.reasoning == "default":
        return
    backend = subject.backend
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


class BenchPresSpec:
    """BenchPreS: are stored preferences applied only where the context allows them?"""

    name = "benchpres"
    # Its section of `personalign report --html` (tables and plot), loaded when a page is built.
    html_section = "personalign.benchmarks.benchpres.report:html_section"
    # `personalign synth benchpres`: its command(s), loaded when `synth` is used (cli_synth.py).
    synth = "personalign.benchmarks.benchpres.synth_cli:register"
    title = "BenchPreS: are stored preferences applied only where the context allows them?"
    item_noun = "rows"
    default_seed = 0
    # the data hooks are the folder's own loader: (source, sha256) without loading, and the loader
    describe_data = staticmethod(describe_source)
    load = staticmethod(load_benchpres)
    cli = "personalign.benchmarks.benchpres.cli:register"
    roles: tuple[Role, ...] = (
        SUBJECT,
        Role("judge", "The preference judge."),
        Role("completeness_judge", "Task-completeness judge spec (default: --judge).", "judge"),
        # no defaults_to: the memory engine's judge is the preference judge unless given (models_of)
        Role(
            "memory_judge",
            "With --context memory: the model deciding apply/suppress (default: --judge).",
            rescorable=False,
        ),
    )
    options: tuple[Option, ...] = (
        Option(
            "mitigation",
            "bool",
            "Add the instruction to apply only the preferences that suit the context.",
            False,
            boolean_flags=("--mitigation", "--no-mitigation"),
        ),
        Option(
            "reasoning",
            "str",
            "default (send nothing) | on | off: the subject's reasoning mode.",
            "default",
            choices=("default", "on", "off"),
        ),
        Option(
            "context",
            "str",
            "Context strategy: how memory reaches the subject. full (every statement, as in the "
            "paper) | memory (the memory engine applies only the preferences its judge selects).",
            "full",
        ),
        Option(
            "selection_only",
            "bool",
            "With --context memory: only the engine's apply/suppress decisions, scored against "
            "preference_label (no subject model, no preference judge).",
            False,
            boolean_flags=("--selection-only", ""),
        ),
        Option(
            "samples", "int", "Responses per row, averaged (default 3; 1 for the embedded local/smollm2)."
        ),
        Option("temperature", "float", "Subject sampling temperature.", 1.0),
        Option(
            "completeness",
            "bool",
            "Rate task completeness 1-5.",
            True,
            boolean_flags=("--completeness", "--no-completeness"),
        ),
        Option(
            "max_tokens",
            "int",
            "Max tokens per response, reasoning included (default 4096; 160 for the embedded model).",
        ),
        Option(
            "judge_max_tokens",
            "int",
            "Max tokens per judge answer, reasoning included (default 4096; 256 when every judge "
            "is the embedded model).",
        ),
    )
    protocol_help = (
        "personalign (JSON schemas, one re-ask, truncated replies are errors; works with the "
        "embedded model) | paper (the paper's stated protocol: free-form judge answers parsed "
        "strictly, completeness ending 'Rating: [[X]]', truncated replies scored on their text)."
    )

    def default_protocol(self, data: str) -> str:
        """Always ours unless asked: the paper's protocol needs judges that answer in free form."""
        return "personalign"

    # --- config -------------------------------------------------------------------------------
    def make_config(
        self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str
    ) -> BenchPresConfig:
        subject, judge = models["subject"], models["judge"]
        completeness_judge = models.get("completeness_judge") or judge
        defaults = defaults_for(subject, [judge, completeness_judge])
        selection_only = bool(options.get("selection_only"))
        samples, max_tokens = options.get("samples"), options.get("max_tokens")
        judge_max_tokens = options.get("judge_max_tokens")
        temperature = options.get("temperature")
        return BenchPresConfig(
            subject=subject,
            judge=judge,
            completeness_judge=completeness_judge,
            mitigation=bool(options.get("mitigation")),
            reasoning=options.get("reasoning") or "default",
            samples=samples if samples is not None else (1 if selection_only else defaults.samples),
            temperature=temperature if temperature is not None else 1.0,
            context=options.get("context") or "full",
            memory_judge=models.get("memory_judge"),
            selection_only=selection_only,
            completeness=options.get("completeness") is not False,
            subject_max_tokens=max_tokens if max_tokens is not None else defaults.max_tokens,
            judge_max_tokens=judge_max_tokens if judge_max_tokens is not None else defaults.judge_max_tokens,
            protocol=protocol,  # type: ignore[arg-type]
        )

    def config_from_record(self, record: Mapping[str, Any]) -> BenchPresConfig:
        return BenchPresConfig(**record)

    def rescore_config(
        self, old: BenchPresConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> BenchPresConfig:
        judge, completeness_judge = models.get("judge"), models.get("completeness_judge")
        if not judge and not completeness_judge:
            raise ConfigError("rescore needs --judge and/or --completeness-judge")
        return replace(
            old,
            judge=judge or old.judge,
            completeness_judge=completeness_judge or judge or old.completeness_judge,
            # the context step (the memory engine's decisions) is reused, so its judge stays the old one
            memory_judge=old.selection_judge,
        )

    def models_of(self, config: BenchPresConfig) -> dict[str, str]:
        return config.model_specs()

    def run_dir_parts(self, config: BenchPresConfig) -> list[str]:
        return [config.condition]

    def describe(self, config: BenchPresConfig) -> str:
        memory = f", memory judge {config.selection_judge}" if config.selection_judge else ""
        return (
            f"benchpres: subject {config.subject}, judge {config.judge}, completeness judge "
            f"{config.completeness_judge}{memory}; protocol {config.protocol}, {config.condition}, "
            f"{config.samples} sample(s) at temperature {config.temperature:g}, max "
            f"{config.subject_max_tokens} tokens (judges {config.judge_max_tokens})"
        )

    # --- data ---------------------------------------------------------------------------------

    def data_record(self, dataset: LoadedBenchPres) -> dict[str, Any]:
        return dataset.record("n_rows")

    def select(self, dataset: LoadedBenchPres, selection: Selection) -> list[BenchPresRow]:
        return selection.first(dataset.items)

    def items(self, dataset: LoadedBenchPres) -> Sequence[BenchPresRow]:
        return dataset.items

    def expand(self, config: BenchPresConfig, rows: Sequence[BenchPresRow]) -> list[BenchPresItem]:
        """Each row once per sample, sample-major (an interrupted run has whole passes done first)."""
        return expand(rows, config.samples)

    def validate(self, data: str | Path) -> dict[str, Any]:
        dataset = load_benchpres(data)
        labels = [label for row in dataset.rows for label in row.preference_label]
        domains: dict[str, int] = {}
        categories: dict[str, int] = {}
        sources: dict[str, int] = {}
        for row in dataset.rows:
            domains[row.domain or "unknown"] = domains.get(row.domain or "unknown", 0) + 1
            for index in range(len(row.preference_attribute)):
                category, source = category_of(row, index)
                categories[category] = categories.get(category, 0) + 1
                sources[source] = sources.get(source, 0) + 1
        return {
            "source": dataset.source,
            "rows": len(dataset.rows),
            "profiles": len({row.name for row in dataset.rows}),
            "apply": labels.count(True),
            "suppress": labels.count(False),
            "by_domain": domains,
            "by_category": categories,
            "category_source": sources,
        }

    # --- identity, manifest -------------------------------------------------------------------
    def identity(self, config: BenchPresConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        # `identity`: the label, plus options that change the output (?reasoning_effort=high)
        models = {role: parse_model_spec(spec).identity for role, spec in config.model_specs().items()}
        return {
            "benchmark": "benchpres",
            "config": {k: v for k, v in config.to_record().items() if k not in models},
            "models": models,
            "data": {"source": source, "sha256": sha256},
            "seed": seed,
        }

    def protocol_texts(self, config: BenchPresConfig, context: RunContext) -> None:
        return None  # the paper's protocol is stated in prose: our prompts follow it

    def manifest_extra(self, config: BenchPresConfig, texts: None) -> dict[str, Any]:
        return {"condition": config.condition, "prompts": prompt_hashes()}

    def manifest_models(self, config: BenchPresConfig, models: Mapping[str, Model]) -> dict[str, Any]:
        return {"reasoning_control": bool(getattr(models["subject"].backend, "supports_reasoning", False))}

    # --- evaluation ---------------------------------------------------------------------------
    def evaluator(
        self,
        config: BenchPresConfig,
        models: Mapping[str, Model],
        dataset: LoadedBenchPres,
        texts: None,
        context: RunContext,
    ) -> Evaluator[BenchPresItem]:
        return BenchPresBenchmark(config, models)

    def check(self, evaluator: Evaluator[BenchPresItem], items: Sequence[BenchPresItem]) -> None:
        if isinstance(evaluator, BenchPresBenchmark):
            check_reasoning(evaluator.config, evaluator.models["subject"])

    def kept_on_rescore(self, step: str) -> bool:
        return step in SUBJECT_STEPS

    # --- results ------------------------------------------------------------------------------
    def summarize(
        self, records: Iterable[InstanceRecord], config: BenchPresConfig, seed: int
    ) -> dict[str, Any]:
        return summarize(records, seed=seed)

    def summary_header(self, config: BenchPresConfig) -> dict[str, Any]:
        return {
            "condition": config.condition,
            "mitigation": config.mitigation,
            "reasoning": config.reasoning,
            "context": config.context,
            "samples": config.samples,
            "temperature": config.temperature,
        }

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        print_run_summary(dict(summary), run_dir)

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        return write_report(build_report(run_dirs), out)


SPEC = BenchPresSpec()
