"""The shared closing lines of a run's console summary (report/console.py), in each benchmark's variant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from personalign.report.console import print_run_footer, run_table, usage_line

USAGE = {"calls": 12, "cache_hits": 3, "tokens": 45678, "reasoning_tokens": 900, "cost_usd": 0.01234}


def _summary(**extra: Any) -> dict[str, Any]:
    return {"status": "complete", "usage": dict(USAGE), "warnings": [], **extra}


def test_usage_line_variants() -> None:
    run = Path("runs/x")
    plain = "status complete · calls 12 · cache hits 3 · tokens 45,678 · cost $0.0123 · results in runs/x"
    assert usage_line(_summary(), run) == plain
    assert usage_line(_summary(), run, reasoning=True) == plain.replace("45,678", "45,678 (900 reasoning)")
    assert usage_line(_summary(), run, counts="errors 2", tokens=False) == (
        "status complete · errors 2 · calls 12 · cache hits 3 · cost $0.0123 · results in runs/x"
    )


def test_reasoning_is_left_out_when_none_were_spent() -> None:
    summary = _summary()
    summary["usage"]["reasoning_tokens"] = 0
    assert "reasoning" not in usage_line(summary, Path("r"), reasoning=True)


def test_footer_prints_notes_then_warnings_then_notice() -> None:
    console = Console(record=True, width=300)
    summary = _summary(warnings=["step judge: 2 errors"], notice="a notice")
    print_run_footer(console, summary, Path("r"), notes=["first error: q1: boom"], warnings=True)
    lines = console.export_text().splitlines()
    assert lines[1:] == ["first error: q1: boom", "warning: step judge: 2 errors", "a notice"]


def test_footer_hides_warnings_unless_asked() -> None:
    console = Console(record=True, width=300)
    print_run_footer(console, _summary(warnings=["w"]), Path("r"))
    assert "warning" not in console.export_text()


def test_run_table_title_and_columns() -> None:
    summary = _summary(models={"subject": "m[bold]x"}, protocol="paper")
    table = run_table("HiCUPID", summary, "zero-shot", "context full", columns=("split", "n"))
    assert [c.header for c in table.columns] == ["split", "n"]
    # the subject's markup is escaped, so the console shows it as written
    assert table.title == "HiCUPID · m\\[bold]x · zero-shot · context full · protocol paper"


def test_run_table_protocol_defaults_to_personalign() -> None:
    table = run_table("CUPID", _summary(models={"subject": "s"}))
    assert str(table.title).endswith("CUPID · s · protocol personalign")
