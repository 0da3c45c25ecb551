"""`personalign synth cupid`: CUPID-style personas, journeys and instances (the CUPID spec's `synth` hook)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from personalign.cli_common import ProtocolDirOpt, console
from personalign.redact import safe
from personalign.synth_options import SynthRun, synth_command


def register(synth_app: typer.Typer) -> None:
    """Add `synth cupid` to the `synth` group."""

    @synth_command(synth_app, "cupid", "personas", concurrency=4)
    def synth_cupid(
        run: SynthRun,
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
        leak_threshold: Annotated[
            float, typer.Option(help="Reject when the request holds this share of the preference's words.")
        ] = 0.6,
        protocol: Annotated[
            str,
            typer.Option(
                help="paper: the official persona, context-factor, session, decomposer, user simulator "
                "and assistant simulator prompts (kixlab/CUPID, pinned by sha256; `personalign protocol "
                "fetch cupid`), the paper's temperatures and budgets | personalign: ours."
            ),
        ] = "personalign",
        protocol_dir: ProtocolDirOpt = None,
    ) -> None:
        """CUPID-style personas, 13-session journeys and the three instance types (cupid.jsonl)."""
        from personalign.benchmarks.cupid.synth import (
            MAX_TOKENS,
            PAPER_MAX_TOKENS,
            PAPER_TEMPERATURES,
            CupidSynthConfig,
            default_assistant,
            synthesize_cupid,
        )

        generator = run.generator
        # the paper's temperatures go with its prompts (factors at 1.0: small local models' JSON breaks)
        paper: dict[str, Any] = (
            {"temperature": dict(PAPER_TEMPERATURES), "max_tokens": {**MAX_TOKENS, **PAPER_MAX_TOKENS}}
            if protocol == "paper"
            else {}
        )
        sizes: dict[str, Any] = {"n_personas": personas, "n_factors": factors, "n_sessions": sessions}
        config = CupidSynthConfig(
            generator=generator,
            user_simulator=user_simulator or generator,
            assistant=default_assistant(generator, assistant),
            decomposer=decomposer or generator,
            leak_judge=leak_judge,
            verifier=None if no_verify else (verifier or generator),
            **sizes,
            max_turns=max_turns,
            leak_threshold=leak_threshold,
            protocol=protocol,  # type: ignore[arg-type]  # checked by the config
            **paper,
            **run.settings(),
        )
        console.print(
            f"synth cupid: generator [bold]{safe(config.generator)}[/], "
            f"user simulator {safe(config.user_simulator)}, "
            f"assistant {safe(config.assistant)}, decomposer {safe(config.decomposer)}, "
            f"leak judge {safe(config.leak_judge or '(lexical only)')}, "
            f"verifier {safe(config.verifier or '(none)')}; protocol {safe(config.protocol)}; "
            f"{personas} personas -> {safe(run.out)}"
        )
        run.run(
            personas,
            partial(synthesize_cupid, config, verify_against=verify_against, protocol_dir=protocol_dir),
        )
