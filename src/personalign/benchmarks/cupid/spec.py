"""CUPID as a plug-in: what the shared run lifecycle and CLI need to know of it (runs/spec.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from personalign.benchmarks.cupid.config import SUBJECT_STEPS, TASKS, CupidConfig, default_subject_max_tokens
from personalign.benchmarks.cupid.context import CUPID_CONTEXTS
from personalign.benchmarks.cupid.data import LoadedDataset, describe_source, load_cupid
from personalign.benchmarks.cupid.protocol import CupidPaperPrompts, load_paper_prompts
from personalign.benchmarks.cupid.schema import INSTANCE_TYPES, CupidInstance
from personalign.errors import ConfigError
from personalign.llm.spec import parse_model_spec
from personalign.runs.spec import SUBJECT, Option, Role, RunContext, Selection

if TYPE_CHECKING:
    from personalign.llm.model import Model
    from personalign.report.tables import Table
    from personalign.runs.records import InstanceRecord
    from personalign.runs.runner import Evaluator

# The evaluator, its metrics and the reports (steps.py, report.py) are imported by the hooks that use
# them: they load numpy, the model layer and rich, which the CLI's options and a re-run of a finished
# run (config, identity, the stored summary) never need. Start-up speed is the only reason.

ROLE_NAMES = ("subject", "decomposer", "matcher", "judge")


class CupidSpec:
    """CUPID (Kim et al., 2025): infer the contextual preference behind a request from prior sessions."""

    name = "cupid"
    # Its section of `personalign report --html` (tables and plot), loaded when a page is built.
    html_section = "personalign.benchmarks.cupid.report:html_section"
    # `personalign view`: the messages each step of a saved record sent, rebuilt from the data.
    view_messages = "personalign.benchmarks.cupid.view:CupidMessages"
    # `personalign agree`: which judge labels two runs of it are compared on.
    agreement = "personalign.benchmarks.cupid.agree:AGREEMENT"
    # `personalign protocol show cupid`: the exact messages a run sends for one item.
    protocol_show = "personalign.benchmarks.cupid.show:PROTOCOL_SHOW"
    # `personalign memory-eval --format cupid`: the memory engine's retrieval against baselines.
    memory_eval = "personalign.benchmarks.cupid.memory_eval:memory_eval"
    # `personalign synth cupid`: its command(s), loaded when `synth` is used (cli_synth.py).
    synth = "personalign.benchmarks.cupid.synth_cli:register"
    # The official files of `--protocol paper` (`personalign protocol fetch|verify`), read at call time.
    upstream = "personalign.benchmarks.cupid.protocol:SOURCE"
    title = "CUPID: infer the contextual preference behind a request from prior sessions"
    item_noun = "instances"
    default_seed = 0
    # the data hooks are the folder's own loader: (source, sha256) without loading, and the loader
    describe_data = staticmethod(describe_source)
    load = staticmethod(load_cupid)
    roles: tuple[Role, ...] = (
        SUBJECT,
        Role("judge", "The generation judge (and the default decomposer and matcher)."),
        Role("decomposer", "Turns a preference into checklist items (default: --judge).", "judge"),
        Role("matcher", "Labels checklist coverage (default: --judge).", "judge"),
    )
    options: tuple[Option, ...] = (
        Option(
            "matcher_format",
            "str",
            "'default' (GPT-style prompt) or 'prefmatcher' (PrefMatcher-7B format).",
            default="default",
            choices=("default", "prefmatcher"),
            rescore=True,
        ),
        Option(
            "task", "str", "inference (the paper's default) | generation | both", "inference", choices=TASKS
        ),
        Option("context", "str", " | ".join(CUPID_CONTEXTS), "full", choices=tuple(CUPID_CONTEXTS)),
        Option(
            "instance_types",
            "str",
            "consistent | contrastive | changing (repeatable)",
            repeatable=True,
            choices=INSTANCE_TYPES,
            flag="--instance-type",
            scope="selection",
        ),
        Option(
            "max_tokens",
            "int",
            "Max tokens of the subject's answers "
            "(default: 8192 under --protocol paper; else 256 for local/smollm2, 1024 otherwise).",
        ),
        Option(
            "system_role",
            "str",
            "Role of the judges' system message under --protocol paper: 'system', or 'developer' "
            "as the official code sends to OpenAI models.",
            default="system",
            choices=("system", "developer"),
        ),
    )

    # --- config -------------------------------------------------------------------------------
    def make_config(
        self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str
    ) -> CupidConfig:
        subject = models["subject"]
        max_tokens = options.get("max_tokens")
        return CupidConfig(
            subject=subject,
            decomposer=models["decomposer"],
            matcher=models["matcher"],
            judge=models["judge"],
            task=options.get("task") or "inference",
            context=options.get("context") or "full",
            matcher_format=options.get("matcher_format") or "default",
            subject_max_tokens=(
                max_tokens if max_tokens is not None else default_subject_max_tokens(subject, protocol)
            ),
            protocol=protocol,  # type: ignore[arg-type]
            system_role=options.get("system_role") or "system",
        )

    def config_from_record(self, record: Mapping[str, Any]) -> CupidConfig:
        return CupidConfig(**record)

    def rescore_config(
        self, old: CupidConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> CupidConfig:
        changes: dict[str, Any] = {}
        if judge := models.get("judge"):
            changes.update(judge=judge, decomposer=judge, matcher=judge)
        changes.update({role: models[role] for role in ("decomposer", "matcher") if models.get(role)})
        if options.get("matcher_format"):
            changes["matcher_format"] = options["matcher_format"]
        if not changes:
            raise ConfigError(
                "rescore needs at least one of --judge, --decomposer, --matcher, --matcher-format"
            )
        return replace(old, **changes)

    def run_dir_parts(self, config: CupidConfig) -> list[str]:
        return [config.context, config.task] + (["paper"] if config.protocol == "paper" else [])

    def describe(self, config: CupidConfig) -> str:
        return (
            f"cupid: subject {config.subject}, decomposer {config.decomposer}, matcher {config.matcher} "
            f"({config.matcher_format}), judge {config.judge}; task {config.task}, context {config.context}, "
            f"protocol {config.protocol}"
        )

    # --- data ---------------------------------------------------------------------------------

    def data_record(self, dataset: LoadedDataset) -> dict[str, Any]:
        return dataset.record("n_instances")

    def select(self, dataset: LoadedDataset, selection: Selection) -> list[CupidInstance]:
        types = tuple(selection.options.get("instance_types") or ())
        chosen = [i for i in dataset.instances if not types or i.instance_type in types]
        return selection.first(chosen)

    def items(self, dataset: LoadedDataset) -> Sequence[CupidInstance]:
        return dataset.items

    def validate(self, data: str | Path) -> dict[str, Any]:
        dataset = load_cupid(data)
        counts: dict[str, int] = {}
        for instance in dataset.instances:
            counts[instance.instance_type] = counts.get(instance.instance_type, 0) + 1
        return {"source": dataset.source, "instances": len(dataset.instances), "by_type": counts}

    # --- identity, manifest -------------------------------------------------------------------
    def identity(self, config: CupidConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        models = {role: parse_model_spec(getattr(config, role)).label for role in ROLE_NAMES}
        return {
            "benchmark": "cupid",
            "config": {k: v for k, v in config.to_record().items() if k not in models},
            "models": models,
            "data": {"source": source, "sha256": sha256},
            "seed": seed,
        }

    def protocol_texts(self, config: CupidConfig, context: RunContext) -> CupidPaperPrompts | None:
        return load_paper_prompts(context.protocol_dir) if config.protocol == "paper" else None

    def manifest_extra(self, config: CupidConfig, texts: CupidPaperPrompts | None) -> dict[str, Any]:
        from personalign.benchmarks.cupid.steps import prompt_hashes

        if texts is None:
            return {"prompts": prompt_hashes()}
        return {"prompts": texts.hashes(), "upstream": dict(texts.source)}

    # --- evaluation ---------------------------------------------------------------------------
    def evaluator(
        self,
        config: CupidConfig,
        models: Mapping[str, Model],
        dataset: LoadedDataset,
        texts: CupidPaperPrompts | None,
        context: RunContext,
    ) -> Evaluator[CupidInstance]:
        from personalign.benchmarks.cupid.steps import CupidBenchmark

        return CupidBenchmark(config, models, texts)

    def check(self, evaluator: Evaluator[CupidInstance], items: Sequence[CupidInstance]) -> None:
        return None

    def kept_on_rescore(self, step: str) -> bool:
        return step in SUBJECT_STEPS or step.startswith("summary/")

    # --- results ------------------------------------------------------------------------------
    def summarize(self, records: Iterable[InstanceRecord], config: CupidConfig, seed: int) -> dict[str, Any]:
        from personalign.benchmarks.cupid.steps import summarize

        return summarize(records, config.tasks, seed=seed)

    def summary_header(self, config: CupidConfig) -> dict[str, Any]:
        return {"task": config.task, "context": config.context}

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        from personalign.benchmarks.cupid.report import print_run_summary

        print_run_summary(dict(summary), run_dir)

    def report_tables(self, run_dirs: Sequence[Path]) -> dict[str, Table]:
        from personalign.benchmarks.cupid.report import build_report

        return build_report(run_dirs)

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        from personalign.benchmarks.cupid.report import build_report, write_report

        return write_report(build_report(run_dirs), out)


SPEC = CupidSpec()
