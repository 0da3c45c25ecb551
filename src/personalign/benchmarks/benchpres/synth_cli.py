"""`personalign synth benchpres` and `synth benchpres-labels`; the BenchPreS spec's `synth` hook."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from personalign.cli_common import cli_errors, console
from personalign.redact import safe
from personalign.synth_options import SynthRun, synth_command


def register(synth_app: typer.Typer) -> None:
    """Add this benchmark's synth command(s) to the `synth` group."""

    @synth_command(synth_app, "benchpres", "profiles")
    def synth_benchpres(
        run: SynthRun,
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
    ) -> None:
        """BenchPreS-style memory profiles, formal contexts and candidate labels (labels.csv to review)."""
        from personalign.benchmarks.benchpres.synth import (
            DOMAIN_COUNTS,
            BenchpresSynthConfig,
            synthesize_benchpres,
        )

        counts = dict(DOMAIN_COUNTS)
        if contexts_per_domain is not None:
            counts = {d: contexts_per_domain for d in counts}
        budgets = BenchpresSynthConfig(generator=run.generator).max_tokens
        if profile_tokens is not None:
            budgets = {**budgets, "profile": profile_tokens}
        sizes: dict[str, Any] = {
            "n_profiles": profiles,
            "n_facts": facts,
            "n_judges": judges,
            "domain_counts": counts,
        }
        config = BenchpresSynthConfig(
            generator=run.generator, labeler=labeler, max_tokens=budgets, **sizes, **run.settings()
        )
        console.print(
            f"synth benchpres: generator [bold]{safe(config.generator)}[/], labeler "
            f"{safe(config.labeler_spec)}; {profiles} profiles x {sum(counts.values())} contexts "
            f"-> {safe(run.out)}"
        )
        run.run(profiles, partial(synthesize_benchpres, config))
        console.print(
            "[yellow]labels are model proposals (unverified)[/]: fill final_label in labels.csv, then run "
            f"`personalign synth benchpres-labels {safe(run.out)}`"
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
