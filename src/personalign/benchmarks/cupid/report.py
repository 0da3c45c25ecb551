"""CUPID reports: the paper's Table 1 (inference P/R/F1) and Table 3 (generation scores).

Runs of the same subject and judges are merged into one row: the ``full`` (or ``summaries``)
run fills the per-type columns, an ``oracle`` run the Oracle columns and a
``gold-preference`` run the Preference column. Every table title names the protocol; runs of
different protocols are never merged into one row: each row then carries a ``[paper]`` or
``[personalign]`` marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from personalign.benchmarks.cupid.config import CupidConfig
from personalign.protocols.upstream import protocol_label
from personalign.report.console import print_run_footer, run_table
from personalign.report.plots import Series, grouped_bars
from personalign.report.sections import Figure, Section, benchmark_section, ci_pair
from personalign.report.tables import NA, Cell, Table, write_tables
from personalign.runs.records import InstanceRecord
from personalign.runs.store import load_run_summary, run_seed

TYPES = ("consistent", "contrastive", "changing")
BASE_CONTEXTS = ("full", "summaries", "memory")  # each gets its own row with per-type columns


def _summarize_interrupted(manifest: dict[str, Any], records: Iterable[InstanceRecord]) -> dict[str, Any]:
    """The summary of an interrupted CUPID run, from the records it saved."""
    # imported here for start-up speed: steps loads numpy, which printing a finished run never needs
    from personalign.benchmarks.cupid.steps import summarize

    config = CupidConfig(**manifest["config"])
    return summarize(records, config.tasks, seed=run_seed(manifest))


def load_summary(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A CUPID run's manifest and summary (computed from its records when it was interrupted)."""
    return load_run_summary(path, "cupid", "CUPID", _summarize_interrupted)


def _row_name(manifest: dict[str, Any]) -> str:
    models = manifest["identity"]["models"]
    context = manifest["config"]["context"]
    base = "" if context not in BASE_CONTEXTS or context == "full" else f" ({context})"
    judges = {models["decomposer"], models["matcher"], models["judge"]}
    judge_note = ", ".join(sorted(judges))
    return f"{models['subject']}{base} [judged by {judge_note}]"


def run_protocol(manifest: dict[str, Any]) -> str:
    """The run's protocol; runs made before protocols existed used our own prompts."""
    return str(manifest.get("protocol") or manifest.get("config", {}).get("protocol") or "personalign")


def _protocol_title(protocols: set[str]) -> str:
    if len(protocols) == 1:
        return f" [protocol: {next(iter(protocols))}]"
    return f" [protocols: {', '.join(sorted(protocols))}; each row marked]"


def _prf_cells(block: dict[str, Any], prefix: str) -> dict[str, Cell]:
    n = block.get("n_instances")
    return {
        f"{prefix} P": Cell(block["precision"], _ci(block.get("precision_ci")), n),
        f"{prefix} R": Cell(block["recall"], _ci(block.get("recall_ci")), n),
        f"{prefix} F1": Cell(block["f1"], _ci(block.get("f1_ci")), n),
    }


def _pct(value: float | None) -> str:
    """A ratio as a percentage with one decimal; "n/a" when nothing was scored."""
    return NA if value is None else f"{100 * value:.1f}"


def _ci(value: Any) -> tuple[float, float] | None:
    return (float(value[0]), float(value[1])) if value else None


def _mean_cell(block: dict[str, Any]) -> Cell:
    return Cell(block.get("mean"), _ci(block.get("ci")), block.get("n"))


def build_report(paths: Sequence[Path]) -> dict[str, Table]:
    groups = ["All", "Consistent", "Contrastive", "Changing", "Oracle"]
    loaded = [(path, *load_summary(path)) for path in paths]
    protocols = {run_protocol(manifest) for _, manifest, _ in loaded}
    mixed = len(protocols) > 1
    t1 = Table(
        "Table 1: preference inference (precision, recall, F1, %)" + _protocol_title(protocols),
        [f"{g} {m}" for g in groups for m in ("P", "R", "F1")],
        digits=1,
        scale=100.0,
    )
    t3 = Table(
        "Table 3: response generation (judge score 1-10)" + _protocol_title(protocols),
        ["All", "Consistent", "Contrastive", "Changing", "Oracle", "Preference"],
        digits=2,
    )
    for path, manifest, summary in loaded:
        context = manifest["config"]["context"]
        row = _row_name(manifest)  # oracle and gold-preference runs share the full run's row
        if mixed:
            row = protocol_label(row, run_protocol(manifest))
        if "inference" in summary and summary["inference"].get("all"):
            inf = summary["inference"]
            cells = t1.rows.setdefault(row, {})
            if context in BASE_CONTEXTS:
                cells.update(_prf_cells(inf["all"], "All"))
                for t in TYPES:
                    if t in inf.get("by_type", {}):
                        cells.update(_prf_cells(inf["by_type"][t], t.capitalize()))
            elif context == "oracle":
                cells.update(_prf_cells(inf["all"], "Oracle"))
            if inf.get("n_errors"):
                t1.notes.append(
                    f"{row}: {inf['n_errors']} instance(s) not scored because of errors ({path})."
                )
        if "generation" in summary and summary["generation"].get("all"):
            gen = summary["generation"]
            cells = t3.rows.setdefault(row, {})
            if context in BASE_CONTEXTS:
                cells["All"] = _mean_cell(gen["all"])
                for t in TYPES:
                    if t in gen.get("by_type", {}):
                        cells[t.capitalize()] = _mean_cell(gen["by_type"][t])
            elif context == "oracle":
                cells["Oracle"] = _mean_cell(gen["all"])
            elif context == "gold-preference":
                cells["Preference"] = _mean_cell(gen["all"])
            if gen.get("n_errors"):
                t3.notes.append(
                    f"{row}: {gen['n_errors']} instance(s) not scored because of errors ({path})."
                )
        if summary.get("notice"):
            note = f"Note: {summary['notice']}"
            for table in (t1, t3):
                if note not in table.notes:
                    table.notes.append(note)
    return {"table1": t1, "table3": t3}


def write_report(tables: dict[str, Table], out: Path) -> str:
    """Write report.md/.csv/.json into `out`; returns the Markdown."""
    return write_tables(out, "report", tables)


def print_run_summary(summary: dict[str, Any], run_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    columns = ("", "n", "errors", "P / R / F1 (%)  or  mean score")
    table = run_table("CUPID", summary, f"context {summary['context']}", columns=columns)
    for task in ("inference", "generation"):
        block = summary.get(task)
        if not block:
            continue
        groups = [("all", block.get("all")), *list(block.get("by_type", {}).items())]
        for name, stats in groups:
            if not stats:
                continue
            if task == "inference":
                value = " / ".join(_pct(stats.get(k)) for k in ("precision", "recall", "f1"))
                n = stats["n_instances"]
            else:
                value = NA if stats["mean"] is None else f"{stats['mean']:.2f}"
                n = stats["n"]
            errors = str(block["n_errors"]) if name == "all" else ""
            table.add_row(f"{task} · {name}", str(n), errors, value)
    console.print(table)
    print_run_footer(console, summary, run_dir)


PLOT_CAPTION = (
    "CUPID preference inference: precision, recall and F1 (%) by instance type, with 95% bootstrap CIs"
)
PLOT_ALT = (
    "Grouped bar chart of precision, recall and F1 in percent for all instances and for "
    "the consistent, contrastive and changing instance types, one bar group per run and "
    "context; the same numbers are in Table 1."
)


def html_section(paths: Sequence[Path]) -> Section:
    """CUPID in `personalign report --html` (spec hook): its tables and inference P/R/F1 bars by type."""
    tables = build_report(paths)
    metrics = ("precision", "recall", "f1")
    groups = ["All", *(t.capitalize() for t in TYPES)]
    series: list[Series] = []
    for path in paths:
        manifest, summary = load_summary(path)
        inference = summary.get("inference") or {}
        if not inference.get("all"):
            continue
        blocks = [inference["all"], *(inference.get("by_type", {}).get(t) or {} for t in TYPES)]
        context = manifest.get("config", {}).get("context", "full")
        subject = manifest.get("identity", {}).get("models", {}).get("subject", path.name)
        for metric in metrics:
            values = [None if b.get(metric) is None else 100 * b[metric] for b in blocks]
            cis = [ci_pair(b.get(f"{metric}_ci"), 100.0) for b in blocks]
            short = {"precision": "P", "recall": "R", "f1": "F1"}[metric]
            series.append(Series(f"{subject} ({context}) {short}", values, cis))
    figure = None
    if series:
        svg = grouped_bars("CUPID inference by instance type", groups, series, "%", (0, 100))
        figure = Figure(PLOT_CAPTION, PLOT_ALT, svg)
    return benchmark_section("cupid", "CUPID", tables.values(), figure)
