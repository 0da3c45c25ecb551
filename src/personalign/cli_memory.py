"""`personalign memory-eval`: offline retrieval quality of the memory engine against baselines, on the
data of any registered benchmark whose spec has a `memory_eval` hook."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from personalign import registry
from personalign.cli_common import cli_errors, console
from personalign.errors import PersonalignError
from personalign.redact import safe
from personalign.registry import DEFAULT_BENCHMARK

if TYPE_CHECKING:  # typing only: runs.spec is loaded with the benchmark, when the command runs
    from personalign.runs.spec import MemoryEvalResult

# The benchmark and its memory evaluation (the spec's `memory_eval` hook) are loaded when the command
# runs, through the registry: no benchmark is named here.


def memory_eval_hook(name: str) -> Callable[..., MemoryEvalResult]:
    """The `memory_eval` hook of the registered benchmark `name` (its spec's optional import path);
    a clear error naming the benchmarks that have one."""
    target = getattr(registry.get(name), "memory_eval", None) if registry.has(name) else None
    if target is None:
        known = [n for n in registry.names() if getattr(registry.get(n), "memory_eval", None)]
        with_eval = ", ".join(known)
        raise PersonalignError(
            f"unknown --format {name!r} (benchmarks with a memory evaluation: {with_eval})"
        )
    return registry.load_target(target)  # type: ignore[no-any-return]


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    """Add the memory commands to the `personalign` app (``run_app`` is unused for now)."""

    @app.command("memory-eval")
    def memory_eval(
        data: Annotated[
            str,
            typer.Option(
                help="The benchmark's data: 'fixture', 'hf[:repo[:split]]', or a local file or directory "
                "in its official layout."
            ),
        ] = "fixture",
        data_format: Annotated[
            str,
            typer.Option(
                "--format", help="The benchmark whose data --data holds (one with a memory evaluation)."
            ),
        ] = DEFAULT_BENCHMARK,
        k: Annotated[
            int | None,
            typer.Option("--k", help="Sessions retrieved per request (default: the benchmark's own)."),
        ] = None,
        embedder: Annotated[
            str,
            typer.Option(
                help="Dense embedder: minilm (offline default), minilm-q8 (MiniLM with int8 matmuls, "
                "~2x faster; quant extra), static (fastest, distilled; static extra), hash, st:<name>."
            ),
        ] = "minilm",
        method: Annotated[
            list[str] | None,
            typer.Option(
                "--method",
                help="recent | bm25 | dense | fused | memory (repeatable; default: all the benchmark has).",
            ),
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Write the summary and per-instance scores to this JSON file.")
        ] = None,
    ) -> None:
        """Retrieval quality of the memory engine against baselines on a benchmark's data, with no
        judge model (CUPID: precision/recall of the oracle sessions per instance type; HiCUPID: Hit@k
        of the gold dialogues per question type)."""
        with cli_errors():
            if k is not None and k <= 0:
                raise PersonalignError("--k must be positive")
            result = memory_eval_hook(data_format)(data, k=k, embedder=embedder, methods=method)
        summary = {"data": {"source": result.source, "sha256": result.sha256}, **result.summary}
        typer.echo(result.table)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            body: dict[str, Any] = {"summary": summary}
            if result.instances is not None:
                body["instances"] = result.instances
            out.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            console.print(f"written to {safe(out)}")
