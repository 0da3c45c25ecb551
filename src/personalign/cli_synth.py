"""`personalign synth ...`: generate CUPID-, HiCUPID- and BenchPreS-style data with any model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from personalign.cli_common import (
    EXIT_TOO_MANY_ERRORS,
    CacheOpt,
    MaxCostOpt,
    MaxErrorRateOpt,
    NoCacheOpt,
    PricesOpt,
    ProgressOpt,
    cli_errors,
    console,
    exit_code,
)
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).

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


def _factory(cache: Path | None, no_cache: bool, max_cost: float | None, prices: Path | None) -> Any:
    from personalign.runs.lifecycle import RunSettings, make_factory

    return make_factory(
        RunSettings(cache_path=cache, use_cache=not no_cache, max_cost_usd=max_cost, prices=prices)
    )


def _with_progress(
    total: int, label: str, factory: Any, show: bool, work: Callable[[Callable[[Any], None] | None], Any]
) -> Any:
    from personalign.runs.progress import RunProgress

    if not show:
        return work(None)
    progress = RunProgress(factory.tracker, total=total, label=label, console=console)
    with progress:
        return work(lambda _state: progress.advance())


def print_summary(summary: dict[str, Any], out: Path, max_error_rate: float = 1.0) -> None:
    """What was generated, what failed and what was rejected by validation; exits 4 when nothing passed
    or more than `max_error_rate` of the units failed or were rejected."""
    unit = {"cupid": "personas", "hicupid": "users", "benchpres": "profiles"}[summary["pipeline"]]
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


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    synth_app = typer.Typer(no_args_is_help=True, help="Generate benchmark-style data with any model.")
    app.add_typer(synth_app, name="synth")

    @synth_app.command("cupid")
    def synth_cupid(
        out: OutOpt = Path("synth/cupid"),
        generator: GeneratorOpt = None,
        user_simulator: Annotated[
            str | None, typer.Option(help="User simulator spec (default: --generator).")
        ] = None,
        assistant: Annotated[
            str | None,
            typer.Option(
                help="Assistant simulator spec: a weaker model than the generator, as in the paper "
                "(`generator` uses the generator; required unless the generator is scripted or local)."
            ),
        ] = None,
        decomposer: Annotated[
            str | None, typer.Option(help="Preference decomposer spec (default: --generator).")
        ] = None,
        leak_judge: Annotated[
            str | None, typer.Option(help="Optional judge for the leak check (lexical check only if unset).")
        ] = None,
        verifier: Annotated[
            str | None,
            typer.Option(
                help="Judge for the verifier stage (checklist items expressed, request not revealing, "
                "A' contradicts A; failing instances repaired once or dropped). Default: --generator."
            ),
        ] = None,
        no_verify: Annotated[bool, typer.Option("--no-verify", help="Skip the verifier stage.")] = False,
        verify_against: Annotated[
            Path | None,
            typer.Option(
                help="Human labels (.jsonl/.json/.parquet: persona_id, instance_type, valid) to report "
                "the verifier's agreement with (accuracy, Cohen's kappa)."
            ),
        ] = None,
        personas: Annotated[int, typer.Option(help="Number of personas.")] = 4,
        factors: Annotated[int, typer.Option(help="Context factors per persona.")] = 8,
        sessions: Annotated[int, typer.Option(help="Sessions per persona (prior sessions = this - 5).")] = 13,
        max_turns: Annotated[int, typer.Option(help="Feedback rounds per dialogue at most.")] = 16,
        seeds: Annotated[
            Path | None,
            typer.Option(help="Seed descriptions (.jsonl/.json/.parquet with occupation, description)."),
        ] = None,
        leak_threshold: Annotated[
            float, typer.Option(help="Reject when the request holds this share of the preference's words.")
        ] = 0.6,
        allow_seed_reuse: SeedReuseOpt = False,
        length_scale: LengthOpt = None,
        seed: SeedOpt = 0,
        concurrency: ConcurrencyOpt = 4,
        cache: CacheOpt = None,
        no_cache: NoCacheOpt = False,
        max_cost: MaxCostOpt = None,
        prices: PricesOpt = None,
        progress: ProgressOpt = True,
        resample_failed: ResampleOpt = False,
        max_error_rate: MaxErrorRateOpt = 1.0,
    ) -> None:
        """CUPID-style personas, 13-session journeys and the three instance types (cupid.jsonl)."""
        from personalign.benchmarks.cupid.synth import CupidSynthConfig, default_assistant, synthesize_cupid

        with cli_errors():
            generator = generator or embedded_default()
            config = CupidSynthConfig(
                generator=generator,
                user_simulator=user_simulator or generator,
                assistant=default_assistant(generator, assistant),
                decomposer=decomposer or generator,
                leak_judge=leak_judge,
                verifier=None if no_verify else (verifier or generator),
                n_personas=personas,
                n_factors=factors,
                n_sessions=sessions,
                max_turns=max_turns,
                seed=seed,
                seeds_file=str(seeds) if seeds else None,
                allow_seed_reuse=allow_seed_reuse,
                leak_threshold=leak_threshold,
                length_scale=length_scale,
            )
            factory = _factory(cache, no_cache, max_cost, prices)
            console.print(
                f"synth cupid: generator [bold]{safe(config.generator)}[/], "
                f"user simulator {safe(config.user_simulator)}, "
                f"assistant {safe(config.assistant)}, decomposer {safe(config.decomposer)}, "
                f"leak judge {safe(config.leak_judge or '(lexical only)')}, "
                f"verifier {safe(config.verifier or '(none)')}; "
                f"{personas} personas -> {safe(out)}"
            )
            result = _with_progress(
                personas,
                "synth cupid",
                factory,
                progress,
                lambda on_done: synthesize_cupid(
                    config,
                    out,
                    factory,
                    concurrency=concurrency,
                    on_done=on_done,
                    resample_failed=resample_failed,
                    verify_against=verify_against,
                ),
            )
        print_summary(result.summary, out, max_error_rate)

    @synth_app.command("hicupid")
    def synth_hicupid(
        out: OutOpt = Path("synth/hicupid"),
        generator: GeneratorOpt = None,
        users: Annotated[int, typer.Option(help="Number of users.")] = 2,
        personas: Annotated[
            int, typer.Option(help="Persona items per user (one per dimension, <= 25).")
        ] = 25,
        schedules: Annotated[int, typer.Option(help="Schedules per user.")] = 10,
        multi: Annotated[int, typer.Option(help="Multi-info (persona + profile) questions per user.")] = 5,
        rounds: Annotated[int, typer.Option(help="Rounds per persona dialogue.")] = 10,
        seeds: Annotated[
            Path | None, typer.Option(help="Seed descriptions for profiles (occupation, description).")
        ] = None,
        allow_seed_reuse: SeedReuseOpt = False,
        length_scale: LengthOpt = None,
        seed: SeedOpt = 0,
        concurrency: ConcurrencyOpt = 2,
        cache: CacheOpt = None,
        no_cache: NoCacheOpt = False,
        max_cost: MaxCostOpt = None,
        prices: PricesOpt = None,
        progress: ProgressOpt = True,
        resample_failed: ResampleOpt = False,
        max_error_rate: MaxErrorRateOpt = 1.0,
    ) -> None:
        """HiCUPID-style users, dialogues and QA (dialogue.jsonl, qa.jsonl in the official schema)."""
        from personalign.benchmarks.hicupid.synth import HicupidSynthConfig, synthesize_hicupid

        with cli_errors():
            generator = generator or embedded_default()
            config = HicupidSynthConfig(
                generator=generator,
                n_users=users,
                n_personas=personas,
                n_schedules=schedules,
                n_multi=multi,
                persona_rounds=rounds,
                seed=seed,
                seeds_file=str(seeds) if seeds else None,
                allow_seed_reuse=allow_seed_reuse,
                length_scale=length_scale,
            )
            factory = _factory(cache, no_cache, max_cost, prices)
            console.print(
                f"synth hicupid: generator [bold]{safe(config.generator)}[/]; {users} users -> {safe(out)}"
            )
            result = _with_progress(
                users,
                "synth hicupid",
                factory,
                progress,
                lambda on_done: synthesize_hicupid(
                    config,
                    out,
                    factory,
                    concurrency=concurrency,
                    on_done=on_done,
                    resample_failed=resample_failed,
                ),
            )
        print_summary(result.summary, out, max_error_rate)

    @synth_app.command("benchpres")
    def synth_benchpres(
        out: OutOpt = Path("synth/benchpres"),
        generator: GeneratorOpt = None,
        labeler: Annotated[
            str | None, typer.Option(help="Model that proposes apply/suppress labels (default: --generator).")
        ] = None,
        profiles: Annotated[int, typer.Option(help="Number of memory profiles.")] = 10,
        facts: Annotated[
            int, typer.Option(help="Factual memory statements per profile (the paper's profiles: about 147).")
        ] = 147,
        profile_tokens: Annotated[
            int | None,
            typer.Option(help="Token budget of the profile call (default: 25 per fact + 500)."),
        ] = None,
        judges: Annotated[
            int,
            typer.Option(
                help="Labeler samples per context; only contexts all of them label alike are kept "
                "(the paper kept unanimous labels of 3 annotators)."
            ),
        ] = 1,
        contexts_per_domain: Annotated[
            int | None,
            typer.Option(help="Contexts in each of the five domains (default: the paper's 13/10/5/6/5)."),
        ] = None,
        seeds: Annotated[
            Path | None, typer.Option(help="Seed descriptions for profiles (occupation, description).")
        ] = None,
        allow_seed_reuse: SeedReuseOpt = False,
        length_scale: LengthOpt = None,
        seed: SeedOpt = 0,
        concurrency: ConcurrencyOpt = 2,
        cache: CacheOpt = None,
        no_cache: NoCacheOpt = False,
        max_cost: MaxCostOpt = None,
        prices: PricesOpt = None,
        progress: ProgressOpt = True,
        resample_failed: ResampleOpt = False,
        max_error_rate: MaxErrorRateOpt = 1.0,
    ) -> None:
        """BenchPreS-style memory profiles, formal contexts and candidate labels (labels.csv to review)."""
        from personalign.benchmarks.benchpres.synth import (
            DOMAIN_COUNTS,
            BenchpresSynthConfig,
            synthesize_benchpres,
        )

        with cli_errors():
            generator = generator or embedded_default()
            counts = dict(DOMAIN_COUNTS)
            if contexts_per_domain is not None:
                counts = {d: contexts_per_domain for d in counts}
            budgets = BenchpresSynthConfig(generator=generator).max_tokens
            if profile_tokens is not None:
                budgets = {**budgets, "profile": profile_tokens}
            config = BenchpresSynthConfig(
                max_tokens=budgets,
                generator=generator,
                labeler=labeler,
                n_profiles=profiles,
                n_facts=facts,
                n_judges=judges,
                domain_counts=counts,
                seed=seed,
                seeds_file=str(seeds) if seeds else None,
                allow_seed_reuse=allow_seed_reuse,
                length_scale=length_scale,
            )
            factory = _factory(cache, no_cache, max_cost, prices)
            console.print(
                f"synth benchpres: generator [bold]{safe(config.generator)}[/], labeler "
                f"{safe(config.labeler_spec)}; {profiles} profiles x {sum(counts.values())} contexts "
                f"-> {safe(out)}"
            )
            result = _with_progress(
                profiles,
                "synth benchpres",
                factory,
                progress,
                lambda on_done: synthesize_benchpres(
                    config,
                    out,
                    factory,
                    concurrency=concurrency,
                    on_done=on_done,
                    resample_failed=resample_failed,
                ),
            )
        print_summary(result.summary, out, max_error_rate)
        console.print(
            "[yellow]labels are model proposals (unverified)[/]: fill final_label in labels.csv, then run "
            f"`personalign synth benchpres-labels {safe(out)}`"
        )

    @synth_app.command("benchpres-labels")
    def synth_benchpres_labels(
        out: Annotated[Path, typer.Argument(help="A `synth benchpres` output directory.")],
        labels: Annotated[
            Path | None, typer.Option(help="The reviewed CSV (default: OUT/labels.csv).")
        ] = None,
        partial: Annotated[
            bool, typer.Option(help="Write only the contexts whose five labels are all filled in.")
        ] = False,
    ) -> None:
        """Read the reviewed labels CSV and write benchpres.jsonl with the final labels."""
        from personalign.benchmarks.benchpres.synth import import_labels

        with cli_errors():
            report = import_labels(out, labels, partial=partial)
        console.print(
            f"benchpres.jsonl: {report['rows']} rows ({report['apply']} apply, {report['suppress']} suppress)"
            + (f"; {len(report['skipped'])} contexts skipped (unlabelled)" if report["skipped"] else "")
        )
