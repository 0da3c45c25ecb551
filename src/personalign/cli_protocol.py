"""`personalign protocol ...`: fetch and verify the official prompt files a `--protocol paper` run reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from personalign import registry
from personalign.cli_common import ProtocolDirOpt, ProtocolOpt, cli_errors, console
from personalign.errors import ConfigError
from personalign.protocols.upstream import (
    Protocol,
    UpstreamSource,
    fetch_source,
    open_upstream,
    resolve_protocol,
    verify_all,
)
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).

protocol_app = typer.Typer(no_args_is_help=True, help="The official (paper) protocols: fetch, verify, show.")


def upstream_source(name: str) -> UpstreamSource:
    """The `UpstreamSource` a registered benchmark declares (its spec's optional `upstream`, an import
    path read at call time); a clear error for an unknown benchmark or one without a paper protocol."""
    target = getattr(registry.get(name), "upstream", None) if name in registry.names() else None
    if target is None:
        known = [n for n in registry.names() if getattr(registry.get(n), "upstream", None)]
        raise ConfigError(f"no paper protocol for {name!r} (known: {', '.join(sorted(known))})")
    source = registry.load_target(target)
    if not isinstance(source, UpstreamSource):
        raise ConfigError(f"{target} is not an UpstreamSource")
    return source


NameArg = Annotated[
    str, typer.Argument(help="A registered benchmark with a paper protocol (cupid, hicupid, prefeval).")
]


@protocol_app.command("fetch")
def fetch_cmd(name: NameArg) -> None:
    """Download each pinned official file into the cache, checking its sha256 (needs GitHub access)."""
    with cli_errors():
        source = upstream_source(name)
        target, downloaded = fetch_source(source)
    kept = len(source.files) - len(downloaded)
    console.print(
        f"{name}: {len(downloaded)} file(s) downloaded, {kept} already cached, all verified; "
        f"{source.repo}@{source.commit} in {safe(target)}"
    )


@protocol_app.command("verify")
def verify_cmd(name: NameArg, protocol_dir: ProtocolDirOpt = None) -> None:
    """Check every pinned file of a protocol (cache, $PERSONALIGN_PROTOCOL_DIR_<NAME> or --protocol-dir)."""
    with cli_errors():
        source = upstream_source(name)
        files = open_upstream(source, protocol_dir)
        hashes = verify_all(files)
    for path, digest in hashes.items():
        typer.echo(f"{digest}  {path}")
    console.print(
        f"{name}: {len(hashes)} file(s) match {source.repo}@{source.commit} "
        f"({files.origin}: {safe(files.root)})"
    )


def register(app: typer.Typer) -> None:
    """Add the `protocol` command group to the main app."""
    app.add_typer(protocol_app, name="protocol")


@protocol_app.command("show")
def show_cmd(
    name: NameArg,
    instance: Annotated[
        str,
        typer.Option(help="Instance id: '1+marine_biologist#consistent' (cupid), 'test_1/0#2' (hicupid)."),
    ],
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting",
            help="cupid: which steps, one of all | inference | generation | infer | decompose | match | "
            "generate | judge. hicupid: KEY=VALUE (repeatable) for context, instruction_role, shots, bm25, "
            "embedder, judge_format, slot.",
        ),
    ] = None,
    protocol: ProtocolOpt = None,
    protocol_dir: ProtocolDirOpt = None,
    data: Annotated[
        str, typer.Option(help="'fixture', 'hf[:repo[:split]]', or a data file or directory.")
    ] = "fixture",
    context: Annotated[
        str, typer.Option(help="cupid: full | oracle | oracle-factor | gold-preference | memory")
    ] = "full",
    matcher_format: Annotated[str, typer.Option(help="cupid: default | prefmatcher")] = "default",
    system_role: Annotated[
        str, typer.Option(help="cupid: system | developer (judges, --protocol paper)")
    ] = "system",
    inferred: Annotated[
        str, typer.Option(help="cupid: stand-in inferred preference for decompose and match.")
    ] = "<inferred preference>",
    checklist: Annotated[
        list[str] | None,
        typer.Option("--checklist", help="cupid: stand-in inferred checklist item for match (repeatable)."),
    ] = None,
    response: Annotated[
        str, typer.Option(help="cupid: stand-in subject response for the judge.")
    ] = "<subject response>",
    answer: Annotated[
        str, typer.Option(help="hicupid: the model answer to put in the judge's prompt.")
    ] = "<model answer>",
    max_tokens: Annotated[
        int | None, typer.Option(help="cupid: subject max_tokens (default as `run`).")
    ] = None,
) -> None:
    """Print the exact messages a run sends for one instance and setting, to diff against the
    official code: cupid as role headers and text per step, hicupid as JSON. The protocol
    defaults as for `run` (paper with --data hf, else personalign)."""

    with cli_errors():
        chosen = resolve_protocol(protocol, official_data=data.split(":", 1)[0] == "hf")
        if name == "hicupid":
            from personalign.benchmarks.hicupid.cli import show_hicupid

            typer.echo(
                show_hicupid(
                    instance,
                    setting or [],
                    protocol=chosen,
                    protocol_dir=protocol_dir,
                    data=data,
                    answer=answer,
                )
            )
            return
        if name != "cupid":
            raise ConfigError(f"`protocol show` knows cupid and hicupid, not {name!r}")
        if setting is not None and len(setting) > 1:
            raise ConfigError("cupid takes one --setting (which steps to show)")
        _show_cupid(
            instance,
            setting[0] if setting else "all",
            chosen,
            protocol_dir,
            data,
            context=context,
            matcher_format=matcher_format,
            system_role=system_role,
            inferred=inferred,
            checklist=checklist,
            response=response,
            max_tokens=max_tokens,
        )


def _show_cupid(
    instance: str,
    setting: str,
    chosen: Protocol,
    protocol_dir: Path | None,
    data: str,
    *,
    context: str,
    matcher_format: str,
    system_role: str,
    inferred: str,
    checklist: list[str] | None,
    response: str,
    max_tokens: int | None,
) -> None:
    from personalign.benchmarks.cupid.data import load_cupid
    from personalign.benchmarks.cupid.protocol import load_paper_prompts
    from personalign.benchmarks.cupid.steps import (
        CupidConfig,
        CupidPrompts,
        default_subject_max_tokens,
        show_calls,
    )

    config = CupidConfig(
        subject="show",
        decomposer="show",
        matcher="show",
        judge="show",
        context=context,
        task="generation" if context == "gold-preference" else "both",
        matcher_format=matcher_format,  # type: ignore[arg-type]
        subject_max_tokens=max_tokens or default_subject_max_tokens("show", chosen),
        protocol=chosen,
        system_role=system_role,  # type: ignore[arg-type]
    )
    paper = load_paper_prompts(protocol_dir) if chosen == "paper" else None
    dataset = load_cupid(data)
    found = [i for i in dataset.instances if i.id == instance]
    if not found:
        known = ", ".join(i.id for i in dataset.instances[:3])
        raise ConfigError(f"no instance {instance!r} in {dataset.source} (ids look like: {known}, ...)")
    items = checklist or ["<inferred checklist item 1>", "<inferred checklist item 2>"]
    calls = show_calls(
        CupidPrompts(config, paper), found[0], setting, inferred=inferred, checklist=items, response=response
    )
    for step, role, call in calls:
        params = f"temperature {call.config.temperature}, max_tokens {call.config.max_tokens}"
        if call.config.json_schema is not None:
            params += f", json schema '{call.config.schema_name}'"
        typer.echo(f"######## {step} ({role}; {chosen} protocol; {params}; prompt {call.prompt.name})")
        for message in call.messages:
            typer.echo(f"======== {message.role} ========")
            typer.echo(message.content)
        typer.echo("")
