"""The `personalign` command, driven by the benchmark registry.

`personalign run <benchmark>` exists for every registered benchmark: its options are built from the
benchmark's spec (roles, Options) plus the shared run options, and the spec is imported only when its
command runs or its help is shown (`personalign --help` and `personalign run --help` import no
benchmark). `rescore`, `report`, `validate` and `agree` read the benchmark from the run's manifest
(or `--benchmark`) and ask its spec: no command names a benchmark. A benchmark's extra commands
(`run hicupid-retrieval`, `benchpres build`) come from its spec's optional `cli` attribute.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer import _click as click
from typer.core import TyperGroup

from personalign import registry
from personalign.cli_common import (
    EXIT_INTERRUPTED,
    BatchOpt,
    CacheOpt,
    MaxErrorRateOpt,
    ProgressOpt,
    ProtocolDirOpt,
    cli_errors,
    console,
    exit_for_run,
    model_call_params,
    new_app,
    option_param,
)
from personalign.cli_common import build_command as _command
from personalign.cli_common import param as _param
from personalign.errors import ConfigError
from personalign.redact import safe

if TYPE_CHECKING:  # typing only: runs.spec loads the model layer, which --help never needs
    from personalign.runs.spec import BenchmarkSpec, Role

    AnySpec = BenchmarkSpec[Any, Any, Any]

# Command bodies import the run machinery and the benchmark when they run: CLI start-up speed is the
# only reason, never an import cycle (the layers are checked by lint-imports; docs/architecture.md).


# personalign's other commands, each added by its module's `register(app[, run_app])` when the command
# is asked for (or listed by `personalign --help`): building every command's options at each start
# costs ~40 ms, and a run needs only `run`. Name -> (module, whether register takes run_app too).
OWN_COMMANDS: dict[str, tuple[str, bool]] = {
    "memory-eval": ("personalign.cli_memory", True),
    "view": ("personalign.cli_view", False),
    "protocol": ("personalign.cli_protocol", False),
    "serve": ("personalign.cli_serve", False),
    "synth": ("personalign.cli_synth", True),
    "train": ("personalign.cli_train", False),
}


@cache
def _own_command(name: str) -> Any:
    """The click command of one of `OWN_COMMANDS`, registered on a holder app from its module."""
    module, with_run = OWN_COMMANDS[name]
    register = registry.load_target(f"{module}:register")
    holder = new_app()
    if with_run:
        register(holder, new_app())
    else:
        register(holder)
    return typer.main.get_group(holder).commands[name]


@cache
def _extensions() -> tuple[dict[str, Any], dict[str, Any]]:
    """The extra commands of every registered benchmark (its spec's optional `cli` attribute,
    ``"module:register"``), as (top-level commands, `run` subcommands). Loaded only when a command
    name is not one of personalign's own, so start-up imports no benchmark."""
    ext_app, ext_run = new_app(), new_app()
    for name in registry.names():
        target = getattr(registry.get(name), "cli", None)
        if target:
            registry.load_target(target)(ext_app, ext_run)

    def commands(app: typer.Typer) -> dict[str, Any]:
        if not app.registered_commands and not app.registered_groups:
            return {}
        return dict(typer.main.get_group(app).commands)

    return commands(ext_app), commands(ext_run)


class QuickHelpGroup(TyperGroup):
    """A group whose `--help` flag is False, not None, when not given: typer coerces a None flag
    through a pydantic adapter (~80 ms to import) whenever a subcommand runs (`personalign run --help`)."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


class RootGroup(QuickHelpGroup):
    """The top-level group: personalign's own commands, then benchmarks' extra commands (lazily)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *OWN_COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in OWN_COMMANDS:
            return _own_command(cmd_name)
        return super().get_command(ctx, cmd_name) or _extensions()[0].get(cmd_name)


class RunGroup(QuickHelpGroup):
    """`personalign run`: one command per registered benchmark, built from its spec when it runs or
    its own help is shown; the listing in `personalign run --help` imports no benchmark."""

    listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*registry.names(), *super().list_commands(ctx)]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if registry.has(cmd_name):
            return _listed(cmd_name) if self.listing else benchmark_command(registry.get(cmd_name))
        return super().get_command(ctx, cmd_name) or _extensions()[1].get(cmd_name)


app = new_app(
    cls=RootGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Measure how LLM assistants personalize.",
    epilog="A benchmark's own commands are listed by `personalign run <benchmark> --help`.",
)
run_app = new_app(cls=RunGroup, no_args_is_help=True, help="Run a benchmark.")
app.add_typer(run_app, name="run")


# --- `personalign run <benchmark>`, built from the spec ------------------------------------------


def _listed(name: str) -> Any:
    """The entry of `personalign run --help`: only the name (the spec stays unloaded)."""

    def placeholder() -> None:  # pragma: no cover - never invoked: get_command builds the real one
        return None

    return _command(name, placeholder, [], f"Run the {name} benchmark (personalign run {name} --help).")


def role_flags(role: str) -> list[str]:
    """--model/-m for the subject, --judge/-j for the judge, --<role> for any other role."""
    return {"subject": ["--model", "-m"], "judge": ["--judge", "-j"]}.get(
        role, ["--" + role.replace("_", "-")]
    )


def role_param(role: Role) -> inspect.Parameter:
    help_text = role.help
    if role.name == "subject":
        help_text = "Subject model spec (default: local/smollm2)."
    elif role.name == "judge":
        help_text = f"{help_text} Required with --model."
    name = "model" if role.name == "subject" else role.name
    return _param(name, Annotated[str | None, typer.Option(*role_flags(role.name), help=help_text)], None)


def _shared_params(spec: AnySpec) -> list[inspect.Parameter]:
    """The options every benchmark's run takes (how to run, never what)."""
    noun = spec.item_noun

    def option(name: str, kind: Any, default: Any, *decls: str, **info: Any) -> inspect.Parameter:
        return _param(name, Annotated[kind, typer.Option(*decls, **info)], default)

    return [
        option("data", str, "fixture", help="'fixture', 'hf[:repo[:split]]', or a local file or directory."),
        option("limit", int | None, None, help=f"Evaluate only the first N selected {noun}."),
        option("concurrency", int, 8, help=f"How many {noun} are evaluated at once."),
        option("seed", int, spec.default_seed, help="Seed for bootstrap CIs and any sampling."),
        option(
            "run_dir", Path | None, None, help=f"Run directory (default: runs/{spec.name}/<derived name>)."
        ),
        option(
            "protocol",
            str | None,
            None,
            help=getattr(spec, "protocol_help", None)
            or "paper (the official prompts, pinned by sha256) | personalign (ours). "
            "Default: paper with --data hf, else personalign.",
        ),
        _param("protocol_dir", ProtocolDirOpt, None),
        *model_call_params(),
        _param("batch", BatchOpt, False),
    ]


def benchmark_command(spec: AnySpec) -> Any:
    """`personalign run <spec.name>`: its roles, its Options, then the shared options."""
    params = [
        *(role_param(r) for r in spec.roles),
        *(option_param(o) for o in spec.options),
        *_shared_params(spec),
    ]
    return _command(spec.name, _run_callback(spec), params, f"{spec.title}.{_extension_note(spec)}")


def _extension_note(spec: AnySpec) -> str:
    """Names the benchmark's extra commands in its run help (they are not listed at start-up)."""
    target = getattr(spec, "cli", None)
    if not target:
        return ""
    top, runs = new_app(), new_app()
    registry.load_target(target)(top, runs)
    names = [f"run {c.name}" for c in runs.registered_commands]
    names += [str(g.name) for g in top.registered_groups] + [str(c.name) for c in top.registered_commands]
    return f"\n\nIts own commands: {', '.join('personalign ' + n for n in names)}." if names else ""


def _run_callback(spec: AnySpec) -> Callable[..., None]:
    """`personalign run <name>`: the public `personalign.api.run` with the parsed options, the run's
    description printed first, its summary and exit code after."""

    def run(**kw: Any) -> None:
        from personalign.api import run as run_api
        from personalign.llm.spec import EMBEDDED_DEFAULT
        from personalign.runs.lifecycle import SMALL_MODEL_NOTICE

        model, judge = kw.pop("model"), kw.pop("judge")
        roles = {r.name: kw.pop(r.name) for r in spec.roles if r.name not in ("subject", "judge")}
        options = {o.name: kw.pop(o.name) for o in spec.options}
        max_error_rate, no_cache = kw.pop("max_error_rate"), kw.pop("no_cache")

        def announce(text: str) -> None:
            console.print(safe(text))
            if EMBEDDED_DEFAULT in (model or EMBEDDED_DEFAULT, judge or EMBEDDED_DEFAULT):
                console.print(f"[yellow]{SMALL_MODEL_NOTICE}[/]")

        with cli_errors():
            result = run_api(
                spec.name,
                model=model,
                judge=judge,
                models={k: v for k, v in roles.items() if v is not None},
                use_cache=not no_cache,
                max_cost_usd=kw.pop("max_cost"),
                announce=announce,
                **kw,
                **options,
            )
        spec.print_summary(result.summary, result.run_dir.path)
        exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)

    return run


# --- commands for every benchmark --------------------------------------------------------------


def _manifest_benchmark(run: Path) -> str:
    from personalign.runs.schema import benchmark_of
    from personalign.runs.store import RunDir

    return benchmark_of(RunDir(run).read_manifest())


def _rescore_extras(spec: AnySpec, run: Path, args: Sequence[str]) -> dict[str, Any]:
    """The benchmark's own rescore flags (its rescorable roles and rescore Options) from `args`;
    a flag it does not take is refused, naming the run and the benchmark."""
    params = [role_param(r) for r in spec.roles if r.rescorable and r.name not in ("subject", "judge")]
    params += [option_param(o, rescore=True) for o in spec.options if o.rescore]
    parsed: dict[str, Any] = {}

    def keep(**kw: Any) -> None:
        parsed.update(kw)

    command = _command("rescore", keep, params, "")
    try:
        command.main(list(args), prog_name="rescore", standalone_mode=False)
    except click.exceptions.NoSuchOption as exc:
        raise ConfigError(f"{run} is a {spec.name} run: {exc.option_name} does not apply to it") from None
    except click.exceptions.UsageError as exc:
        raise ConfigError(f"{run} is a {spec.name} run: {exc.format_message()}") from None
    return parsed


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def rescore(
    ctx: typer.Context,
    run: Annotated[Path, typer.Argument(help="A finished run directory (of any benchmark).")],
    judge: Annotated[str | None, typer.Option("--judge", "-j", help="The new judge model spec.")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Where to write the re-scored run.")] = None,
    concurrency: Annotated[int, typer.Option()] = 8,
    cache: CacheOpt = None,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
    protocol_dir: ProtocolDirOpt = None,
    batch: BatchOpt = False,
) -> None:
    """Re-judge a run's saved subject outputs with other judges (no subject calls), into a new run.

    The benchmark is read from the run's manifest; the command also takes that benchmark's other
    judge roles and its re-scoring options (as `personalign run <benchmark> --help` names them, e.g.
    --matcher-format); a flag the benchmark does not take is refused.
    """
    from personalign.api import rescore as rescore_api

    with cli_errors():
        spec = registry.get(_manifest_benchmark(run))
        extras = _rescore_extras(spec, run, ctx.args)
        roles = {r.name for r in spec.roles}
        models = {k: v for k, v in extras.items() if k in roles and v is not None}
        options = {k: v for k, v in extras.items() if k not in roles}
        result = rescore_api(
            run,
            judge=judge,
            models=models,
            run_dir=run_dir,
            concurrency=concurrency,
            cache=cache,
            progress=progress,
            protocol_dir=protocol_dir,
            batch=batch,
            **options,
        )
    spec.print_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories (any benchmarks).")],
    out: Annotated[
        Path, typer.Option(help="Directory for report.md/.csv/.json and any benchmark's own report files.")
    ] = Path("report"),
    html: Annotated[
        Path | None, typer.Option(help="Also write one self-contained HTML page (tables, plots, manifests).")
    ] = None,
) -> None:
    """Print and write the paper-style tables for one or more runs, grouped by benchmark.

    Benchmarks with `report_tables` share report.md/.csv/.json; the others write their own files."""
    from personalign.report.tables import Table, write_tables

    with cli_errors():
        groups: dict[str, list[Path]] = {}
        for path in runs:
            groups.setdefault(_manifest_benchmark(path), []).append(path)
        shared: dict[str, Table] = {}
        own: list[tuple[AnySpec, list[Path]]] = []
        for name, paths in groups.items():
            spec = registry.get(name)
            tables = getattr(spec, "report_tables", None)
            if tables is not None:
                shared.update(tables(paths))
            else:
                own.append((spec, paths))
        if shared:
            typer.echo(write_tables(out, "report", shared))
            console.print(f"written to {safe(out)}/report.md, report.csv, report.json")
        for spec, paths in own:
            typer.echo(spec.write_report(paths, out))
            console.print(f"{spec.name} report written to {safe(out)}")
        if html is not None:
            from personalign.view.report_html import write_html_report

            console.print(f"HTML report written to {safe(write_html_report(runs, html))}")


@app.command()
def validate(
    path: Annotated[
        str,
        typer.Argument(help="A data file or directory in the benchmark's official schema, or 'fixture'."),
    ],
    benchmark: Annotated[
        str, typer.Option("--benchmark", "-b", help="A registered benchmark (personalign run --help).")
    ] = registry.DEFAULT_BENCHMARK,
) -> None:
    """Check data against a benchmark's official schema and print what it holds."""
    with cli_errors():
        counts = registry.get(benchmark).validate(path)
    typer.echo(json.dumps(counts))


@app.command()
def agree(
    run_a: Annotated[Path, typer.Argument(help="A run directory.")],
    run_b: Annotated[
        Path, typer.Argument(help="Another run of the same benchmark, judged by another model.")
    ],
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON here.")] = None,
) -> None:
    """Cohen's kappa and raw agreement between two runs' judges on the same generations."""
    from personalign.api import agreement

    with cli_errors():
        result = agreement(run_a, run_b)
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    typer.echo(text)


def main() -> None:
    """The console entry point. Typer maps a Ctrl-C outside a run's event loop to exit code 130, like
    a run interrupted mid-way (which exits 130 through `exit_for_run`); see `cli_common`."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        console.print("interrupted; finished instances are saved, re-run the same command to resume")
        sys.exit(EXIT_INTERRUPTED)
