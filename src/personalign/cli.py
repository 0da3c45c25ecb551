"""The `personalign` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from personalign import cli_benchpres, cli_hicupid
from personalign.cli_common import (
    EXIT_INTERRUPTED,
    CacheOpt,
    MaxCostOpt,
    MaxErrorRateOpt,
    NoCacheOpt,
    PricesOpt,
    ProgressOpt,
    ProtocolDirOpt,
    ProtocolOpt,
    console,
    exit_for_run,
)
from personalign.cli_common import fail as _fail
from personalign.cli_memory import register as register_memory
from personalign.cli_protocol import register as register_protocol
from personalign.cli_synth import register as register_synth
from personalign.cli_view import register as register_view
from personalign.errors import ConfigError, PersonalignError
from personalign.llm.spec import EMBEDDED_DEFAULT, subject_and_judge
from personalign.protocols.upstream import resolve_protocol
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure how LLM assistants personalize.")
run_app = typer.Typer(no_args_is_help=True, help="Run a benchmark.")
app.add_typer(run_app, name="run")

ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Subject model spec (default: local/smollm2).")
]
JudgeOpt = Annotated[
    str | None,
    typer.Option("--judge", "-j", help="Judge model spec for every judge role (required with --model)."),
]


@run_app.command("cupid")
def run_cupid_cmd(
    model: ModelOpt = None,
    judge: JudgeOpt = None,
    decomposer: Annotated[str | None, typer.Option(help="Decomposer spec (default: --judge).")] = None,
    matcher: Annotated[str | None, typer.Option(help="Matcher spec (default: --judge).")] = None,
    matcher_format: Annotated[
        str, typer.Option(help="'default' (GPT-style prompt) or 'prefmatcher' (PrefMatcher-7B format).")
    ] = "default",
    data: Annotated[
        str, typer.Option(help="'fixture', 'hf[:repo[:split]]', or a .parquet/.json/.jsonl file or dir.")
    ] = "fixture",
    task: Annotated[
        str, typer.Option(help="inference (the paper's default) | generation | both")
    ] = "inference",
    context: Annotated[
        str, typer.Option(help="full | oracle | oracle-factor | summaries | gold-preference | memory")
    ] = "full",
    instance_type: Annotated[
        list[str] | None,
        typer.Option("--instance-type", help="consistent | contrastive | changing (repeatable)"),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N selected instances.")] = None,
    concurrency: Annotated[int, typer.Option(help="Instances evaluated at once.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed for bootstrap CIs and any sampling.")] = 0,
    run_dir: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/cupid/<derived name>).")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Max tokens of the subject's answers "
            "(default: 8192 under --protocol paper; else 256 for local/smollm2, 1024 otherwise)."
        ),
    ] = None,
    protocol: ProtocolOpt = None,
    protocol_dir: ProtocolDirOpt = None,
    system_role: Annotated[
        str,
        typer.Option(
            help="Role of the judges' system message under --protocol paper: 'system', or 'developer' "
            "as the official code sends to OpenAI models."
        ),
    ] = "system",
    max_cost: MaxCostOpt = None,
    prices: PricesOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
) -> None:
    """Run CUPID (inference and/or generation) and write a run directory."""
    from personalign.benchmarks.cupid.report import print_run_summary
    from personalign.benchmarks.cupid.run import RunSettings, run_cupid
    from personalign.benchmarks.cupid.steps import CupidConfig, default_subject_max_tokens
    from personalign.runs.lifecycle import SMALL_MODEL_NOTICE

    try:
        subject, judge_spec = subject_and_judge(model, judge)
        chosen = resolve_protocol(protocol, official_data=data.split(":", 1)[0] == "hf")
        config = CupidConfig(
            subject=subject,
            decomposer=decomposer or judge_spec,
            matcher=matcher or judge_spec,
            judge=judge_spec,
            task=task,  # type: ignore[arg-type]
            context=context,
            matcher_format=matcher_format,  # type: ignore[arg-type]
            subject_max_tokens=(
                max_tokens if max_tokens is not None else default_subject_max_tokens(subject, chosen)
            ),
            protocol=chosen,
            system_role=system_role,  # type: ignore[arg-type]
        )
        settings = RunSettings(
            run_dir=run_dir,
            concurrency=concurrency,
            limit=limit,
            selection={"instance_types": tuple(instance_type or ())},
            seed=seed,
            cache_path=cache,
            use_cache=not no_cache,
            max_cost_usd=max_cost,
            prices=prices,
            progress=progress,
            protocol_dir=protocol_dir,
        )
        console.print(
            f"cupid: subject [bold]{safe(config.subject)}[/], decomposer {safe(config.decomposer)}, "
            f"matcher {safe(config.matcher)} ({safe(config.matcher_format)}), judge {safe(config.judge)}; "
            f"task {safe(config.task)}, context {safe(config.context)}, protocol [bold]{config.protocol}[/]"
        )
        if EMBEDDED_DEFAULT in (config.subject, config.judge):
            console.print(f"[yellow]{SMALL_MODEL_NOTICE}[/]")
        result = run_cupid(config, settings, data=data)
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


@app.command()
def rescore(
    run: Annotated[Path, typer.Argument(help="A finished run directory (CUPID, HiCUPID or BenchPreS).")],
    judge: JudgeOpt = None,
    decomposer: Annotated[str | None, typer.Option(help="CUPID: new decomposer spec.")] = None,
    matcher: Annotated[str | None, typer.Option(help="CUPID: new matcher spec.")] = None,
    matcher_format: Annotated[str | None, typer.Option(help="CUPID: default | prefmatcher.")] = None,
    judge_format: Annotated[str | None, typer.Option(help="HiCUPID: json | text.")] = None,
    both_orders: Annotated[
        bool | None, typer.Option("--both-orders/--one-order", help="HiCUPID: judge A/B in both orders.")
    ] = None,
    completeness_judge: Annotated[
        str | None, typer.Option(help="BenchPreS: new completeness judge spec (default: --judge).")
    ] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Where to write the re-scored run.")] = None,
    concurrency: Annotated[int, typer.Option()] = 8,
    cache: CacheOpt = None,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
    protocol_dir: ProtocolDirOpt = None,
) -> None:
    """Re-judge a run's saved subject outputs with other judges (no subject calls), into a new run.

    The benchmark is read from the run's manifest; options of other benchmarks are refused.
    """
    from personalign.runs.store import RunDir

    try:
        benchmark = str(RunDir(run).read_manifest().get("benchmark", "cupid"))
        own = {
            "cupid": {"decomposer", "matcher", "matcher_format", "protocol_dir"},
            "hicupid": {"judge_format", "both_orders", "protocol_dir"},
            "benchpres": {"completeness_judge"},
        }
        given = {
            name
            for name, value in {
                "decomposer": decomposer,
                "matcher": matcher,
                "matcher_format": matcher_format,
                "judge_format": judge_format,
                "both_orders": both_orders,
                "completeness_judge": completeness_judge,
                "protocol_dir": protocol_dir,
            }.items()
            if value is not None
        }
        foreign = sorted(given - own.get(benchmark, set()))
        if foreign:
            flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
            raise ConfigError(f"{run} is a {benchmark} run: {flags} does not apply to it")
    except PersonalignError as exc:
        _fail(exc)
        return
    if benchmark == "hicupid":
        if judge is None:
            _fail(ConfigError("re-scoring a HiCUPID run needs --judge"))
        cli_hicupid.rescore_cmd(
            run,
            str(judge),
            judge_format,
            both_orders,
            run_dir,
            concurrency,
            cache,
            progress,
            max_error_rate,
            protocol_dir,
        )
        return
    if benchmark == "benchpres":
        cli_benchpres.rescore_cmd(
            run, judge, completeness_judge, run_dir, concurrency, cache, progress, max_error_rate
        )
        return

    from personalign.benchmarks.cupid.report import print_run_summary
    from personalign.benchmarks.cupid.run import RunSettings, rescore_cupid

    try:
        result = rescore_cupid(
            run,
            RunSettings(
                run_dir=run_dir,
                concurrency=concurrency,
                cache_path=cache,
                progress=progress,
                protocol_dir=protocol_dir,
            ),
            judge=judge,
            decomposer=decomposer,
            matcher=matcher,
            matcher_format=matcher_format,
        )
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: Annotated[
        Path, typer.Option(help="Directory for report.md/.csv/.json (CUPID, HiCUPID) and benchpres.* files.")
    ] = Path("report"),
    html: Annotated[
        Path | None, typer.Option(help="Also write one self-contained HTML page (tables, plots, manifests).")
    ] = None,
) -> None:
    """Print and write the paper-style tables for one or more runs (CUPID, HiCUPID, BenchPreS)."""
    from personalign.benchmarks.benchpres import report as benchpres_report
    from personalign.benchmarks.cupid.report import build_report, write_report
    from personalign.benchmarks.hicupid import report as hicupid_report

    try:
        kinds = {path: benchpres_report.benchmark_of(path) for path in runs}
        benchpres_runs = [p for p, kind in kinds.items() if kind == "benchpres"]
        hicupid_runs = [p for p, kind in kinds.items() if kind == "hicupid"]
        cupid_runs = [p for p, kind in kinds.items() if kind not in ("benchpres", "hicupid")]
        tables = build_report(cupid_runs) if cupid_runs else {}
        if hicupid_runs:
            tables.update(hicupid_report.build_report(hicupid_runs))
        if tables:
            typer.echo(write_report(tables, out))
            console.print(f"written to {safe(out)}/report.md, report.csv, report.json")
        if benchpres_runs:
            typer.echo(benchpres_report.write_report(benchpres_report.build_report(benchpres_runs), out))
            console.print(f"written to {safe(out)}/benchpres.md, .csv, .json and benchpres_scatter.png/.svg")
        if html is not None:
            from personalign.view.report_html import write_html_report

            console.print(f"HTML report written to {safe(write_html_report(runs, html))}")
    except PersonalignError as exc:
        _fail(exc)
        return


@app.command()
def validate(
    path: Annotated[
        str,
        typer.Argument(help="A data file or directory in the benchmark's official schema, or 'fixture'."),
    ],
    benchmark: Annotated[
        str, typer.Option("--benchmark", "-b", help="cupid | hicupid | benchpres")
    ] = "cupid",
) -> None:
    """Check data against a benchmark's official schema and print what it holds."""
    if benchmark == "hicupid":
        cli_hicupid.validate_cmd(path)
        return
    if benchmark == "benchpres":
        cli_benchpres.validate_cmd(path)
        return
    if benchmark != "cupid":
        _fail(PersonalignError(f"unknown benchmark {benchmark!r} (cupid | hicupid | benchpres)"))
    from personalign.benchmarks.cupid.data import load_cupid

    try:
        dataset = load_cupid(path)
    except PersonalignError as exc:
        _fail(exc)
        return
    counts: dict[str, int] = {}
    for instance in dataset.instances:
        counts[instance.instance_type] = counts.get(instance.instance_type, 0) + 1
    typer.echo(json.dumps({"source": dataset.source, "instances": len(dataset.instances), "by_type": counts}))


cli_benchpres.register(app, run_app)
cli_hicupid.register(app, run_app)
register_memory(app, run_app)
register_protocol(app)
register_synth(app, run_app)
register_view(app)


def main() -> None:
    """The console entry point. Typer maps a Ctrl-C outside a run's event loop to exit code 130, like
    a run interrupted mid-way (which exits 130 through `exit_for_run`); see `cli_common`."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        console.print("interrupted; finished instances are saved, re-run the same command to resume")
        sys.exit(EXIT_INTERRUPTED)
