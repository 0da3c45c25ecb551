"""A minimal table model rendered to Markdown and CSV rows.

A cell whose value is None had no scored instance: it reads "n/a" in Markdown and CSV and is
`null` in JSON, never a measured 0. A cell that is absent (that setting was not run) reads "–".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NA = "n/a"


@dataclass
class Cell:
    value: float | None  # None: nothing scored (n = 0)
    ci: tuple[float, float] | None = None
    n: int | None = None


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: dict[str, dict[str, Cell]] = field(default_factory=dict)
    digits: int = 1
    scale: float = 1.0
    notes: list[str] = field(default_factory=list)

    def fmt(self, cell: Cell | None) -> str:
        if cell is None:
            return "–"
        if cell.value is None:
            return NA
        return f"{cell.value * self.scale:.{self.digits}f}"

    def to_markdown(self) -> str:
        header = "| Model | " + " | ".join(self.columns) + " |"
        rule = "|---|" + "|".join("---:" for _ in self.columns) + "|"
        lines = [f"### {self.title}", "", header, rule]
        for name, cells in self.rows.items():
            lines.append(f"| {name} | " + " | ".join(self.fmt(cells.get(c)) for c in self.columns) + " |")
        lines.extend(f"\n{note}" for note in self.notes)
        return "\n".join(lines)

    def to_records(self) -> list[dict[str, Any]]:
        out = []
        for name, cells in self.rows.items():
            for column in self.columns:
                cell = cells.get(column)
                if cell is None:
                    continue
                out.append(
                    {
                        "table": self.title,
                        "row": name,
                        "column": column,
                        "value": None if cell.value is None else round(cell.value * self.scale, 4),
                        "ci_low": round(cell.ci[0] * self.scale, 4) if cell.ci else None,
                        "ci_high": round(cell.ci[1] * self.scale, 4) if cell.ci else None,
                        "n": cell.n,
                    }
                )
        return out


def write_tables(
    out: Path,
    stem: str,
    tables: Mapping[str, Table],
    *,
    markdown_suffix: str = "",
    json_extra: Mapping[str, Any] | None = None,
) -> str:
    """Write `<stem>.md` (non-empty tables), `<stem>.csv` (one row per cell) and `<stem>.json`
    (titles, notes and cells per table, plus `json_extra`) into `out`; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    markdown = "\n\n".join(t.to_markdown() for t in tables.values() if t.rows) + "\n" + markdown_suffix
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    records = [r for t in tables.values() for r in t.to_records()]
    with (out / f"{stem}.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=["table", "row", "column", "value", "ci_low", "ci_high", "n"]
        )
        writer.writeheader()
        writer.writerows({**r, "value": NA if r["value"] is None else r["value"]} for r in records)
    payload = {
        name: {"title": t.title, "notes": t.notes, "cells": t.to_records()} for name, t in tables.items()
    }
    (out / f"{stem}.json").write_text(
        json.dumps({**payload, **(json_extra or {})}, indent=2), encoding="utf-8"
    )
    return markdown


def markdown_table(caption: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """`caption`, a blank line, then a plain pipe table: `header` and one line per row (for text
    summaries such as `personalign memory-eval`)."""
    lines = [caption, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
