"""`personalign synth hicupid`: HiCUPID-style users, dialogues and QA (the HiCUPID spec's `synth` hook)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import typer

from personalign.cli_common import console
from personalign.redact import safe
from personalign.synth_options import SynthRun, synth_command


def register(synth_app: typer.Typer) -> None:
    """Add `synth hicupid` to the `synth` group."""

    @synth_command(synth_app, "hicupid", "users")
    def synth_hicupid(
        run: SynthRun,
        users: Annotated[int, typer.Option(help="Number of users.")] = 2,
        personas: Annotated[
            int, typer.Option(help="Persona items per user (one per dimension, <= 25).")
        ] = 25,
        schedules: Annotated[int, typer.Option(help="Schedules per user.")] = 10,
        multi: Annotated[int, typer.Option(help="Multi-info (persona + profile) questions per user.")] = 5,
        rounds: Annotated[int, typer.Option(help="Rounds per persona dialogue.")] = 10,
    ) -> None:
        """HiCUPID-style users, dialogues and QA (dialogue.jsonl, qa.jsonl in the official schema)."""
        from personalign.benchmarks.hicupid.synth import HicupidSynthConfig, synthesize_hicupid

        sizes: dict[str, Any] = {
            "n_personas": personas,
            "n_schedules": schedules,
            "n_multi": multi,
            "persona_rounds": rounds,
        }
        config = HicupidSynthConfig(generator=run.generator, n_users=users, **sizes, **run.settings())
        console.print(
            f"synth hicupid: generator [bold]{safe(config.generator)}[/]; {users} users -> {safe(run.out)}"
        )
        run.run(users, partial(synthesize_hicupid, config))
