"""`personalign view [RUNS_DIR]`: browse runs in a local web app (personalign.view.app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from personalign.cli_common import console, fail
from personalign.errors import ConfigError
from personalign.redact import safe


def view_cmd(
    runs_dir: Annotated[Path, typer.Argument(help="A directory holding run directories (any depth).")] = Path(
        "runs"
    ),
    host: Annotated[
        str, typer.Option(help="Address to bind; the default serves this machine only.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """Browse runs: list them, compare two runs column by column, filter and drill into instances."""
    if not runs_dir.is_dir():
        fail(ConfigError(f"{runs_dir}: not a directory (give the folder holding your run directories)"))
    from personalign.view.report_html import require_view_extra

    try:
        require_view_extra()
    except ConfigError as exc:
        fail(exc)
    import uvicorn

    from personalign.view.app import create_app

    console.print(f"personalign view: {safe(runs_dir)} on http://{safe(host)}:{port}/ (Ctrl-C stops)")
    uvicorn.run(create_app(runs_dir), host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add `view` to the top-level app."""
    app.command("view")(view_cmd)
