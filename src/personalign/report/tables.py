"""A minimal table model rendered to Markdown and CSV rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Cell:
    value: float | None
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
        if cell is None or cell.value is None:
            return "–"
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
                if cell is None or cell.value is None:
                    continue
                out.append(
                    {
                        "table": self.title,
                        "row": name,
                        "column": column,
                        "value": round(cell.value * self.scale, 4),
                        "ci_low": round(cell.ci[0] * self.scale, 4) if cell.ci else None,
                        "ci_high": round(cell.ci[1] * self.scale, 4) if cell.ci else None,
                        "n": cell.n,
                    }
                )
        return out
