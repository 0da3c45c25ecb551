"""BenchPreS's own commands: `personalign benchpres build` (compose rows in the official schema);
registered through the spec's `cli` attribute."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from personalign.cli_common import cli_errors, new_app

benchpres_app = new_app(
    no_args_is_help=True, help="BenchPreS tools: build rows, validate files, re-judge runs."
)


@benchpres_app.command("build")
def build_cmd(
    source: Annotated[Path, typer.Argument(help='JSON file: {"profiles": [...], "contexts": [...]}')],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rows (.jsonl).")],
) -> None:
    """Compose BenchPreS rows (official schema) from memory profiles and recipient-task contexts."""
    from personalign.benchmarks.benchpres.build import build_rows, load_build_source

    with cli_errors():
        loaded = load_build_source(source)
        rows = build_rows(loaded.profiles, loaded.contexts)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row.model_dump(mode="json"), ensure_ascii=False) for row in rows]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    labels = [label for row in rows for label in row.preference_label]
    typer.echo(
        json.dumps(
            {"rows": len(rows), "apply": labels.count(True), "suppress": labels.count(False), "out": str(out)}
        )
    )


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    app.add_typer(benchpres_app, name="benchpres")
