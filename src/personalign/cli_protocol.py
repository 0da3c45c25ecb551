"""`personalign protocol ...`: fetch and verify the official prompt files a `--protocol paper` run reads."""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from personalign.cli_common import ProtocolDirOpt, ProtocolOpt, console, fail
from personalign.errors import ConfigError, PersonalignError
from personalign.protocols.upstream import UpstreamSource, fetch_source, open_upstream, verify_all
from personalign.redact import safe

# Commands import their benchmark's modules (runs, reports, loaders, synthesis) inside the command
# function: the only reason is CLI start-up speed, never to hide an import cycle (the layers are
# checked by lint-imports; docs/architecture.md).

protocol_app = typer.Typer(no_args_is_help=True, help="The official (paper) protocols: fetch, verify, show.")

# Each benchmark declares its upstream source in its own module; listed here, imported on demand.
UPSTREAM_SOURCES: dict[str, str] = {
    "cupid": "personalign.benchmarks.cupid_protocol:SOURCE",
    "hicupid": "personalign.benchmarks.hicupid_protocol:SOURCE",
}


def upstream_source(name: str) -> UpstreamSource:
    """The declared `UpstreamSource` of benchmark `name`; a clear error for an unknown or undeclared one."""
    target = UPSTREAM_SOURCES.get(name)
    if target is None:
        raise ConfigError(f"no paper protocol for {name!r} (known: {', '.join(sorted(UPSTREAM_SOURCES))})")
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ConfigError(f"the {name} paper protocol is not declared yet ({module_name})") from None
    source = getattr(module, attribute)
    if not isinstance(source, UpstreamSource):
        raise ConfigError(f"{target} is not an UpstreamSource")
    return source


NameArg = Annotated[str, typer.Argument(help="Benchmark: cupid | hicupid.")]


@protocol_app.command("fetch")
def fetch_cmd(name: NameArg) -> None:
    """Download each pinned official file into the cache, checking its sha256 (needs GitHub access)."""
    try:
        source = upstream_source(name)
        target, downloaded = fetch_source(source)
    except PersonalignError as exc:
        fail(exc)
    kept = len(source.files) - len(downloaded)
    console.print(
        f"{name}: {len(downloaded)} file(s) downloaded, {kept} already cached, all verified; "
        f"{source.repo}@{source.commit} in {safe(target)}"
    )


@protocol_app.command("verify")
def verify_cmd(name: NameArg, protocol_dir: ProtocolDirOpt = None) -> None:
    """Check every pinned file of a protocol (cache, $PERSONALIGN_PROTOCOL_DIR_<NAME> or --protocol-dir)."""
    try:
        source = upstream_source(name)
        files = open_upstream(source, protocol_dir)
        hashes = verify_all(files)
    except PersonalignError as exc:
        fail(exc)
    for path, digest in hashes.items():
        typer.echo(f"{digest}  {path}")
    console.print(
        f"{name}: {len(hashes)} file(s) match {source.repo}@{source.commit} "
        f"({files.origin}: {safe(files.root)})"
    )


@protocol_app.command("show")
def show_cmd(
    name: NameArg,
    instance: Annotated[str, typer.Option("--instance", help="Question id, e.g. test_1/0#2.")],
    setting: Annotated[
        list[str] | None,
        typer.Option(
            "--setting",
            help="KEY=VALUE (repeatable): context, instruction_role, shots, bm25, embedder, judge_format, "
            "slot.",
        ),
    ] = None,
    protocol: ProtocolOpt = "paper",
    protocol_dir: ProtocolDirOpt = None,
    data: Annotated[str, typer.Option(help="'fixture', 'hf[:repo]', or a directory.")] = "fixture",
    answer: Annotated[
        str, typer.Option(help="The model answer to put in the judge's prompt.")
    ] = "<model answer>",
) -> None:
    """Print the exact messages a run sends for one instance and setting (subject and judge), as JSON."""
    try:
        if name != "hicupid":
            raise ConfigError(f"protocol show supports hicupid here, not {name!r}")
        from personalign.cli_hicupid import show_hicupid

        typer.echo(
            show_hicupid(
                instance,
                setting or [],
                protocol=protocol,
                protocol_dir=protocol_dir,
                data=data,
                answer=answer,
            )
        )
    except PersonalignError as exc:
        fail(exc)


def register(app: typer.Typer) -> None:
    """Add the `protocol` command group to the main app."""
    app.add_typer(protocol_app, name="protocol")
