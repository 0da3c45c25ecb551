"""What every `personalign` command module shares: the stderr console, safe printing, and exit codes.

Exit codes (the same for every run command: `run *`, `rescore`, `synth *`, `memory-eval`):
0 complete; 1 internal error (a bug: a traceback is printed); 2 usage, configuration or data
error (the message names the file, row and field); 3 stopped at the `--max-cost` budget;
4 complete, but the share of errored instances exceeds `--max-error-rate`; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from personalign.errors import BudgetExceeded, PersonalignError
from personalign.redact import safe

# soft_wrap: messages are never broken inside a path or spec (they stay copyable); tables still fit.
console = Console(stderr=True, soft_wrap=True)

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_TOO_MANY_ERRORS = 4
EXIT_INTERRUPTED = 130

# Options every model-calling command takes, declared once.
CacheOpt = Annotated[
    Path | None, typer.Option(help="Call cache file (default: ~/.cache/personalign/calls.sqlite).")
]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not read or write the call cache.")]
MaxCostOpt = Annotated[float | None, typer.Option(help="Stop cleanly once this many USD are spent.")]
PricesOpt = Annotated[Path | None, typer.Option(help="Price table JSON (USD per million tokens).")]
ProgressOpt = Annotated[bool, typer.Option(help="Show a progress bar.")]
MaxErrorRateOpt = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=1.0,
        help="Exit with code 4 when more than this share of instances ended in error "
        "(default 1.0: never; 0 fails on any error).",
    ),
]


def fail(exc: Exception) -> NoReturn:
    """Print the error (it names the file, row and field for bad data) and exit with status 2
    (3 when it is the `--max-cost` budget)."""
    console.print(f"[bold red]error:[/] {safe(exc)}")
    raise typer.Exit(EXIT_BUDGET if isinstance(exc, BudgetExceeded) else EXIT_USAGE)


@contextmanager
def cli_errors() -> Iterator[None]:
    """The one error boundary of every command: a `PersonalignError` in the block is printed and
    exits 2 (3 at the budget) through `fail`; anything else is a bug and keeps its traceback."""
    try:
        yield
    except PersonalignError as exc:
        fail(exc)


def exit_code(status: str, n_errors: int = 0, n_instances: int = 0, max_error_rate: float = 1.0) -> int:
    """The process exit code for a finished run's status (see the module docstring)."""
    if status == "interrupted":
        return EXIT_INTERRUPTED
    if status == "stopped_budget":
        return EXIT_BUDGET
    if n_errors and n_instances and n_errors / n_instances > max_error_rate:
        return EXIT_TOO_MANY_ERRORS
    return EXIT_OK


def exit_for_run(status: str, records: Mapping[str, Any], max_error_rate: float = 1.0) -> None:
    """Exit with the code for this run outcome (nothing for a clean 0); `records` are its instance records."""
    n_errors = sum(1 for record in records.values() if getattr(record, "status", "ok") != "ok")
    code = exit_code(status, n_errors, len(records), max_error_rate)
    if code == EXIT_INTERRUPTED:
        console.print("interrupted; finished instances are saved, re-run the same command to resume")
    elif code == EXIT_TOO_MANY_ERRORS:
        console.print(
            f"[bold red]{n_errors} of {len(records)} instances ended in error[/], "
            f"more than --max-error-rate {max_error_rate:g}"
        )
    if code:
        raise typer.Exit(code)


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


def model_call_params() -> list[inspect.Parameter]:
    """The options of every command that calls models (`run <benchmark>`, `synth <benchmark>`): cost cap,
    prices, call cache, progress bar and the error rate that fails the command; keyword parameters."""

    def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    return [
        option("max_cost", MaxCostOpt, None),
        option("prices", PricesOpt, None),
        option("cache", CacheOpt, None),
        option("no_cache", NoCacheOpt, False),
        option("progress", ProgressOpt, True),
        option("max_error_rate", MaxErrorRateOpt, 1.0),
    ]
