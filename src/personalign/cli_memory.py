"""`personalign memory-eval`: offline retrieval quality of the memory engine against baselines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from personalign.errors import PersonalignError

console = Console(stderr=True)


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    """Add the memory commands to the `personalign` app (``run_app`` is unused for now)."""

    @app.command("memory-eval")
    def memory_eval(
        data: Annotated[
            str, typer.Option(help="CUPID data: 'fixture', 'hf[:repo[:split]]', or a .parquet/.json/.jsonl.")
        ] = "fixture",
        k: Annotated[int, typer.Option("--k", help="Sessions retrieved per request.")] = 2,
        embedder: Annotated[
            str, typer.Option(help="Dense embedder: minilm (offline default), hash, st:<name>.")
        ] = "minilm",
        method: Annotated[
            list[str] | None,
            typer.Option(
                "--method", help="recent | bm25 | dense | fused | memory (repeatable; default all)."
            ),
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Write the summary and per-instance scores to this JSON file.")
        ] = None,
    ) -> None:
        """Precision/recall of retrieved sessions against CUPID's oracle sessions, per instance type,
        for the memory engine and the baselines (no judge model)."""
        from personalign.data.cupid import load_cupid
        from personalign.memory.evaluate import METHODS, evaluate_cupid, format_table, score_records

        try:
            if k <= 0:
                raise PersonalignError("--k must be positive")
            dataset = load_cupid(data)
            summary, scores = evaluate_cupid(
                dataset.instances, k=k, embedder=embedder, methods=tuple(method or METHODS)
            )
        except PersonalignError as exc:
            console.print(f"[bold red]error:[/] {exc}")
            raise typer.Exit(2) from None
        summary = {"data": {"source": dataset.source, "sha256": dataset.sha256}, **summary}
        typer.echo(format_table(summary))
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(
                json.dumps({"summary": summary, "instances": score_records(scores)}, indent=2) + "\n",
                encoding="utf-8",
            )
            console.print(f"written to {out}")
