"""What every `personalign` command module shares: the stderr console, the error exit, the budget exit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)

# Options every model-calling command takes, declared once.
CacheOpt = Annotated[
    Path | None, typer.Option(help="Call cache file (default: ~/.cache/personalign/calls.sqlite).")
]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not read or write the call cache.")]
MaxCostOpt = Annotated[float | None, typer.Option(help="Stop cleanly once this many USD are spent.")]
PricesOpt = Annotated[Path | None, typer.Option(help="Price table JSON (USD per million tokens).")]
ProgressOpt = Annotated[bool, typer.Option(help="Show a progress bar.")]


def fail(exc: Exception) -> NoReturn:
    """Print the error (it names the file, row and field for bad data) and exit with status 2."""
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


def exit_if_stopped(status: str) -> None:
    """A run that stopped at its --max-cost budget exits with status 3 (its results are kept)."""
    if status == "stopped_budget":
        raise typer.Exit(3)


# The evaluation protocol, declared once for every run command.
ProtocolOpt = Annotated[
    str | None,
    typer.Option(
        "--protocol",
        help="paper (the official prompts, pinned by sha256) | personalign (ours). "
        "Default: paper with --data hf, else personalign.",
    ),
]
ProtocolDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--protocol-dir",
        help="A checkout of the upstream repository at the pinned commit, for --protocol paper "
        "(default: $PERSONALIGN_PROTOCOL_DIR_<NAME>, else the `personalign protocol fetch` cache).",
    ),
]
