"""`personalign protocol ...`: fetch and verify the official prompt files a `--protocol paper` run reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from personalign import registry
from personalign.cli_common import (
    ProtocolDirOpt,
    ProtocolOpt,
    build_command,
    cli_errors,
    console,
    new_app,
    option_param,
    param,
)
from personalign.errors import ConfigError
from personalign.protocols.upstream import (
    UpstreamSource,
    fetch_source,
    open_upstream,
    resolve_protocol,
    verify_all,
)
from personalign.redact import safe

if TYPE_CHECKING:  # typing only: runs.spec is loaded with the benchmark, when a command runs
    from personalign.runs.spec import ProtocolShow

# A benchmark's paper protocol (its spec's `upstream`) and its message preview (`protocol_show`) are
# import paths loaded through the registry when a command runs: no benchmark is named here.

protocol_app = new_app(no_args_is_help=True, help="The official (paper) protocols: fetch, verify, show.")


def upstream_source(name: str) -> UpstreamSource:
    """The `UpstreamSource` a registered benchmark declares (its spec's optional `upstream`, an import
    path read at call time); a clear error for an unknown benchmark or one without a paper protocol."""
    target = getattr(registry.get(name), "upstream", None) if registry.has(name) else None
    if target is None:
        known = [n for n in registry.names() if getattr(registry.get(n), "upstream", None)]
        raise ConfigError(f"no paper protocol for {name!r} (known: {', '.join(sorted(known))})")
    source = registry.load_target(target)
    if not isinstance(source, UpstreamSource):
        raise ConfigError(f"{target} is not an UpstreamSource")
    return source


NameArg = Annotated[str, typer.Argument(help="A registered benchmark with a paper protocol.")]


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


def _shows() -> dict[str, ProtocolShow]:
    """Every registered benchmark's `protocol_show` hook (loads every spec: only for a listing)."""
    found = {n: getattr(registry.get(n), "protocol_show", None) for n in registry.names()}
    return {n: registry.load_target(t) for n, t in found.items() if t}


class ShowGroup(TyperGroup):
    """`personalign protocol show <benchmark>`: one command per benchmark whose spec has a
    `protocol_show` hook, built from the hook's options when asked for."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(_shows())

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        target = getattr(registry.get(cmd_name), "protocol_show", None) if registry.has(cmd_name) else None
        return show_command(cmd_name, registry.load_target(target)) if target else None


def show_command(name: str, hook: ProtocolShow) -> Any:
    """The command of one benchmark: the shared options, then the benchmark's own."""

    def show(**kw: Any) -> None:
        with cli_errors():
            data = kw.pop("data")
            chosen = resolve_protocol(kw.pop("protocol"), official_data=data.split(":", 1)[0] == "hf")
            text = hook.show(
                kw.pop("instance"),
                list(kw.pop("setting") or []),
                protocol=chosen,
                protocol_dir=kw.pop("protocol_dir"),
                data=data,
                **kw,
            )
        typer.echo(text)

    params = [
        param("instance", Annotated[str, typer.Option(help=hook.instance_help)]),
        param("setting", Annotated[list[str] | None, typer.Option(help=hook.setting_help)], None),
        param("protocol", ProtocolOpt, None),
        param("protocol_dir", ProtocolDirOpt, None),
        param(
            "data",
            Annotated[str, typer.Option(help="'fixture', 'hf[:repo[:split]]', or a data file or directory.")],
            "fixture",
        ),
        *(option_param(o) for o in hook.options),
    ]
    help_text = (
        f"Print the exact messages a {name} run sends for one item and setting, to diff against the "
        "official code. The protocol defaults as for `run` (paper with --data hf, else personalign)."
    )
    return build_command(name, show, params, help_text)


show_app = new_app(
    cls=ShowGroup,
    no_args_is_help=True,
    help="Print the exact messages a run sends for one item (personalign protocol show <benchmark> --help).",
)
protocol_app.add_typer(show_app, name="show")


def register(app: typer.Typer) -> None:
    """Add the `protocol` command group to the main app."""
    app.add_typer(protocol_app, name="protocol")
