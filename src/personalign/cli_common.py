"""What every `personalign` command module shares: the stderr console, the error exit, the budget exit."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(exc: Exception) -> NoReturn:
    """Print the error (it names the file, row and field for bad data) and exit with status 2."""
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


def exit_if_stopped(status: str) -> None:
    """A run that stopped at its --max-cost budget exits with status 3 (its results are kept)."""
    if status == "stopped_budget":
        raise typer.Exit(3)
