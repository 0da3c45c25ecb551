"""What every `personalign` command module shares: the stderr console, safe printing, and exit codes.

Exit codes (the same for every run command: `run *`, `rescore`, `synth *`, `memory-eval`):
0 complete; 1 internal error (a bug: a traceback is printed); 2 usage, configuration or data
error (the message names the file, row and field); 3 stopped at the `--max-cost` budget;
4 complete, but the share of errored instances exceeds `--max-error-rate`; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, cast

import typer

from personalign.errors import BudgetExceeded, PersonalignError
from personalign.redact import safe

if TYPE_CHECKING:  # typing only: rich is imported when something is printed (start-up speed)
    from rich.console import Console

    from personalign.runs.spec import Option


class _LazyConsole:
    """The stderr console, built on first use: importing rich costs ~60 ms, which `--help` and a
    command that prints nothing should not pay."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            # soft_wrap: messages are never broken inside a path or spec (they stay copyable).
            self._console = Console(stderr=True, soft_wrap=True)
        return getattr(self._console, name)


console = cast("Console", _LazyConsole())


def new_app(**settings: Any) -> typer.Typer:
    """A typer app whose help is click's plain text: typer's rich help renderer costs ~0.15 s of
    start-up (rich, markdown-it, pygments) on every `--help`; the text and options are the same."""
    return typer.Typer(rich_markup_mode=None, **settings)


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
BatchOpt = Annotated[
    bool,
    typer.Option(
        "--batch",
        help="Send model calls through the providers' batch APIs (openai, openai-compat, anthropic) at "
        "half price, in rounds of dependent steps; slower (hours). Other models run directly.",
    ),
]
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


# --- commands built at run time from a benchmark's declared options (run, rescore, protocol show) ---


def build_command(
    name: str, function: Callable[..., None], params: list[inspect.Parameter], help_text: str
) -> Any:
    """A click command (typer's) from a function and a signature built at run time."""
    function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    function.__annotations__ = {}
    holder = new_app()
    holder.command(name, help=help_text)(function)
    return typer.main.get_group(holder).commands[name]


def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    """A keyword parameter of a command built at run time (no default: a required option)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "path": Path, "bool": bool}


def option_param(option: Option, *, rescore: bool = False) -> inspect.Parameter:
    """A spec Option as a typer option; on `rescore` every value defaults to None (not given)."""
    if option.type == "bool":
        on, off = option.boolean_flags or (option.cli_flag, "")
        default = None if rescore else bool(option.default)
        flag = f"{on}/{off}" if off else on
        return param(option.name, Annotated[bool | None, typer.Option(flag, help=option.help)], default)
    # choices are checked at parse time on `run`; on `rescore` the config names the bad value itself
    choose = option.choices and not option.repeatable and not rescore
    kind: Any = Literal[option.choices] if choose else _TYPES[option.type]
    info = typer.Option(option.cli_flag, help=option.help)
    if option.repeatable:
        return param(option.name, Annotated[list[kind] | None, info], None)
    default = None if rescore else option.default
    return param(option.name, Annotated[kind | None, info], default)


def model_call_params() -> list[inspect.Parameter]:
    """The options of every command that calls models (`run <benchmark>`, `synth <benchmark>`): cost cap,
    prices, call cache, progress bar and the error rate that fails the command; keyword parameters."""
    return [
        param("max_cost", MaxCostOpt, None),
        param("prices", PricesOpt, None),
        param("cache", CacheOpt, None),
        param("no_cache", NoCacheOpt, False),
        param("progress", ProgressOpt, True),
        param("max_error_rate", MaxErrorRateOpt, 1.0),
    ]
