"""`personalign run benchpres` and `personalign benchpres build|validate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from personalign.cli_common import (
    CacheOpt,
    MaxCostOpt,
    MaxErrorRateOpt,
    NoCacheOpt,
    PricesOpt,
    ProgressOpt,
    console,
    exit_for_run,
)
from personalign.cli_common import fail as _fail
from personalign.errors import PersonalignError
from personalign.llm.spec import EMBEDDED_DEFAULT, subject_and_judge
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).


def run_benchpres_cmd(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Subject model spec (default: local/smollm2).")
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option("--judge", "-j", help="Preference judge spec (required with --model)."),
    ] = None,
    completeness_judge: Annotated[
        str | None, typer.Option(help="Task-completeness judge spec (default: --judge).")
    ] = None,
    data: Annotated[
        str, typer.Option(help="'fixture', 'hf[:repo[:split]]', or a .parquet/.json/.jsonl file.")
    ] = "fixture",
    protocol: Annotated[
        str,
        typer.Option(
            help="personalign (JSON schemas, one re-ask, truncated replies are errors; works with the "
            "embedded model) | paper (the paper's stated protocol: free-form judge answers parsed "
            "strictly, completeness ending 'Rating: [[X]]', truncated replies scored on their text).",
        ),
    ] = "personalign",
    mitigation: Annotated[
        bool,
        typer.Option(
            "--mitigation/--no-mitigation",
            help="Add the instruction to apply only the preferences that suit the context.",
        ),
    ] = False,
    reasoning: Annotated[
        str, typer.Option(help="default (send nothing) | on | off: the subject's reasoning mode.")
    ] = "default",
    context: Annotated[
        str,
        typer.Option(
            help="Context strategy: how memory reaches the subject. full (every statement, as in the "
            "paper) | memory (the memory engine applies only the preferences its judge selects)."
        ),
    ] = "full",
    memory_judge: Annotated[
        str | None,
        typer.Option(help="With --context memory: the model deciding apply/suppress (default: --judge)."),
    ] = None,
    selection_only: Annotated[
        bool,
        typer.Option(
            "--selection-only",
            help="With --context memory: only the engine's apply/suppress decisions, scored against "
            "preference_label (no subject model, no preference judge).",
        ),
    ] = False,
    samples: Annotated[
        int | None,
        typer.Option(help="Responses per row, averaged (default 3; 1 for the embedded local/smollm2)."),
    ] = None,
    temperature: Annotated[float, typer.Option(help="Subject sampling temperature.")] = 1.0,
    completeness: Annotated[
        bool, typer.Option("--completeness/--no-completeness", help="Rate task completeness 1-5.")
    ] = True,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N rows.")] = None,
    concurrency: Annotated[int, typer.Option(help="Responses evaluated at once.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed for bootstrap CIs.")] = 0,
    run_dir: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/benchpres/<derived name>).")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Max tokens per response, reasoning included (default 4096; 160 for the embedded model)."
        ),
    ] = None,
    judge_max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Max tokens per judge answer, reasoning included (default 4096; 256 when every judge "
            "is the embedded model)."
        ),
    ] = None,
    max_cost: MaxCostOpt = None,
    prices: PricesOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
) -> None:
    """Run BenchPreS: are stored preferences applied only where the context allows them?"""
    from personalign.benchmarks.benchpres.report import print_run_summary
    from personalign.benchmarks.benchpres.run import defaults_for, run_benchpres
    from personalign.benchmarks.benchpres.steps import BenchPresConfig
    from personalign.benchmarks.cupid.run import RunSettings
    from personalign.runs.lifecycle import SMALL_MODEL_NOTICE

    try:
        subject, judge_spec = subject_and_judge(model, judge)
        defaults = defaults_for(subject, [judge_spec, completeness_judge or judge_spec])
        config = BenchPresConfig(
            subject=subject,
            judge=judge_spec,
            completeness_judge=completeness_judge or judge_spec,
            mitigation=mitigation,
            reasoning=reasoning,  # type: ignore[arg-type]
            samples=samples if samples is not None else (1 if selection_only else defaults.samples),
            temperature=temperature,
            context=context,
            memory_judge=memory_judge,
            selection_only=selection_only,
            completeness=completeness,
            subject_max_tokens=max_tokens if max_tokens is not None else defaults.max_tokens,
            judge_max_tokens=judge_max_tokens if judge_max_tokens is not None else defaults.judge_max_tokens,
            protocol=protocol,  # type: ignore[arg-type]
        )
        settings = RunSettings(
            run_dir=run_dir,
            concurrency=concurrency,
            limit=limit,
            seed=seed,
            cache_path=cache,
            use_cache=not no_cache,
            max_cost_usd=max_cost,
            prices=prices,
            progress=progress,
        )
        console.print(
            f"benchpres: subject [bold]{safe(config.subject)}[/], judge {safe(config.judge)}, completeness "
            f"judge {safe(config.completeness_judge)}"
            + (f", memory judge {safe(config.selection_judge)}" if config.selection_judge else "")
            + f"; protocol {config.protocol}, {safe(config.condition)}, {config.samples} sample(s) at "
            f"temperature {config.temperature:g}, max {config.subject_max_tokens} tokens "
            f"(judges {config.judge_max_tokens})"
        )
        if EMBEDDED_DEFAULT in (config.subject, config.judge):
            console.print(f"[yellow]{SMALL_MODEL_NOTICE}[/]")
        result = run_benchpres(config, settings, data=data)
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


benchpres_app = typer.Typer(
    no_args_is_help=True, help="BenchPreS tools: build rows, validate files, re-judge runs."
)


@benchpres_app.command("build")
def build_cmd(
    source: Annotated[Path, typer.Argument(help='JSON file: {"profiles": [...], "contexts": [...]}')],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the rows (.jsonl).")],
) -> None:
    """Compose BenchPreS rows (official schema) from memory profiles and recipient-task contexts."""
    from personalign.benchmarks.benchpres.build import build_rows, load_build_source

    try:
        loaded = load_build_source(source)
        rows = build_rows(loaded.profiles, loaded.contexts)
    except PersonalignError as exc:
        _fail(exc)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(row.model_dump(mode="json"), ensure_ascii=False) for row in rows]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    labels = [label for row in rows for label in row.preference_label]
    typer.echo(
        json.dumps(
            {"rows": len(rows), "apply": labels.count(True), "suppress": labels.count(False), "out": str(out)}
        )
    )


def validate_cmd(
    path: Annotated[str, typer.Argument(help="A BenchPreS .parquet/.json/.jsonl file, or 'fixture'.")],
) -> None:
    """Check a BenchPreS data file against the official schema."""
    from personalign.benchmarks.benchpres.data import load_benchpres
    from personalign.benchmarks.benchpres.judges import category_of

    try:
        dataset = load_benchpres(path)
    except PersonalignError as exc:
        _fail(exc)
        return
    labels = [label for row in dataset.rows for label in row.preference_label]
    domains: dict[str, int] = {}
    categories: dict[str, int] = {}
    sources: dict[str, int] = {}
    for row in dataset.rows:
        domains[row.domain or "unknown"] = domains.get(row.domain or "unknown", 0) + 1
        for index in range(len(row.preference_attribute)):
            category, source = category_of(row, index)
            categories[category] = categories.get(category, 0) + 1
            sources[source] = sources.get(source, 0) + 1
    typer.echo(
        json.dumps(
            {
                "source": dataset.source,
                "rows": len(dataset.rows),
                "profiles": len({row.name for row in dataset.rows}),
                "apply": labels.count(True),
                "suppress": labels.count(False),
                "by_domain": domains,
                "by_category": categories,
                "category_source": sources,
            }
        )
    )


def rescore_cmd(
    run: Annotated[Path, typer.Argument(help="A finished BenchPreS run directory.")],
    judge: Annotated[str | None, typer.Option("--judge", "-j", help="New preference judge spec.")] = None,
    completeness_judge: Annotated[
        str | None, typer.Option(help="New completeness judge spec (default: --judge).")
    ] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Where to write the re-scored run.")] = None,
    concurrency: Annotated[int, typer.Option()] = 8,
    cache: CacheOpt = None,
    progress: ProgressOpt = True,
    max_error_rate: MaxErrorRateOpt = 1.0,
) -> None:
    """Re-judge a run's saved responses with other judges (no subject calls)."""
    from personalign.benchmarks.benchpres.report import print_run_summary
    from personalign.benchmarks.benchpres.run import rescore_benchpres
    from personalign.benchmarks.cupid.run import RunSettings

    try:
        result = rescore_benchpres(
            run,
            RunSettings(run_dir=run_dir, concurrency=concurrency, cache_path=cache, progress=progress),
            judge=judge,
            completeness_judge=completeness_judge,
        )
    except PersonalignError as exc:
        _fail(exc)
        return
    print_run_summary(result.summary, result.run_dir.path)
    exit_for_run(result.outcome.status, result.outcome.records, max_error_rate)


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    run_app.command("benchpres")(run_benchpres_cmd)
    app.add_typer(benchpres_app, name="benchpres")
