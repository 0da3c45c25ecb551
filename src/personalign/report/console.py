"""The closing lines every benchmark's console summary of a run prints (`print_run_summary`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from personalign.redact import safe


def usage_line(
    summary: Mapping[str, Any],
    run_dir: Path,
    *,
    counts: str | None = None,
    tokens: bool = True,
    reasoning: bool = False,
) -> str:
    """`status · [counts ·] calls · cache hits · [tokens ·] cost · results in DIR`: how the run ended,
    what it cost and where its files are. `reasoning` adds the reasoning tokens when there are any."""
    usage = summary["usage"]
    parts = [f"status {summary['status']}", *([counts] if counts else [])]
    parts += [f"calls {usage['calls']}", f"cache hits {usage['cache_hits']}"]
    if tokens:
        spent = (usage.get("reasoning_tokens") or 0) if reasoning else 0
        parts.append(f"tokens {usage['tokens']:,}" + (f" ({spent:,} reasoning)" if spent else ""))
    parts += [f"cost ${usage['cost_usd']:.4f}", f"results in {safe(run_dir)}"]
    return " · ".join(parts)


def print_run_footer(
    console: Console,
    summary: Mapping[str, Any],
    run_dir: Path,
    *,
    counts: str | None = None,
    tokens: bool = True,
    reasoning: bool = False,
    warnings: bool = False,
    notes: Sequence[str] = (),
) -> None:
    """Print the usage line, then in yellow the benchmark's own `notes` (already made safe), the
    summary's step-health warnings (when `warnings`) and its notice."""
    console.print(usage_line(summary, run_dir, counts=counts, tokens=tokens, reasoning=reasoning))
    for note in notes:
        console.print(f"[yellow]{note}[/]")
    if warnings:
        for warning in summary.get("warnings", []):
            console.print(f"[yellow]warning: {safe(warning)}[/]")
    if summary.get("notice"):
        console.print(f"[yellow]{summary['notice']}[/]")


def run_table(
    benchmark: str, summary: Mapping[str, Any], *details: str, columns: Sequence[str] = ()
) -> Table:
    """The console table of one run, titled `benchmark · subject · details · protocol P` (made safe
    for the terminal), with `columns` added."""
    protocol = summary.get("protocol", "personalign")
    title = " · ".join([benchmark, str(summary["models"]["subject"]), *details, f"protocol {protocol}"])
    table = Table(title=safe(title))
    for column in columns:
        table.add_column(column)
    return table
