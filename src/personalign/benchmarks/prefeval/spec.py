"""PrefEval as a plug-in: what the shared run lifecycle and CLI need to know of it (runs/spec.py).

Items are (row, inter turns) pairs: the forms, topics and distractor lengths choose which items run
(selection options); the task, setting, protocol and budgets change results (config options).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.prefeval.context import RAG_METHODS, SETTINGS
from personalign.benchmarks.prefeval.data import LoadedPrefEval, describe_source, load_prefeval
from personalign.benchmarks.prefeval.protocol import PaperBudgets, Texts, load_paper, own_texts
from personalign.benchmarks.prefeval.report import build_report, print_run_summary, write_report
from personalign.benchmarks.prefeval.schema import PREFERENCE_FORMS, TASKS, TOPICS
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
from personalign.llm.model import Model
from personalign.llm.spec import parse_model_spec
from personalign.runs.records import InstanceRecord
from personalign.runs.runner import Evaluator
from personalign.runs.spec import SUBJECT, Option, Role, RunContext, Selection

DEFAULT_TURNS: tuple[int, ...] = (0,)
ProtocolTexts = tuple[Texts, PaperBudgets | None]


class PrefEvalSpec:
    """PrefEval (Zhao et al., ICLR 2025): follow a preference stated earlier in a long conversation."""

    name = "prefeval"
    # Its section of `personalign report --html` (tables and plot), loaded when a page is built.
    html_section = "personalign.benchmarks.prefeval.report:html_section"
    # The official files of `--protocol paper` (`personalign protocol fetch|verify`), read at call time.
    upstream = "personalign.benchmarks.prefeval.protocol:SOURCE"
    title = "PrefEval: follow a preference stated earlier in a long conversation"
    item_noun = "instances"
    default_seed = 0
    roles: tuple[Role, ...] = (
        SUBJECT,
        Role("judge", "The four checks of the generation task (unused by --task mcq)."),
    )
    options: tuple[Option, ...] = (
        Option(
            "task",
            "str",
            "generation (4 judge checks) | mcq (pick 1 of 4 options)",
            "generation",
            choices=TASKS,
        ),
        Option("setting", "str", " | ".join(SETTINGS), "zero-shot", choices=SETTINGS),
        Option("rag_method", "str", "Retriever of --setting rag: bm25 | dense", "bm25", choices=RAG_METHODS),
        Option("rag_k", "int", "Messages quoted by --setting rag (the paper: 5).", 5),
        Option("memory_k", "int", "Sessions the memory engine retrieves for --setting memory.", 3),
        Option(
            "embedder", "str", "Embedder of dense RAG and the memory engine (minilm | hash | ...).", "minilm"
        ),
        Option(
            "max_tokens",
            "int",
            "Max tokens of the subject's answers (default: 300 under --protocol paper, else 1024).",
            flag="--max-tokens",
        ),
        Option(
            "judge_max_tokens",
            "int",
            "Max tokens of a judge reply (default: 100 paper, else 512).",
            rescore=True,
        ),
        Option(
            "turns",
            "int",
            "Inter turns between preference and question (repeatable; the paper: 0-300).",
            repeatable=True,
            scope="selection",
        ),
        Option(
            "forms",
            "str",
            "explicit | choice | persona (repeatable; default: all three)",
            repeatable=True,
            choices=PREFERENCE_FORMS,
            flag="--form",
            scope="selection",
        ),
        Option(
            "topics",
            "str",
            "One of the 20 topics (repeatable; default: all in the data)",
            repeatable=True,
            choices=TOPICS,
            flag="--topic",
            scope="selection",
        ),
    )

    # --- config -------------------------------------------------------------------------------
    def make_config(
        self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str
    ) -> PrefEvalConfig:
        task: Any = options.get("task") or "generation"
        return PrefEvalConfig(
            subject=models["subject"],
            judge=models.get("judge") if task == "generation" else None,
            task=task,
            setting=options.get("setting") or "zero-shot",
            protocol=protocol,  # type: ignore[arg-type]
            rag_method=options.get("rag_method") or "bm25",
            rag_k=options.get("rag_k") or 5,
            memory_k=options.get("memory_k") or 3,
            embedder=options.get("embedder") or "minilm",
            subject_max_tokens=options.get("max_tokens"),
            judge_max_tokens=options.get("judge_max_tokens"),
        )

    def config_from_record(self, record: Mapping[str, Any]) -> PrefEvalConfig:
        return PrefEvalConfig(**record)

    def rescore_config(
        self, old: PrefEvalConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> PrefEvalConfig:
        if old.task != "generation":
            raise ConfigError("an MCQ run has no judge to replace")
        changes: dict[str, Any] = {}
        if models.get("judge"):
            changes["judge"] = models["judge"]
        if options.get("judge_max_tokens"):
            changes["judge_max_tokens"] = options["judge_max_tokens"]
        if not changes:
            raise ConfigError("rescore needs --judge and/or --judge-max-tokens")
        return replace(old, **changes)

    def run_dir_parts(self, config: PrefEvalConfig) -> list[str]:
        return [config.condition] + (["paper"] if config.protocol == "paper" else [])

    def describe(self, config: PrefEvalConfig) -> str:
        judge = f", judge {config.judge}" if config.judge else ""
        return f"prefeval: subject {config.subject}{judge}; {config.condition}, protocol {config.protocol}"

    # --- data ---------------------------------------------------------------------------------
    def describe_data(self, data: str | Path) -> tuple[str, str | None]:
        return describe_source(data)

    def load(self, data: str | Path) -> LoadedPrefEval:
        return load_prefeval(data)

    def data_record(self, dataset: LoadedPrefEval) -> dict[str, Any]:
        return {
            "source": dataset.source,
            "sha256": dataset.sha256,
            "n_rows": len(dataset.rows),
            "n_distractor_messages": len(dataset.distractors),
            "files": dict(sorted(dataset.files.items())),
        }

    def select(self, dataset: LoadedPrefEval, selection: Selection) -> list[PrefEvalItem]:
        forms = tuple(selection.options.get("forms") or ())
        topics = tuple(selection.options.get("topics") or ())
        turns = tuple(selection.options.get("turns") or DEFAULT_TURNS)
        rows = [
            r for r in dataset.rows if (not forms or r.form in forms) and (not topics or r.topic in topics)
        ]
        rows = selection.first(rows)
        most = 2 * max(turns)
        if most > len(dataset.distractors):
            raise ConfigError(
                f"{max(turns)} inter turns need {most} distractor messages; {dataset.source} holds "
                f"{len(dataset.distractors)}"
            )
        return expand(rows, turns)

    def items(self, dataset: LoadedPrefEval) -> Sequence[PrefEvalItem]:
        turns = sorted({t for t in range(len(dataset.distractors) // 2 + 1)})
        return expand(dataset.rows, turns)

    def validate(self, data: str | Path) -> dict[str, Any]:
        dataset = load_prefeval(data)
        counts: dict[str, int] = {}
        for row in dataset.rows:
            counts[row.form] = counts.get(row.form, 0) + 1
        return {
            "source": dataset.source,
            "rows": len(dataset.rows),
            "by_form": counts,
            "topics": len({r.topic for r in dataset.rows}),
            "with_mcq_options": sum(1 for r in dataset.rows if r.mcq is not None),
            "max_inter_turns": len(dataset.distractors) // 2,
        }

    # --- identity, manifest -------------------------------------------------------------------
    def identity(self, config: PrefEvalConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        models = {role: parse_model_spec(spec).identity for role, spec in config.model_specs().items()}
        return {
            "benchmark": self.name,
            "config": {k: v for k, v in config.to_record().items() if k not in ("subject", "judge")},
            "models": models,
            "data": {"source": source, "sha256": sha256},
            "seed": seed,
        }

    def protocol_texts(self, config: PrefEvalConfig, context: RunContext) -> ProtocolTexts:
        if config.protocol == "paper":
            return load_paper(context.protocol_dir)
        return own_texts(config.max_words), None

    def manifest_extra(self, config: PrefEvalConfig, texts: ProtocolTexts) -> dict[str, Any]:
        own, _ = texts
        return {"prompts": dict(own.sha256), **({"upstream": dict(own.source)} if own.source else {})}

    # --- evaluation ---------------------------------------------------------------------------
    def evaluator(
        self,
        config: PrefEvalConfig,
        models: Mapping[str, Model],
        dataset: LoadedPrefEval,
        texts: ProtocolTexts,
        context: RunContext,
    ) -> Evaluator[PrefEvalItem]:
        own, paper = texts
        return PrefEvalBenchmark(
            config,
            PrefEvalModels(subject=models["subject"], judge=models.get("judge")),
            dataset,
            own,
            budgets_for(config, paper),
            seed=context.seed,
        )

    def check(self, evaluator: Evaluator[PrefEvalItem], items: Sequence[PrefEvalItem]) -> None:
        if not isinstance(evaluator, PrefEvalBenchmark) or evaluator.config.task != "mcq":
            return
        missing = [i.row.id for i in items if i.row.mcq is None]
        if missing:
            raise ConfigError(f"--task mcq: no MCQ options for {len(missing)} rows (e.g. {missing[0]})")

    def kept_on_rescore(self, step: str) -> bool:
        return step in SUBJECT_STEPS

    # --- results ------------------------------------------------------------------------------
    def summarize(
        self, records: Iterable[InstanceRecord], config: PrefEvalConfig, seed: int
    ) -> dict[str, Any]:
        return summarize(records, config.task, seed=seed)

    def summary_header(self, config: PrefEvalConfig) -> dict[str, Any]:
        return {"task": config.task, "setting": config.setting, "condition": config.condition}

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        print_run_summary(summary, run_dir)

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        return write_report(build_report(run_dirs), out)


SPEC = PrefEvalSpec()
