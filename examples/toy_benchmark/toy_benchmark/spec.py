"""The toy benchmark as a personalign plug-in: one object satisfying `runs.spec.BenchmarkSpec`.

Registered through the entry point in pyproject.toml (``colour = "toy_benchmark.spec:SPEC"``);
everything generic (run directory, manifest, resume, rescore, CLI options) is personalign's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.llm.model import Model
from personalign.llm.spec import parse_model_spec
from personalign.runs.records import InstanceRecord
from personalign.runs.runner import Evaluator
from personalign.runs.spec import Option, Role, RunContext, Selection
from toy_benchmark import data, metrics, report
from toy_benchmark.data import ColourDataset, ColourItem
from toy_benchmark.evaluate import ColourConfig, ColourEvaluator, prompt_hashes

CONTEXTS = ("full", "last")


class ColourSpec:
    """Answer with the user's favourite colour from a short history (a toy, to show the contract)."""

    name = "colour"
    title = "Toy: answer with the user's favourite colour from a short history"
    item_noun = "items"
    default_seed = 0
    roles: tuple[Role, ...] = (
        Role("subject", "The model under evaluation.", rescorable=False),
        Role("judge", "Checks that the answer names the expected colour."),
    )
    options: tuple[Option, ...] = (
        Option(
            "context", "str", "full (every turn) | last (the user's last turn only)", "full", choices=CONTEXTS
        ),
        Option(
            "kinds",
            "str",
            "stated | changed (repeatable)",
            repeatable=True,
            choices=("stated", "changed"),
            flag="--kind",
            scope="selection",
        ),
    )

    # --- config -----------------------------------------------------------------------------------
    def make_config(
        self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str
    ) -> ColourConfig:
        if protocol != "personalign":
            raise ConfigError(f"colour has no {protocol!r} protocol (only 'personalign')")
        return ColourConfig(
            subject=models["subject"], judge=models["judge"], context=options.get("context") or "full"
        )

    def config_from_record(self, record: Mapping[str, Any]) -> ColourConfig:
        return ColourConfig(**record)

    def rescore_config(
        self, old: ColourConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> ColourConfig:
        if not models.get("judge"):
            raise ConfigError("rescore of a colour run needs --judge")
        return replace(old, judge=models["judge"])

    def run_dir_parts(self, config: ColourConfig) -> list[str]:
        return [config.context]

    def describe(self, config: ColourConfig) -> str:
        return f"colour: subject {config.subject}, judge {config.judge}, context {config.context}"

    # --- data -------------------------------------------------------------------------------------
    def describe_data(self, source: str | Path) -> tuple[str, str | None]:
        return data.describe(source)

    def load(self, source: str | Path) -> ColourDataset:
        return data.load(source)

    def data_record(self, dataset: ColourDataset) -> dict[str, Any]:
        return {"source": dataset.source, "sha256": dataset.sha256, "n_items": len(dataset.items)}

    def select(self, dataset: ColourDataset, selection: Selection) -> list[ColourItem]:
        kinds = tuple(selection.options.get("kinds") or ())
        chosen = [item for item in dataset.items if not kinds or item.kind in kinds]
        return chosen[: selection.limit] if selection.limit is not None else chosen

    def items(self, dataset: ColourDataset) -> Sequence[ColourItem]:
        return dataset.items

    def validate(self, source: str | Path) -> dict[str, Any]:
        dataset = data.load(source)
        kinds = sorted({item.kind for item in dataset.items})
        by_kind = {kind: sum(item.kind == kind for item in dataset.items) for kind in kinds}
        return {"source": dataset.source, "items": len(dataset.items), "by_kind": by_kind}

    # --- identity, manifest -----------------------------------------------------------------------
    def identity(self, config: ColourConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        return {
            "benchmark": self.name,
            "config": {
                "context": config.context,
                "protocol": config.protocol,
                "max_tokens": config.max_tokens,
            },
            "models": {role: parse_model_spec(getattr(config, role)).label for role in ("subject", "judge")},
            "data": {"source": source, "sha256": sha256},
            "seed": seed,
        }

    def protocol_texts(self, config: ColourConfig, context: RunContext) -> None:
        return None  # no official protocol to load

    def manifest_extra(self, config: ColourConfig, texts: None) -> dict[str, Any]:
        return {"prompts": prompt_hashes()}

    # --- evaluation -------------------------------------------------------------------------------
    def evaluator(
        self,
        config: ColourConfig,
        models: Mapping[str, Model],
        dataset: ColourDataset,
        texts: None,
        context: RunContext,
    ) -> Evaluator[ColourItem]:
        return ColourEvaluator(config, models["subject"], models["judge"])

    def check(self, evaluator: Evaluator[ColourItem], items: Sequence[ColourItem]) -> None:
        return None

    def kept_on_rescore(self, step: str) -> bool:
        return step == "answer"  # the subject's answer is reused; the judge runs again

    # --- results ----------------------------------------------------------------------------------
    def summarize(self, records: Iterable[InstanceRecord], config: ColourConfig, seed: int) -> dict[str, Any]:
        return metrics.summarize(records, seed=seed)

    def summary_header(self, config: ColourConfig) -> dict[str, Any]:
        return {"context": config.context}

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        report.print_summary(summary, run_dir)

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        return report.write_report(run_dirs, out)


SPEC = ColourSpec()
