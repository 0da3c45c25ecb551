"""The shared builders every benchmark's `html_section` hook uses (report/sections.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from personalign.report.sections import Figure, benchmark_section, plot_figure, plotted_section
from personalign.report.tables import Cell, Table


def test_benchmark_section_keeps_tables_with_rows_and_the_figure() -> None:
    full = Table("Main", ["a"], rows={"run": {"a": Cell(0.5)}})
    empty = Table("Empty", ["a"])
    figure = Figure("caption", "alt", "<svg/>")
    section = benchmark_section("cupid", "CUPID", [full, empty], figure)
    assert (section.benchmark, section.title) == ("cupid", "CUPID")
    assert section.tables == [full]
    assert section.figures == [figure]


def test_benchmark_section_without_a_plot_has_no_figure() -> None:
    assert benchmark_section("prefeval", "PrefEval", []).figures == []


def test_plot_figure_inlines_the_svg_the_plot_function_wrote(tmp_path: Path) -> None:
    def plot(out: Path) -> list[Path]:
        png, svg = out / "p.png", out / "p.svg"
        png.write_bytes(b"x")
        svg.write_text('<?xml version="1.0"?>\n<svg><metadata>m</metadata><g/></svg>', encoding="utf-8")
        return [png, svg]

    figure = plot_figure(plot, "cap", "alt text")
    assert (figure.caption, figure.alt) == ("cap", "alt text")
    assert figure.svg == "<svg><g/></svg>"


def _svg_plot(data: Sequence[int], out: Path) -> list[Path]:
    svg = out / "p.svg"
    svg.write_text(f"<svg><text>{len(data)}</text></svg>", encoding="utf-8")
    return [svg]


def test_plotted_section_plots_its_data() -> None:
    section = plotted_section("benchpres", "BenchPreS", [], [1, 2, 3], _svg_plot, "cap", "alt")
    assert [f.svg for f in section.figures] == ["<svg><text>3</text></svg>"]


def test_plotted_section_without_data_has_no_figure() -> None:
    assert plotted_section("prefeval", "PrefEval", [], [], _svg_plot, "cap", "alt").figures == []
