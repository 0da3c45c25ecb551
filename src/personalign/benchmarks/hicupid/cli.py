"""HiCUPID's own commands: `run hicupid-retrieval` (retrieval Hit@k, no model calls) and the
message preview behind `protocol show hicupid`; registered through the spec's `cli` attribute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from personalign.cli_common import cli_errors, console
from personalign.errors import ConfigError, PersonalignError
from personalign.protocols.upstream import resolve_protocol
from personalign.redact import safe
from personalign.runs.spec import Option, ProtocolShow

# The command bodies import HiCUPID's modules when they run: CLI start-up speed (docs/architecture.md).


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
    from personalign.benchmarks.hicupid.schema import TEST_SPLITS
    from personalign.benchmarks.hicupid.spec import embedding_cache_path
    from personalign.llm import default_cache_path
    from personalign.report.tables import Cell, Table, write_tables

    with cli_errors():
        vectors = None if no_cache else embedding_cache_path(cache or default_cache_path())
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
    typer.echo(write_tables(out, "report", {"hicupid_retrieval": table}))
    console.print(f"written to {safe(out)}/report.md, report.csv, report.json")


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
    from personalign.benchmarks.hicupid.steps import HiCupidBenchmark, HiCupidConfig
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
    benchmark = HiCupidBenchmark(config, {"subject": no_model, "judge": no_model}, dataset, seed, paper=paper)
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
    run_app.command("hicupid-retrieval")(run_retrieval_cmd)


PROTOCOL_SHOW = ProtocolShow(
    show_hicupid,
    options=(Option("answer", "str", "The model answer to put in the judge's prompt.", "<model answer>"),),
    instance_help="Question id, e.g. 'test_1/0#2'.",
    setting_help="KEY=VALUE (repeatable) for context, instruction_role, shots, bm25, embedder, "
    "judge_format, slot.",
)
