"""`personalign report RUN... --html FILE`: one self-contained HTML page with every benchmark's tables.

The tables come from each benchmark's own report builder (`benchmarks/<name>/report.py`), so the
page shows exactly the numbers of report.md; plots are matplotlib SVG inlined in the page, and CSS
is inline too: the file opens with no network. Each run's manifest (models, protocol, prompt
hashes, versions, cost) follows the tables.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.redact import redact_text
from personalign.report.tables import Cell, Table
from personalign.runs.store import RunDir
from personalign.view.plots import Series, grouped_bars, inline_svg

KNOWN = ("cupid", "hicupid", "benchpres", "prefeval")


@dataclass
class Figure:
    """An inline SVG plot with its caption and alt text."""

    caption: str
    alt: str
    svg: str


@dataclass
class Section:
    """One benchmark's part of the page: its tables, plots and notes."""

    benchmark: str
    title: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class RunInfo:
    """What the page shows of one run directory's manifest and summary."""

    path: str
    benchmark: str
    manifest: dict[str, Any]
    summary: dict[str, Any] | None


def _ci(value: Any, scale: float = 1.0) -> tuple[float, float] | None:
    return (scale * float(value[0]), scale * float(value[1])) if value else None


def _cupid_section(paths: Sequence[Path]) -> Section:
    from personalign.benchmarks.cupid import report

    tables = report.build_report(paths)
    section = Section("cupid", "CUPID", [t for t in tables.values() if t.rows])
    metrics = ("precision", "recall", "f1")
    groups = ["All", *(t.capitalize() for t in report.TYPES)]
    series: list[Series] = []
    for path in paths:
        manifest, summary = report.load_summary(path)
        inference = summary.get("inference") or {}
        if not inference.get("all"):
            continue
        blocks = [inference["all"], *(inference.get("by_type", {}).get(t) or {} for t in report.TYPES)]
        context = manifest.get("config", {}).get("context", "full")
        subject = manifest.get("identity", {}).get("models", {}).get("subject", path.name)
        for metric in metrics:
            values = [None if b.get(metric) is None else 100 * b[metric] for b in blocks]
            cis = [_ci(b.get(f"{metric}_ci"), 100.0) for b in blocks]
            short = {"precision": "P", "recall": "R", "f1": "F1"}[metric]
            series.append(Series(f"{subject} ({context}) {short}", values, cis))
    if series:
        section.figures.append(
            Figure(
                "CUPID preference inference: precision, recall and F1 (%) by instance type, with 95% "
                "bootstrap CIs",
                "Grouped bar chart of precision, recall and F1 in percent for all instances and for "
                "the consistent, contrastive and changing instance types, one bar group per run and "
                "context; the same numbers are in Table 1.",
                grouped_bars("CUPID inference by instance type", groups, series, "%", (0, 100)),
            )
        )
    return section


def _hicupid_section(paths: Sequence[Path]) -> Section:
    from personalign.benchmarks.hicupid import report
    from personalign.benchmarks.hicupid.steps import TASK

    tables = report.build_report(paths)
    section = Section("hicupid", "HiCUPID", [t for t in tables.values() if t.rows])
    kinds = list(report.TYPE_COLUMNS)
    groups = [*report.TYPE_COLUMNS.values(), "Total"]
    series: list[Series] = []
    for path in paths:
        manifest, summary = report.load_summary(path)
        overall = (summary.get(TASK) or {}).get("all") or {}
        if not overall.get("n"):
            continue
        by_type = overall.get("by_type", {})
        values: list[float | None] = [
            None if (by_type.get(k) or {}).get("mean") is None else 100 * by_type[k]["mean"] for k in kinds
        ]
        cis = [_ci((by_type.get(k) or {}).get("ci"), 100.0) for k in kinds]
        total = overall.get("total")
        values.append(None if total is None else 100 * total)
        cis.append(None)
        series.append(Series(report.row_name(manifest), values, cis))
    if series:
        section.figures.append(
            Figure(
                "HiCUPID score S (x100) by question type and Total, with 95% bootstrap CIs per type",
                "Grouped bar chart of the HiCUPID score S times 100 for persona, schedule and "
                "multi-info questions and the total, one bar per run; the same numbers are in the "
                "tables above.",
                grouped_bars("HiCUPID S by question type", groups, series, "S x100", (0, 100)),
            )
        )
    return section


def _plot_svg(plot: Callable[[Path], list[Path]]) -> str:
    """The SVG text of a benchmark report's own plot function, which writes its files into a folder."""
    with tempfile.TemporaryDirectory() as tmp:
        written = plot(Path(tmp))
        return next(p for p in written if p.suffix == ".svg").read_text(encoding="utf-8")


def _benchpres_section(paths: Sequence[Path]) -> Section:
    from personalign.benchmarks.benchpres import report

    built = report.build_report(paths)
    section = Section("benchpres", "BenchPreS", [t for t in built.tables.values() if t.rows])
    if built.points:
        svg = _plot_svg(lambda out: report.plot_scatter(built.points, out))
        section.figures.append(
            Figure(
                "BenchPreS: appropriate application rate (AAR) against misapplication rate (MR), "
                "one point per run, with 95% CIs",
                "Scatter plot with MR in percent on the x axis (lower is better) and AAR in percent "
                "on the y axis (higher is better); the ideal corner is MR 0, AAR 100; the same "
                "numbers are in the main table.",
                inline_svg(svg),
            )
        )
    return section


def _prefeval_section(paths: Sequence[Path]) -> Section:
    from personalign.benchmarks.prefeval import report

    built = report.build_report(paths)
    section = Section("prefeval", "PrefEval", [t for t in built.tables.values() if t.rows])
    if built.curves:
        svg = _plot_svg(lambda out: report.plot_turns(built.curves, out))
        section.figures.append(
            Figure(
                "PrefEval: preference-following accuracy against the number of distractor turns, "
                "one line per run, with 95% CIs",
                "Line plot with the distractor turns between the preference and the question on the "
                "x axis and accuracy in percent on the y axis; the same numbers are in the tables.",
                inline_svg(svg),
            )
        )
    return section


BUILDERS: dict[str, Callable[[Sequence[Path]], Section]] = {
    "cupid": _cupid_section,
    "hicupid": _hicupid_section,
    "benchpres": _benchpres_section,
    "prefeval": _prefeval_section,
}


def read_runs(paths: Sequence[Path]) -> list[RunInfo]:
    """Each run's manifest and summary (None while the run has not written one)."""
    runs = []
    for path in paths:
        run = RunDir(path)
        manifest = run.read_manifest()
        runs.append(
            RunInfo(str(path), str(manifest.get("benchmark") or "cupid"), manifest, run.read_summary())
        )
    return runs


def build_sections(runs: Sequence[RunInfo]) -> list[Section]:
    """One section per benchmark present, in the order of the first run of each."""
    by_benchmark: dict[str, list[Path]] = {}
    for run in runs:
        by_benchmark.setdefault(run.benchmark, []).append(Path(run.path))
    sections = []
    for name, paths in by_benchmark.items():
        builder = BUILDERS.get(name)
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
