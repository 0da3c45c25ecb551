"""PrefEval report: accuracy tables (by distractor length, preference form, topic) over runs, and the
accuracy-vs-turns plot, one line per model and setting; the console summary of one run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from personalign.errors import ConfigError
from personalign.redact import safe
from personalign.report.console import print_run_footer
from personalign.report.figures import save_figure
from personalign.report.sections import Section, plotted_section
from personalign.report.tables import NA, Cell, Table, write_tables
from personalign.runs.store import RunDir

STEM = "prefeval"


def _cell(block: Mapping[str, Any]) -> Cell:
    ci = block.get("ci")
    return Cell(block.get("accuracy"), tuple(ci) if ci else None, block.get("n"))  # type: ignore[arg-type]


def row_name(summary: Mapping[str, Any]) -> str:
    """``<subject> · <task>+<setting> [protocol]``: one table row / plot line per run."""
    return (
        f"{summary['models']['subject']} · {summary.get('condition', '?')} [{summary.get('protocol', '?')}]"
    )


@dataclass
class Curve:
    """One run's accuracy per distractor length (for the plot)."""

    label: str
    metric: str
    turns: list[int]
    accuracy: list[float | None]
    ci: list[tuple[float, float] | None]
    demo: bool = False  # the bundled small model: numbers that only show the pipeline works


@dataclass
class PrefEvalReport:
    tables: dict[str, Table] = field(default_factory=dict)
    curves: list[Curve] = field(default_factory=list)


def _load(path: Path) -> dict[str, Any]:
    run = RunDir(path)
    if not run.exists():
        raise ConfigError(f"{path} is not a run directory")
    manifest = run.read_manifest()
    if manifest.get("benchmark") != STEM:
        raise ConfigError(f"{path} is not a PrefEval run (its manifest says {manifest.get('benchmark')!r})")
    summary = run.read_summary()
    if summary is None:
        raise ConfigError(f"{path} has no summary.json yet (the run has not finished)")
    return summary


def build_report(paths: Sequence[Path]) -> PrefEvalReport:
    """Tables over the runs at `paths` (each a PrefEval run directory)."""
    report = PrefEvalReport()
    summaries = [_load(p) for p in paths]
    for task, metric in (("generation", "preference-following accuracy"), ("mcq", "MCQ accuracy")):
        runs = [s for s in summaries if s.get("task") == task]
        if not runs:
            continue
        turns = sorted({int(t) for s in runs for t in s.get("by_turns", {})})
        forms = sorted({f for s in runs for f in s.get("by_form", {})})
        topics = sorted({t for s in runs for t in s.get("by_topic", {})})
        by_turns = Table(
            f"PrefEval {metric} (%) by inter turns", ["all", *[f"{t} turns" for t in turns]], scale=100
        )
        by_form = Table(f"PrefEval {metric} (%) by preference form", forms, scale=100)
        by_topic = Table(f"PrefEval {metric} (%) by topic", topics, scale=100)
        for s in runs:
            name = safe(row_name(s))
            by_turns.rows[name] = {"all": _cell(s["all"])} | {
                f"{t} turns": _cell(b) for t, b in s.get("by_turns", {}).items()
            }
            by_form.rows[name] = {f: _cell(b) for f, b in s.get("by_form", {}).items()}
            by_topic.rows[name] = {t: _cell(b) for t, b in s.get("by_topic", {}).items()}
            points = sorted((int(t), b) for t, b in s.get("by_turns", {}).items())
            report.curves.append(
                Curve(
                    row_name(s),  # a plot label, not console markup
                    metric,
                    [t for t, _ in points],
                    [b.get("accuracy") for _, b in points],
                    [tuple(b["ci"]) if b.get("ci") else None for _, b in points],  # type: ignore[misc]
                    demo=bool(s.get("notice")),
                )
            )
        if task == "generation":
            by_turns.notes.append(
                "A response follows the preference when the judge finds it helpful and not violating it "
                "(the official combination of the four checks); errored instances are left out and counted."
            )
        report.tables[f"{task}_turns"] = by_turns
        report.tables[f"{task}_form"] = by_form
        report.tables[f"{task}_topic"] = by_topic
    return report


def plot_turns(curves: Sequence[Curve], out: Path, stem: str = "prefeval_turns") -> list[Path]:
    """Accuracy against the number of distractor turns, one line per run (model and setting), with
    95% CI bands; one panel per metric. Writes PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    metrics = list(dict.fromkeys(c.metric for c in curves))
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.4 * len(metrics), 4.8), dpi=150, squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for curve in (c for c in curves if c.metric == metric):
            xs = [t for t, a in zip(curve.turns, curve.accuracy, strict=True) if a is not None]
            ys = [100 * a for a in curve.accuracy if a is not None]
            ax.plot(xs, ys, marker="o", label=curve.label)
            band = [(t, ci) for t, ci in zip(curve.turns, curve.ci, strict=True) if ci is not None]
            if band:
                ax.fill_between(
                    [t for t, _ in band],
                    [100 * c[0] for _, c in band],
                    [100 * c[1] for _, c in band],
                    alpha=0.15,
                )
        ax.set_xlabel("inter turns between preference and question")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_ylim(-4, 104)
        ax.set_title(f"PrefEval: {metric} vs. conversation length")
        ax.grid(True, linewidth=0.4, alpha=0.5)
        ax.legend(fontsize=7, loc="best")
    if any(c.demo for c in curves):
        fig.suptitle(
            "Pipeline demonstration with the bundled small model: not a measure of any model", fontsize=9
        )
    return save_figure(fig, out, stem)


def write_report(report: PrefEvalReport, out: Path) -> str:
    """Write prefeval.md/.csv/.json and the accuracy-vs-turns plot into `out`; returns the Markdown."""
    suffix = ""
    if report.curves:
        plot_turns(report.curves, out)
        suffix = "\n![accuracy vs turns](prefeval_turns.png)\n"
    return write_tables(
        out,
        STEM,
        report.tables,
        markdown_suffix=suffix,
        json_extra={"curves": [c.__dict__ for c in report.curves]},
    )


def print_run_summary(summary: Mapping[str, Any], run_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    table = RichTable(title=safe(f"PrefEval · {row_name(summary)}"))
    for column in ("", "accuracy %", "95% CI", "n"):
        table.add_column(column)

    def fmt(block: Mapping[str, Any]) -> tuple[str, str, str]:
        acc, ci = block.get("accuracy"), block.get("ci")
        return (
            NA if acc is None else f"{100 * acc:.1f}",
            "" if not ci else f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f}",
            str(block.get("n", 0)),
        )

    groups = [("all", summary["all"])]
    groups += [(f"turns · {k}", v) for k, v in summary.get("by_turns", {}).items()]
    groups += [(f"form · {k}", v) for k, v in summary.get("by_form", {}).items()]
    for name, block in groups:
        table.add_row(safe(name), *fmt(block))
    console.print(table)
    counts = f"{summary['n_scored']} scored, {summary['n_errors']} errors"
    print_run_footer(console, summary, run_dir, counts=counts, tokens=False)


PLOT_CAPTION = (
    "PrefEval: preference-following accuracy against the number of distractor turns, "
    "one line per run, with 95% CIs"
)
PLOT_ALT = (
    "Line plot with the distractor turns between the preference and the question on the "
    "x axis and accuracy in percent on the y axis; the same numbers are in the tables."
)


def html_section(paths: Sequence[Path]) -> Section:
    """PrefEval in `personalign report --html` (spec hook): its tables and accuracy by distractor turns."""
    built = build_report(paths)
    tables = built.tables.values()
    return plotted_section("prefeval", "PrefEval", tables, built.curves, plot_turns, PLOT_CAPTION, PLOT_ALT)
