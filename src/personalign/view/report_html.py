"""`personalign report RUN... --html FILE`: one self-contained HTML page with every benchmark's tables.

Each benchmark's section comes from its own folder (its spec's `html_section` hook, e.g.
`benchmarks/cupid/report.py:html_section`, built on its report tables), so the page shows exactly
the numbers of report.md and names no benchmark here; plots are matplotlib SVG inlined in the page, and CSS
is inline too: the file opens with no network. Each run's manifest (models, protocol, prompt
hashes, versions, cost) follows the tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign import registry
from personalign.errors import ConfigError
from personalign.redact import redact_text
from personalign.report.sections import Figure as Figure
from personalign.report.sections import Section
from personalign.report.tables import Cell, Table
from personalign.runs.schema import benchmark_of
from personalign.runs.store import RunDir


@dataclass
class RunInfo:
    """What the page shows of one run directory's manifest and summary."""

    path: str
    benchmark: str
    manifest: dict[str, Any]
    summary: dict[str, Any] | None


def read_runs(paths: Sequence[Path]) -> list[RunInfo]:
    """Each run's manifest and summary (None while the run has not written one)."""
    runs = []
    for path in paths:
        run = RunDir(path)
        manifest = run.read_manifest()
        runs.append(RunInfo(str(path), benchmark_of(manifest), manifest, run.read_summary()))
    return runs


def section_builder(name: str) -> Callable[[Sequence[Path]], Section] | None:
    """The section builder a registered benchmark declares (its spec's optional `html_section`, an
    import path loaded here); None for a benchmark that is not registered or has none."""
    if not registry.has(name):
        return None
    target = getattr(registry.get(name), "html_section", None)
    return registry.load_target(target) if target else None  # type: ignore[no-any-return]


def build_sections(runs: Sequence[RunInfo]) -> list[Section]:
    """One section per benchmark present, in the order of the first run of each."""
    by_benchmark: dict[str, list[Path]] = {}
    for run in runs:
        by_benchmark.setdefault(run.benchmark, []).append(Path(run.path))
    sections = []
    for name, paths in by_benchmark.items():
        builder = section_builder(name)
        if builder is None:
            sections.append(
                Section(
                    name,
                    name,
                    notes=[
                        f"This personalign has no report tables for {name!r}; its runs' manifests and "
                        "statuses are listed below."
                    ],
                )
            )
            continue
        sections.append(builder(paths))
    return sections


def cell_text(table: Table, cell: Cell | None) -> tuple[str, str]:
    """A cell's value as the Markdown report prints it, and its CI in the same scale and digits."""
    value = table.fmt(cell)
    if cell is None or cell.ci is None or cell.value is None:
        return value, ""
    low, high = (bound * table.scale for bound in cell.ci)
    return value, f"[{low:.{table.digits}f}, {high:.{table.digits}f}]"


def require_view_extra() -> None:
    """A ConfigError naming the extra to install when Jinja2 (or the viewer's server) is missing."""
    import importlib.util

    missing = [m for m in ("jinja2", "starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not installed: install the view extra (pip install 'personalign[view]')"
        )


def _environment() -> Any:
    require_view_extra()
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("personalign.view", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["redact"] = lambda value: redact_text(str(value))
    return env


def render_report(paths: Sequence[Path]) -> str:
    """The whole report page for the run directories `paths`."""
    if not paths:
        raise ConfigError("report --html needs at least one run directory")
    runs = read_runs(paths)
    sections = build_sections(runs)
    from personalign import __version__

    return str(
        _environment()
        .get_template("report.html.j2")
        .render(
            sections=sections,
            runs=runs,
            cell_text=cell_text,
            version=__version__,
            generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            css=_static("report.css"),
        )
    )


def _static(name: str) -> str:
    from importlib.resources import files

    return (files("personalign.view") / "static" / name).read_text(encoding="utf-8")


def write_html_report(paths: Sequence[Path], out: Path) -> Path:
    """Write the report page to `out` (its directory is created) and return the path."""
    html = render_report(paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
