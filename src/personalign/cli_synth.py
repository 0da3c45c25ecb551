"""`personalign synth <benchmark>`: generate benchmark-style data with any model.

The group is driven by the registry: every registered benchmark whose spec has the optional `synth`
hook (``"module:register"``, e.g. ``personalign.benchmarks.cupid.synth_cli:register``) adds its own
command(s); nothing here names a benchmark. The hooks are loaded only when `synth` is used, so
`personalign --help` imports no benchmark.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import typer
from typer.core import TyperGroup

from personalign import registry
from personalign.cli_common import new_app


@cache
def _synth_commands() -> dict[str, Any]:
    """Every registered benchmark's synth command(s), by name (built once per process)."""
    holder = new_app()
    for name in registry.names():
        target = getattr(registry.get(name), "synth", None)
        if target:
            registry.load_target(target)(holder)
    if not holder.registered_commands and not holder.registered_groups:
        return {}
    return dict(typer.main.get_group(holder).commands)


class SynthGroup(TyperGroup):
    """`personalign synth`: the commands of every benchmark with a `synth` hook, loaded when used."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*_synth_commands(), *super().list_commands(ctx)})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return super().get_command(ctx, cmd_name) or _synth_commands().get(cmd_name)


def register(app: typer.Typer, run_app: typer.Typer) -> None:
    """Add the `synth` group to the main app."""
    del run_app  # the signature every cli_* module's register shares
    synth_app = new_app(
        cls=SynthGroup, no_args_is_help=True, help="Generate benchmark-style data with any model."
    )
    app.add_typer(synth_app, name="synth")
