"""Plots for the HTML report, rendered by matplotlib to inline SVG text (no chart code of our own)."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_PROLOGUE = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def inline_svg(svg: str) -> str:
    """An SVG document as an element to inline in HTML: XML prologue, DOCTYPE and metadata dropped."""
    return _METADATA.sub("", _PROLOGUE.sub("", svg, count=1), count=1)


@dataclass(frozen=True)
class Series:
    """One bar series: a label, a value per group, and optional (low, high) CIs per group."""

    label: str
    values: list[float | None]
    cis: list[tuple[float, float] | None]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, selectable labels
    matplotlib.rcParams["svg.hashsalt"] = "personalign"  # stable ids, so the same runs give the same file
    import matplotlib.pyplot as plt

    return plt


def figure_svg(fig: Any) -> str:
    """The figure as an `<svg>` element (the XML prologue and DOCTYPE dropped); closes the figure."""
    plt = _pyplot()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return inline_svg(buffer.getvalue())


def grouped_bars(
    title: str, groups: Sequence[str], series: Sequence[Series], ylabel: str, ylim: tuple[float, float]
) -> str:
    """A grouped bar chart with 95% CI error bars, as SVG; a missing value leaves its bar out."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6), dpi=100)
    width = 0.8 / max(1, len(series))
    for k, s in enumerate(series):
        xs, ys, lows, highs = [], [], [], []
        for g, (value, ci) in enumerate(zip(s.values, s.cis, strict=True)):
            if value is None:
                continue
            xs.append(g - 0.4 + width * (k + 0.5))
            ys.append(value)
            lows.append(value - ci[0] if ci else 0.0)
            highs.append(ci[1] - value if ci else 0.0)
        ax.bar(xs, ys, width=width * 0.95, label=s.label, yerr=[lows, highs], capsize=2, ecolor="0.3")
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return figure_svg(fig)
