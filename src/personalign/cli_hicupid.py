"""HiCUPID commands: `run hicupid`, `run hicupid-retrieval`, the HiCUPID sides of `rescore` and `validate`,
and `agree` (judge agreement between two runs of CUPID or HiCUPID)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from personalign.cli_common import (
    CacheOpt,
    MaxCostOpt,
    MaxErrorRateOpt,
    NoCacheOpt,
    PricesOpt,
    ProgressOpt,
    ProtocolDirOpt,
    ProtocolOpt,
    console,
    exit_for_run,
)
from personalign.cli_common import fail as _fail
from personalign.errors import ConfigError, PersonalignError
from personalign.llm.spec import EMBEDDED_DEFAULT, subject_and_judge
from personalign.protocols.upstream import resolve_protocol
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).


def run_hicupid_cmd(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Subject model spec (default: local/smollm2).")
    ] = None,
    judge: Annotated[
        str | None, typer.Option("--judge", "-j", help="Judge model spec (required with --model).")
    ] = None,
    data: Annotated[
        str, typer.Option(help="'fixture', 'hf[:repo]', or a directory with the dialogue and qa files.")
    ] = "fixture",
    context: Annotated[
        str,
        typer.Option(
            help="full | gold | bm25-utterance-{5,15,25} | dense-utterance-{5,15,25} | "
            "bm25-dialogue-{1,3,5} | dense-dialogue-{1,3,5} | memory (k=3) | memory-K (any K works)"
        ),
    ] = "full",
    instruction_role: Annotated[
        str | None,
        typer.Option(
            help="Where the instruction goes: system | user (with an acknowledgement). "
            "Default: user under --protocol paper (the paper's main setting), else system."
        ),
    ] = None,
    shots: Annotated[
        int, typer.Option(help="Few-shot examples per question type from the train split (0, 1, 3, 5).")
    ] = 0,
    both_orders: Annotated[
        bool, typer.Option("--both-orders", help="Judge A/B questions in both orders (flips count as ties).")
    ] = False,
    judge_format: Annotated[
        str | None,
        typer.Option(
            help="json (schema-constrained) | text ('Better Response: X' lines, proxy judges). "
            "Default: json; --protocol paper always uses the official text format."
        ),
    ] = None,
    embedder: Annotated[
        str,
        typer.Option(
            help="Dense retrieval embedder: minilm (offline default), hash, st:<model>, "
            "contriever[:<name-or-dir>] (the paper's; needs the contriever extra)."
        ),
    ] = "minilm",
    bm25: Annotated[
        str | None,
        typer.Option(
            help="BM25 variant: lucene (stopwords, only matching units) | okapi (the paper's: rank_bm25 "
            "Okapi over whitespace tokens, always k units). Default: okapi under --protocol paper, "
            "else lucene."
        ),
    ] = None,
    split: Annotated[
        list[str] | None,
        typer.Option("--split", help="train | test_1 | test_2 (repeatable; default both tests)"),
    ] = None,
    question_type: Annotated[
        list[str] | None, typer.Option("--type", help="persona | profile | schedule (repeatable)")
    ] = None,
    user: Annotated[
        list[int] | None, typer.Option("--user", help="Only these user ids (repeatable).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N selected questions.")] = None,
    concurrency: Annotated[int, typer.Option(help="Questions evaluated at once.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed for the A/B position, few-shot choice and CIs.")] = 42,
    run_dir: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/hicupid/<derived name>).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Max tokens for the subject's answers (default 200, as the paper).")
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(help="Subject sampling temperature. Default: 0.6 under --protocol paper, else 0.0."),
    ] = None,
    protocol: ProtocolOpt = None,
    protocol_dir: ProtocolDirOpt = None,
    max_cost: MaxCostOpt = None,
    prices: PricesOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
) -> None:
    """Run HiCUPID (answer from a long history; A/B and YES/NO judges) and write a run directory."""
    from personalign.benchmarks.hicupid.report import print_run_summary
    from personalign.benchmarks.hicupid.run import HiCupidRunSettings, run_hicupid
    from personalign.benchmarks.hicupid.schema import TEST_SPLITS
    from personalign.benchmarks.hicupid.steps import HiCupidConfig
    from personalign.runs.lifecycle import SMALL_MODEL_NOTICE

    try:
        subject, judge_spec = subject_and_judge(model, judge)
        chosen = resolve_protocol(protocol, official_data=data.startswith("hf"))
        config = HiCupidConfig.for_protocol(
            chosen,
            subject=subject,
            judge=judge_spec,
            context=context,
            instruction_role=instruction_role,
            shots=shots,
            both_orders=both_orders,
            judge_format=judge_format,
            embedder=embedder,
            bm25=bm25,
            subject_max_tokens=max_tokens,
            subject_temperature=temperature,
        )
        settings = HiCupidRunSettings(
            run_dir=run_dir,
            concurrency=concurrency,
            limit=limit,
            splits=tuple(split or TEST_SPLITS),
            types=tuple(question_type or ()),
            users=tuple(user or ()),
            seed=seed,
            cache_path=cache,
            use_cache=not no_cache,
            max_cost_usd=max_cost,
            prices=prices,
            progress=progress,
            protocol_dir=protocol_dir,
        )
        console.print(
            f"hicupid (protocol {config.protocol}): subject [bold]{safe(config.subject)}[/], judge "
            f"{safe(config.judge)} ({safe(config.judge_format)}{', both orders' if both_orders else ''}); "
            f"method {safe(config.method)}, context {safe(config.context)}; "
            f"splits {safe(', '.join(settings.splits))}"
        )
        if EMBEDDED_DEFAULT in (config.subject, config.judge):
            console.print(f"[yellow]{SMALL_MODEL_NOTICE}[/]")
        result = run_hicupid(config, settings, data=data)
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


def run_retrieval_cmd(
    data: Annotated[str, typer.Option(help="'fixture', 'hf[:repo]', or a directory.")] = "fixture",
    retriever: Annotated[
        list[str] | None,
        typer.Option("--retriever", help="bm25 | dense | memory (repeatable; default all three)"),
    ] = None,
    embedder: Annotated[
        str, typer.Option(help="Dense embedder: minilm, hash, st:<model>, contriever[:<name-or-dir>].")
    ] = "minilm",
    bm25: Annotated[
        list[str] | None,
        typer.Option("--bm25", help="BM25 variant(s): lucene | okapi (repeatable; default lucene)."),
    ] = None,
    split: Annotated[
        list[str] | None, typer.Option("--split", help="train | test_1 | test_2 (default both tests)")
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for report.md, report.csv and report.json.")] = Path(
        "report-hicupid-retrieval"
    ),
    cache: Annotated[
        Path | None, typer.Option(help="Call cache file; dense vectors are cached next to it.")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not cache dense vectors.")] = False,
) -> None:
    """Hit@k of BM25, dense and memory-engine retrieval against the gold dialogues, per question type
    (no model calls). The memory engine retrieves whole dialogues (rows at the dialogue-level K)."""
    from dataclasses import replace
    from typing import cast

    from personalign.benchmarks.cupid.report import write_report
    from personalign.benchmarks.hicupid.context import (
        BM25_VARIANTS,
        PAPER_K,
        BM25Variant,
        ContextOptions,
        Method,
        Unit,
        retrieval_hits,
    )
    from personalign.benchmarks.hicupid.data import load_hicupid
    from personalign.benchmarks.hicupid.run import HiCupidRunSettings, embedding_cache_path
    from personalign.benchmarks.hicupid.schema import TEST_SPLITS
    from personalign.report.tables import Cell, Table

    try:
        vectors = embedding_cache_path(HiCupidRunSettings(cache_path=cache, use_cache=not no_cache))
        dataset = load_hicupid(data)
        questions = dataset.questions(split or TEST_SPLITS)
        if not questions:
            raise PersonalignError("no questions in the selected splits")
        table = Table(
            f"Retrieval Hit@k (%) on {dataset.source}, {len(questions)} questions",
            ["Persona", "Schedule", "Multi-Info Persona", "Multi-Info Profile", "Total"],
            digits=1,
            scale=100.0,
        )
        options = ContextOptions(embedder=embedder, embedding_cache=vectors)
        variants = bm25 or ["lucene"]
        for variant in variants:
            if variant not in BM25_VARIANTS:
                raise PersonalignError(f"unknown BM25 variant {variant!r} ({', '.join(BM25_VARIANTS)})")

        def add_rows(label: str, hits: dict[int, dict[str, float | int | None]]) -> None:
            for k, row in hits.items():
                table.rows[label.format(k=k)] = {
                    "Persona": Cell(row["persona"]),
                    "Schedule": Cell(row["schedule"]),
                    "Multi-Info Persona": Cell(row["multi_info_persona"]),
                    "Multi-Info Profile": Cell(row["multi_info_profile"]),
                    "Total": Cell(row["total"], None, int(row["n"] or 0)),
                }

        for method in retriever or ["bm25", "dense", "memory"]:
            if method not in ("bm25", "dense", "memory"):
                raise PersonalignError(f"unknown retriever {method!r} (bm25, dense or memory)")
            if method == "memory":
                from personalign.benchmarks.hicupid.memory import evaluate_hicupid

                result = evaluate_hicupid(
                    dataset.histories, questions, ks=PAPER_K["dialogue"], options=options, methods=["memory"]
                )
                add_rows(f"memory dialogue {{k}} ({embedder})", result["methods"]["memory"])
                continue
            for variant in variants if method == "bm25" else [embedder]:
                opts = replace(options, bm25=cast(BM25Variant, variant)) if method == "bm25" else options
                for unit, ks in PAPER_K.items():
                    hits = retrieval_hits(
                        dataset.histories, questions, cast(Method, method), cast(Unit, unit), ks, opts
                    )
                    add_rows(f"{method} {unit} {{k}} ({variant})", hits)
    except PersonalignError as exc:
        _fail(exc)
        return
    typer.echo(write_report({"hicupid_retrieval": table}, out))
    console.print(f"written to {safe(out)}/report.md, report.csv, report.json")


def rescore_cmd(
    run: Annotated[Path, typer.Argument(help="A finished HiCUPID run directory.")],
    judge: Annotated[str, typer.Option("--judge", "-j", help="The new judge model spec.")],
    judge_format: Annotated[str | None, typer.Option(help="json | text")] = None,
    both_orders: Annotated[bool | None, typer.Option("--both-orders/--one-order")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Where to write the re-scored run.")] = None,
    concurrency: Annotated[int, typer.Option()] = 8,
    cache: CacheOpt = None,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
    protocol_dir: ProtocolDirOpt = None,
) -> None:
    """Re-judge a HiCUPID run's saved answers with another judge (no subject calls)."""
    from personalign.benchmarks.hicupid.report import print_run_summary
    from personalign.benchmarks.hicupid.run import HiCupidRunSettings, rescore_hicupid

    try:
        result = rescore_hicupid(
            run,
            HiCupidRunSettings(
                run_dir=run_dir,
                concurrency=concurrency,
                cache_path=cache,
                progress=progress,
                protocol_dir=protocol_dir,
            ),
            judge=judge,
            judge_format=judge_format,
            both_orders=both_orders,
        )
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


def validate_cmd(
    path: Annotated[
        str, typer.Argument(help="A directory with HiCUPID dialogue and qa files, or 'fixture'.")
    ],
) -> None:
    """Check HiCUPID data against the official schema; print counts per split and type."""
    from collections import Counter

    from personalign.benchmarks.hicupid.data import load_hicupid

    try:
        dataset = load_hicupid(path)
    except PersonalignError as exc:
        _fail(exc)
        return
    counts = Counter(f"{q.split}/{q.type}" for q in dataset.qa)
    typer.echo(
        json.dumps(
            {
                "source": dataset.source,
                "users": len(dataset.histories),
                "dialogues": sum(len(h.dialogues) for h in dataset.histories.values()),
                "questions": len(dataset.qa),
                "by_split_and_type": dict(sorted(counts.items())),
            }
        )
    )


def agree_cmd(
    run_a: Annotated[Path, typer.Argument(help="A run directory (CUPID or HiCUPID).")],
    run_b: Annotated[
        Path, typer.Argument(help="Another run of the same benchmark, judged by another model.")
    ],
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON here.")] = None,
) -> None:
    """Cohen's kappa and raw agreement between two runs' judges on the same generations."""
    from personalign.runs.agree import agreement

    try:
        result = agreement(run_a, run_b)
    except PersonalignError as exc:
        _fail(exc)
        return
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    typer.echo(text)


SHOW_SETTINGS = ("context", "instruction_role", "shots", "bm25", "embedder", "judge_format", "slot")


def show_hicupid(
    instance: str,
    settings: list[str],
    *,
    protocol: str | None,
    protocol_dir: Path | None,
    data: str,
    answer: str,
    seed: int = 42,
) -> str:
    """The exact subject and judge messages of one question under one setting, as JSON (no calls).

    ``settings`` are ``KEY=VALUE`` pairs: context, instruction_role, shots, bm25, embedder,
    judge_format, slot (where the model's answer sits in the A/B judge: A or B).
    """
    import asyncio
    from typing import cast

    from personalign.benchmarks.hicupid.data import load_hicupid
    from personalign.benchmarks.hicupid.protocol import load_paper_texts
    from personalign.benchmarks.hicupid.steps import HiCupidBenchmark, HiCupidConfig, HiCupidModels
    from personalign.llm.model import Model

    given: dict[str, object] = {}
    slot: Literal["A", "B"] | None = None
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or key not in SHOW_SETTINGS:
            known = ", ".join(SHOW_SETTINGS)
            raise ConfigError(f"--setting {item!r}: expected KEY=VALUE with KEY in {known}")
        if key == "slot":
            if value not in ("A", "B"):
                raise ConfigError(f"--setting {item!r}: the slot is A or B")
            slot = "A" if value == "A" else "B"
        elif key == "shots":
            if not value.isdigit():
                raise ConfigError(f"--setting {item!r}: shots is a number")
            given[key] = int(value)
        else:
            given[key] = value
    chosen = resolve_protocol(protocol, official_data=data.startswith("hf"))
    config = HiCupidConfig.for_protocol(chosen, subject="none/none", judge="none/none", **given)
    dataset = load_hicupid(data)
    qa = next((q for q in dataset.qa if q.id == instance or str(q.question_id) == instance), None)
    if qa is None:
        raise ConfigError(f"no question {instance!r} in {dataset.source} (give an id like test_1/0#2)")
    paper = load_paper_texts(protocol_dir) if chosen == "paper" else None
    no_model = cast(Model, None)  # preview() makes no call
    benchmark = HiCupidBenchmark(config, HiCupidModels(no_model, no_model), dataset, seed, paper=paper)
    shown = asyncio.run(benchmark.preview(qa, answer, slot))
    return json.dumps(
        {
            "instance": qa.id,
            "protocol": chosen,
            "config": {k: v for k, v in config.to_record().items() if k not in ("subject", "judge")},
            **{role: [m.model_dump() for m in messages] for role, messages in shown.items()},
        },
        indent=2,
        ensure_ascii=False,
    )


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    run_app.command("hicupid")(run_hicupid_cmd)
    run_app.command("hicupid-retrieval")(run_retrieval_cmd)
    app.command("agree")(agree_cmd)
