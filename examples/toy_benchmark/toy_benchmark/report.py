"""The toy benchmark's report: one row per run, read through personalign's public `load_run`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from personalign.results import load_run


def _cell(block: Mapping[str, Any]) -> str:
    value = block.get("accuracy")
    return "n/a" if value is None else f"{100 * value:.1f}"


def build_report(run_dirs: Sequence[Path]) -> str:
    """A Markdown table: subject, judge, context, items, exact-match and judged accuracy (%)."""
    lines = [
        "| Subject | Judge | Context | Items | Exact | Judged | Errors |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for path in run_dirs:
        run = load_run(path)
        if run.benchmark != "colour":
            raise ValueError(f"{path} is a {run.benchmark} run, not a colour run")
        summary = run.summary.metrics if run.summary else {}
        models = run.summary.models if run.summary and run.summary.models else {}
        exact, judged = summary.get("exact", {}).get("all", {}), summary.get("judged", {}).get("all", {})
        cells = [
            models.get("subject", "?"),
            models.get("judge", "?"),
            summary.get("context", "?"),
            summary.get("n_scored", 0),
            _cell(exact),
            _cell(judged),
            summary.get("n_errors", 0),
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(run_dirs: Sequence[Path], out: Path) -> str:
    """Write `report.md` under `out` and return its Markdown."""
    markdown = build_report(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    return markdown


def print_summary(summary: Mapping[str, Any], run_dir: Path) -> None:
    """The console lines after a run."""
    for metric in ("exact", "judged"):
        block = summary.get(metric, {}).get("all", {})
        print(f"{metric}: {_cell(block)}% of {block.get('n', 0)} items")
    print(f"errors: {summary.get('n_errors', 0)}; results in {run_dir}")
