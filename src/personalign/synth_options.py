"""What every `personalign synth <benchmark>` command shares: the common options, the model factory,
the progress bar and the closing summary. A benchmark's own synth command (its spec's optional
`synth` hook, e.g. `benchmarks/cupid/synth_cli.py`) builds on these."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from personalign.cli_common import (
    EXIT_TOO_MANY_ERRORS,
    cli_errors,
    console,
    exit_code,
    model_call_params,
)
from personalign.redact import safe

GeneratorOpt = Annotated[
    str | None,
    typer.Option("--generator", "-g", help="Model spec that writes the data (default: local/smollm2)."),
]


def embedded_default() -> str:
    """The bundled model's spec (imported when a command runs: the model layer is slow to load)."""
    from personalign.llm.spec import EMBEDDED_DEFAULT

    return EMBEDDED_DEFAULT


OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output directory (re-run to resume).")]
SeedOpt = Annotated[int, typer.Option(help="Seed for every sampled choice and for sampling.")]
ConcurrencyOpt = Annotated[int, typer.Option(help="Units (personas, users, profiles) generated at once.")]
ResampleOpt = Annotated[
    bool,
    typer.Option(
        "--resample-failed",
        help="Re-ask a failed unit's remaining calls as new samples instead of replaying cached answers.",
    ),
]
SeedReuseOpt = Annotated[
    bool,
    typer.Option(
        "--allow-seed-reuse",
        help="Allow more units than seed descriptions (units sharing a seed get near-identical data).",
    ),
]
LengthOpt = Annotated[
    float | None,
    typer.Option(
        help="Multiply the schemas' string length bounds by this; unset drops them (fastest on llama.cpp)."
    ),
]


def synth_factory(cache: Path | None, no_cache: bool, max_cost: float | None, prices: Path | None) -> Any:
    from personalign.runs.lifecycle import RunSettings, make_factory

    return make_factory(
        RunSettings(cache_path=cache, use_cache=not no_cache, max_cost_usd=max_cost, prices=prices)
    )


def with_progress(
    total: int, label: str, factory: Any, show: bool, work: Callable[[Callable[[Any], None] | None], Any]
) -> Any:
    from personalign.runs.progress import RunProgress

    if not show:
        return work(None)
    progress = RunProgress(factory.tracker, total=total, label=label, console=console)
    with progress:
        return work(lambda _state: progress.advance())


def print_summary(summary: dict[str, Any], out: Path, unit: str, max_error_rate: float = 1.0) -> None:
    """What was generated (`unit`: "personas", "users", ...), what failed and what was rejected by
    validation; exits 4 when nothing passed or more than `max_error_rate` of the units failed or were
    rejected."""
    console.print(
        f"[bold]{summary['pipeline']}[/]: {summary['generated']}/{summary['n_units']} {unit} generated, "
        f"{summary['passed_validation']} passed validation, {len(summary['failed'])} failed, "
        f"{len(summary['rejected'])} rejected"
    )
    for key, value in summary.get("written", {}).items():
        console.print(f"  {safe(key)}: {safe(value)}")
    for failure in summary["failed"]:
        console.print(
            f"  [red]failed[/] {safe(failure['id'])} at {safe(failure['stage'])}: {safe(failure['error'])}"
        )
    for rejection in summary["rejected"]:
        console.print(f"  [yellow]rejected[/] {safe(rejection['id'])}:")
        for problem in rejection["problems"][:5]:
            console.print(f"    - {safe(problem)}")
    verification = summary.get("verification")
    if verification:
        console.print(
            f"  verifier: {verification['instances_checked']} instances checked, {verification['verified']} "
            f"verified, {verification['repaired']} repaired, {verification['dropped']} dropped"
            + (f" ({safe(verification['dropped_by_reason'])})" if verification["dropped_by_reason"] else "")
        )
        if "agreement" in verification:
            a = verification["agreement"]
            console.print(
                f"  agreement with {safe(a['file'])}: n {a['n']}, "
                f"accuracy {a['accuracy']}, kappa {a['kappa']}"
            )
    usage = summary.get("usage", {})
    this = usage.get("this_invocation", usage)
    console.print(
        f"  calls {this.get('calls', 0)}, cache hits {this.get('cache_hits', 0)}, "
        f"tokens {this.get('tokens', 0):,}, cost ${this.get('cost_usd', 0.0):.4f}"
        + (
            f"; all {usage['invocations']} invocations: calls {usage.get('calls', 0)}, "
            f"tokens {usage.get('tokens', 0):,}, cost ${usage.get('cost_usd', 0.0):.4f}"
            if usage.get("invocations", 1) > 1
            else ""
        )
    )
    console.print(f"written to {safe(out)}/ (summary.json, validation.json)")
    if summary["passed_validation"] == 0:
        console.print("[bold red]no unit passed validation[/]")
        raise typer.Exit(EXIT_TOO_MANY_ERRORS)
    code = exit_code(
        "complete", len(summary["failed"]) + len(summary["rejected"]), summary["n_units"], max_error_rate
    )
    if code:
        console.print(f"[bold red]more than --max-error-rate {max_error_rate:g} of the units failed[/]")
        raise typer.Exit(code)


# --- one command per benchmark, with the shared options added -----------------------------------


@dataclass(frozen=True)
class SynthRun:
    """The options every `synth <benchmark>` command takes (how and where to run, the seeds), given to
    the benchmark's command function as one object."""

    name: str
    unit: str  # what the pipeline's units are called: "personas", "users", "profiles"
    out: Path
    generator: str
    seeds: Path | None
    allow_seed_reuse: bool
    length_scale: float | None
    seed: int
    concurrency: int
    cache: Path | None
    no_cache: bool
    max_cost: float | None
    prices: Path | None
    progress: bool
    resample_failed: bool
    max_error_rate: float

    def settings(self) -> dict[str, Any]:
        """The `SynthSettings` fields of the benchmark's config."""
        return {
            "seed": self.seed,
            "seeds_file": str(self.seeds) if self.seeds else None,
            "allow_seed_reuse": self.allow_seed_reuse,
            "length_scale": self.length_scale,
        }

    def run(self, n_units: int, synthesize: Callable[..., Any]) -> Any:
        """Build the model factory, call ``synthesize(out, factory, concurrency=, on_done=,
        resample_failed=)`` under the progress bar, print the summary; returns the pipeline's result."""
        factory = synth_factory(self.cache, self.no_cache, self.max_cost, self.prices)
        result = with_progress(
            n_units,
            f"synth {self.name}",
            factory,
            self.progress,
            lambda on_done: synthesize(
                self.out,
                factory,
                concurrency=self.concurrency,
                on_done=on_done,
                resample_failed=self.resample_failed,
            ),
        )
        print_summary(result.summary, self.out, self.unit, self.max_error_rate)
        return result


def _shared_params(name: str, concurrency: int, unit: str) -> list[inspect.Parameter]:
    """The shared options of `synth <name>` as keyword parameters with their typer annotations."""

    def option(key: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)

    seeds_help = (
        f"Seed descriptions for the {unit}: 'personahub[:SUBSET]' (PersonaHub, datasets hub, online), "
        "or a .jsonl/.json/.parquet file with occupation, description (or PersonaHub's 'input persona'). "
        "Default: the 40 bundled seeds."
    )
    return [
        option("out", OutOpt, Path(f"synth/{name}")),
        option("generator", GeneratorOpt, None),
        option("seeds", Annotated[Path | None, typer.Option(help=seeds_help)], None),
        option("allow_seed_reuse", SeedReuseOpt, False),
        option("length_scale", LengthOpt, None),
        option("seed", SeedOpt, 0),
        option("concurrency", ConcurrencyOpt, concurrency),
        option("resample_failed", ResampleOpt, False),
        *model_call_params(),
    ]


def synth_command(
    synth_app: typer.Typer, name: str, unit: str, *, concurrency: int = 2
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``function(run: SynthRun, **own_options)`` as `synth <name>`: its own options come from
    its signature, the shared ones (output, generator, seeds, cache, cost, progress, ...) are added
    here and handed over as one `SynthRun`, inside the CLI's error boundary."""

    def register(function: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(function, include_extras=True)
        own = [
            p.replace(annotation=hints[p.name], kind=inspect.Parameter.KEYWORD_ONLY)
            for p in list(inspect.signature(function).parameters.values())[1:]
        ]
        shared = _shared_params(name, concurrency, unit)
        shared_names = {p.name for p in shared}

        def command(**kwargs: Any) -> None:
            values = {k: kwargs.pop(k) for k in shared_names}
            with cli_errors():
                values["generator"] = values["generator"] or embedded_default()
                function(SynthRun(name=name, unit=unit, **values), **kwargs)

        command.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
        command.__doc__ = function.__doc__
        synth_app.command(name)(command)
        return function

    return register
