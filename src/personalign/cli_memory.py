"""`personalign memory-eval`: offline retrieval quality of the memory engine against baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from personalign.cli_common import console
from personalign.cli_common import fail as _fail
from personalign.errors import PersonalignError
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    """Add the memory commands to the `personalign` app (``run_app`` is unused for now)."""

    @app.command("memory-eval")
    def memory_eval(
        data: Annotated[
            str,
            typer.Option(
                help="CUPID data: 'fixture', 'hf[:repo[:split]]', or a .parquet/.json/.jsonl; with "
                "--format hicupid: 'fixture', 'hf[:repo]', or a directory with the dialogue and qa files."
            ),
        ] = "fixture",
        data_format: Annotated[
            str, typer.Option("--format", help="cupid | hicupid (the layout of --data).")
        ] = "cupid",
        k: Annotated[
            int | None,
            typer.Option(
                "--k", help="Sessions retrieved per request (default: 2 on CUPID; 1, 3 and 5 on HiCUPID)."
            ),
        ] = None,
        embedder: Annotated[
            str, typer.Option(help="Dense embedder: minilm (offline default), hash, st:<name>.")
        ] = "minilm",
        method: Annotated[
            list[str] | None,
            typer.Option(
                "--method",
                help="recent | bm25 | dense | fused | memory (repeatable; default all; HiCUPID has no "
                "fused).",
            ),
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Write the summary and per-instance scores to this JSON file.")
        ] = None,
    ) -> None:
        """Precision/recall of retrieved sessions against CUPID's oracle sessions, per instance type, or
        Hit@k of the gold dialogues per question type on HiCUPID, for the memory engine and the
        baselines (no judge model)."""
        from personalign.benchmarks.cupid.memory_eval import (
            METHODS,
            evaluate_cupid,
            format_table,
            score_records,
        )

        records: list[dict[str, object]] = []
        try:
            if k is not None and k <= 0:
                raise PersonalignError("--k must be positive")
            if data_format == "hicupid":
                from personalign.benchmarks.hicupid.context import PAPER_K, ContextOptions
                from personalign.benchmarks.hicupid.data import load_hicupid
                from personalign.benchmarks.hicupid.memory import (
                    HICUPID_METHODS,
                    evaluate_hicupid,
                    format_hicupid_table,
                )
                from personalign.benchmarks.hicupid.schema import TEST_SPLITS

                hicupid = load_hicupid(data)
                source, sha256 = hicupid.source, hicupid.sha256
                summary = evaluate_hicupid(
                    hicupid.histories,
                    hicupid.questions(TEST_SPLITS),
                    ks=PAPER_K["dialogue"] if k is None else (k,),
                    options=ContextOptions(embedder=embedder),
                    methods=tuple(method or HICUPID_METHODS),
                )
                table = format_hicupid_table(summary)
            elif data_format == "cupid":
                from personalign.benchmarks.cupid.data import load_cupid

                dataset = load_cupid(data)
                source, sha256 = dataset.source, dataset.sha256
                summary, scores = evaluate_cupid(
                    dataset.instances, k=k or 2, embedder=embedder, methods=tuple(method or METHODS)
                )
                table = format_table(summary)
                records = score_records(scores)
            else:
                raise PersonalignError(f"unknown --format {data_format!r} (cupid or hicupid)")
        except PersonalignError as exc:
            _fail(exc)
        summary = {"data": {"source": source, "sha256": sha256}, **summary}
        typer.echo(table)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            body = (
                {"summary": summary, "instances": records} if data_format == "cupid" else {"summary": summary}
            )
            out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            console.print(f"written to {safe(out)}")
