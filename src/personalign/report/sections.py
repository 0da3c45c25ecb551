"""One benchmark's part of the HTML report (`personalign report --html`): its tables, plots and notes.

Each benchmark folder builds its own `Section` (its spec's optional `html_section` hook, e.g.
`benchmarks/cupid/report.py:html_section`); the page (`view/report_html.py`) lays them out.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from personalign.report.plots import inline_svg
from personalign.report.tables import Table

T = TypeVar("T")


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


def ci_pair(value: Any, scale: float = 1.0) -> tuple[float, float] | None:
    """A summary's `[low, high]` CI scaled for a plot (None when absent)."""
    return (scale * float(value[0]), scale * float(value[1])) if value else None


def plot_svg(plot: Callable[[Path], list[Path]]) -> str:
    """The SVG text of a benchmark report's own plot function, which writes its files into a folder."""
    with tempfile.TemporaryDirectory() as tmp:
        written = plot(Path(tmp))
        return next(p for p in written if p.suffix == ".svg").read_text(encoding="utf-8")


def plot_figure(plot: Callable[[Path], list[Path]], caption: str, alt: str) -> Figure:
    """A Figure of a benchmark report's own plot function (see `plot_svg`), inlined for the page."""
    return Figure(caption, alt, inline_svg(plot_svg(plot)))


def benchmark_section(
    benchmark: str, title: str, tables: Iterable[Table], figure: Figure | None = None
) -> Section:
    """A benchmark's Section: its tables that have rows, and its plot when it has one (every
    benchmark's `html_section` hook builds its page part this way)."""
    section = Section(benchmark, title, [t for t in tables if t.rows])
    if figure is not None:
        section.figures.append(figure)
    return section


def plotted_section(
    benchmark: str,
    title: str,
    tables: Iterable[Table],
    data: Sequence[T],
    plot: Callable[[Sequence[T], Path], list[Path]],
    caption: str,
    alt: str,
) -> Section:
    """`benchmark_section` with the figure `plot(data, folder)` draws, when there is data to plot."""
    figure = plot_figure(lambda out: plot(data, out), caption, alt) if data else None
    return benchmark_section(benchmark, title, tables, figure)
