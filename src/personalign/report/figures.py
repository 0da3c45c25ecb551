"""Saving report figures: every plot is written as PNG and SVG beside the tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_figure(fig: Any, out: Path, stem: str) -> list[Path]:
    """Write a matplotlib figure as `out/stem.png` and `out/stem.svg`, close it, return the paths."""
    import matplotlib.pyplot as plt  # heavy, optional: only reports with plots load it

    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths
