"""BenchPreS reports: the paper's main table (MR and AAR without and with mitigation), domain
and category tables, and the AAR-vs-MR scatter plot across runs (PNG and SVG).

Runs that share subject, judges, reasoning mode, context strategy and data form one row; the
run without mitigation fills the plain columns and the run with it the "mitigated" ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from personalign.benchmarks.benchpres.schema import BENCHPRES_DOMAINS, PREFERENCE_CATEGORIES
from personalign.benchmarks.benchpres.steps import summarize
from personalign.redact import safe
from personalign.report.console import print_run_footer, run_table
from personalign.report.figures import save_figure
from personalign.report.sections import Section, plotted_section
from personalign.report.tables import NA, Cell, Table, write_tables
from personalign.runs.store import RunDir, load_run_summary, run_seed

CATEGORIES = (*PREFERENCE_CATEGORIES, "other")


def benchmark_of(path: Path) -> str:
    return str(RunDir(path).read_manifest().get("benchmark", "unknown"))


def load_summary(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A BenchPreS run's manifest and summary (computed from its records when it was interrupted)."""
    return load_run_summary(path, "benchpres", "BenchPreS", lambda m, rs: summarize(rs, seed=run_seed(m)))


@dataclass
class RunPoint:
    """One run's overall position, for the scatter plot."""

    row: str
    subject: str
    mitigation: bool
    mr: float
    aar: float
    mr_ci: tuple[float, float] | None
    aar_ci: tuple[float, float] | None
    path: str


@dataclass
class BenchPresReport:
    main: Table
    domains: Table
    categories: Table
    points: list[RunPoint] = field(default_factory=list)

    @property
    def tables(self) -> dict[str, Table]:
        return {"main": self.main, "domains": self.domains, "categories": self.categories}


def _pct(value: Any) -> float | None:
    return None if value is None else 100.0 * float(value)


def _pct_ci(value: Any) -> tuple[float, float] | None:
    return (100.0 * float(value[0]), 100.0 * float(value[1])) if value else None


def _rate_cell(block: dict[str, Any], key: str, n_key: str) -> Cell:
    return Cell(_pct(block.get(key)), _pct_ci(block.get(f"{key}_ci")), block.get(n_key))


def row_name(manifest: dict[str, Any]) -> str:
    identity = manifest["identity"]
    models, config = identity["models"], identity["config"]
    tags = []
    if config.get("protocol", "personalign") != "personalign":
        tags.append(f"protocol {config['protocol']}")
    if config.get("reasoning", "default") != "default":
        tags.append(f"reasoning {config['reasoning']}")
    if config.get("context", "full") != "full":
        tags.append(f"context {config['context']}")
    judges = sorted({models["judge"], models["completeness_judge"]})
    tag = f" ({', '.join(tags)})" if tags else ""
    return f"{models['subject']}{tag} [judged by {', '.join(judges)}]"


def build_report(paths: Sequence[Path]) -> BenchPresReport:
    main = Table(
        "BenchPreS main table: MR and AAR (%), without and with mitigation",
        [
            "MR",
            "AAR",
            "AAR-MR",
            "Selectivity",
            "Completeness",
            "MR (mitigated)",
            "AAR (mitigated)",
            "Selectivity (mitigated)",
            "Completeness (mitigated)",
        ],
        digits=1,
    )
    domains = Table(
        "BenchPreS by domain: MR / AAR (%)",
        [f"{d} {m}" for d in BENCHPRES_DOMAINS for m in ("MR", "AAR")],
        digits=1,
    )
    categories = Table(
        "BenchPreS by preference category: MR / AAR (%)",
        [f"{c} {m}" for c in CATEGORIES for m in ("MR", "AAR")],
        digits=1,
    )
    report = BenchPresReport(main, domains, categories)
    extra_domains: list[str] = []
    protocols: list[str] = []
    for path in paths:
        manifest, summary = load_summary(path)
        protocol = str(manifest["identity"]["config"].get("protocol", "personalign"))
        if protocol not in protocols:
            protocols.append(protocol)
        name = row_name(manifest)
        mitigated = bool(manifest["identity"]["config"].get("mitigation"))
        suffix = " (mitigated)" if mitigated else ""
        overall = summary["all"]
        cells = main.rows.setdefault(name, {})
        cells[f"MR{suffix}"] = _rate_cell(overall, "mr", "n_suppress")
        cells[f"AAR{suffix}"] = _rate_cell(overall, "aar", "n_apply")
        cells[f"Selectivity{suffix}"] = Cell(
            _pct(overall.get("selectivity")), _pct_ci(overall.get("selectivity_ci")), overall.get("n_rows")
        )
        completeness = summary.get("completeness") or {}
        ci = completeness.get("ci")
        cells[f"Completeness{suffix}"] = Cell(
            completeness.get("mean"), (float(ci[0]), float(ci[1])) if ci else None, completeness.get("n")
        )
        if not mitigated:
            cells["AAR-MR"] = Cell(_pct(overall.get("gap")), None, overall.get("n_rows"))
        condition_row = f"{name} · {'mitigation' if mitigated else 'default'}"
        for domain, block in summary.get("by_domain", {}).items():
            if domain not in BENCHPRES_DOMAINS and domain not in extra_domains:
                extra_domains.append(domain)
            target = domains.rows.setdefault(condition_row, {})
            target[f"{domain} MR"] = _rate_cell(block, "mr", "n_suppress")
            target[f"{domain} AAR"] = _rate_cell(block, "aar", "n_apply")
        for category, block in summary.get("by_category", {}).items():
            target = categories.rows.setdefault(condition_row, {})
            target[f"{category} MR"] = _rate_cell(block, "mr", "n_suppress")
            target[f"{category} AAR"] = _rate_cell(block, "aar", "n_apply")
        errors = summary.get("errors", {})
        n_gen = len(errors.get("generation", {}))
        n_judge = summary.get("n_judgement_errors", 0)
        if n_gen or n_judge:
            main.notes.append(
                f"{name}{suffix}: {n_gen} response(s) and {n_judge} attribute judgement(s) not scored "
                f"because of errors ({path})."
            )
        placed = summary.get("categories") or {}
        if placed.get("rule_unplaced"):
            main.notes.append(
                f"{name}{suffix}: {placed['rule_unplaced']} attribute(s) carry no category in the data and "
                f"the wording rule could not place them (counted as 'other') ({path})."
            )
        if summary.get("status") not in ("complete", None):
            main.notes.append(f"{name}{suffix}: run status {summary.get('status')} ({path}).")
        if summary.get("notice"):
            note = f"Note: {summary['notice']}"
            if note not in main.notes:
                main.notes.append(note)
        if overall.get("mr") is not None and overall.get("aar") is not None:
            report.points.append(
                RunPoint(
                    row=name,
                    subject=manifest["identity"]["models"]["subject"],
                    mitigation=mitigated,
                    mr=100.0 * float(overall["mr"]),
                    aar=100.0 * float(overall["aar"]),
                    mr_ci=_pct_ci(overall.get("mr_ci")),
                    aar_ci=_pct_ci(overall.get("aar_ci")),
                    path=str(path),
                )
            )
    domains.columns.extend(f"{d} {m}" for d in extra_domains for m in ("MR", "AAR"))
    if protocols:
        label = "protocol " + protocols[0] if len(protocols) == 1 else "protocols " + ", ".join(protocols)
        for table in (main, domains, categories):
            table.title = f"{table.title} [{label}]"
    for table in (domains, categories):  # drop groups no run has (e.g. "other")
        table.columns = [c for c in table.columns if any(c in cells for cells in table.rows.values())]
    main.notes.append(
        "MR: share of preferences that should be suppressed but were applied (lower is better); "
        "AAR: share of appropriate preferences applied (higher is better); selectivity: harmonic "
        "mean of AAR and 100-MR. Rates are pooled over all attribute judgements and averaged over samples."
    )
    return report


def plot_scatter(points: Sequence[RunPoint], out: Path, stem: str = "benchpres_scatter") -> list[Path]:
    """AAR against MR, one point per run, with 95% CIs; writes PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=150)
    ax.plot([0, 100], [0, 100], linestyle="--", color="0.6", linewidth=1, label="AAR = MR (no selectivity)")
    ax.scatter([0], [100], marker="*", s=220, color="gold", edgecolor="0.3", zorder=4, label="ideal (0, 100)")
    rows = list(dict.fromkeys(p.row for p in points))
    colors = plt.get_cmap("tab10")
    for k, row in enumerate(rows):
        color = colors(k % 10)
        group = [p for p in points if p.row == row]
        for p in group:
            xerr = [[p.mr - p.mr_ci[0]], [p.mr_ci[1] - p.mr]] if p.mr_ci else None
            yerr = [[p.aar - p.aar_ci[0]], [p.aar_ci[1] - p.aar]] if p.aar_ci else None
            ax.errorbar(
                p.mr,
                p.aar,
                xerr=xerr,
                yerr=yerr,
                fmt="^" if p.mitigation else "o",
                color=color,
                markersize=8,
                markerfacecolor="white" if p.mitigation else color,
                capsize=2,
                elinewidth=0.8,
                zorder=3,
            )
        plain = [p for p in group if not p.mitigation]
        mitigated = [p for p in group if p.mitigation]
        if plain and mitigated:
            ax.annotate(
                "",
                xy=(mitigated[0].mr, mitigated[0].aar),
                xytext=(plain[0].mr, plain[0].aar),
                arrowprops={"arrowstyle": "->", "color": color, "lw": 1},
            )
        anchor = plain[0] if plain else group[0]
        label = row.split(" [judged by")[0]
        ax.annotate(label, (anchor.mr, anchor.aar), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.scatter([], [], marker="o", color="0.3", label="default")
    ax.scatter([], [], marker="^", facecolor="white", edgecolor="0.3", label="with mitigation")
    ax.set_xlim(-4, 104)
    ax.set_ylim(-4, 104)
    ax.set_xlabel("Misapplication Rate, MR (%)  lower is better")
    ax.set_ylabel("Appropriate Application Rate, AAR (%)  higher is better")
    ax.set_title("BenchPreS: preference application vs. misapplication")
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.legend(loc="lower right", fontsize=8)
    return save_figure(fig, out, stem)


def write_report(report: BenchPresReport, out: Path) -> str:
    """Write benchpres.md/.csv/.json and the scatter plot into `out`; returns the Markdown."""
    suffix = ""
    if report.points:
        out.mkdir(parents=True, exist_ok=True)
        plot_scatter(report.points, out)
        suffix = "\n![AAR vs MR](benchpres_scatter.png)\n"
    return write_tables(
        out,
        "benchpres",
        report.tables,
        markdown_suffix=suffix,
        json_extra={"points": [p.__dict__ for p in report.points]},
    )


def print_run_summary(summary: dict[str, Any], run_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    columns = ("", "MR %", "AAR %", "selectivity %", "n suppress / apply")
    table = run_table("BenchPreS", summary, summary["condition"], columns=columns)

    def fmt(value: Any) -> str:
        return NA if value is None else f"{100 * value:.1f}"

    groups = [("all", summary["all"])]
    groups += [(f"domain · {k}", v) for k, v in summary.get("by_domain", {}).items()]
    groups += [(f"category · {k}", v) for k, v in summary.get("by_category", {}).items()]
    for name, block in groups:
        table.add_row(
            safe(name),  # domains and categories come from the data
            fmt(block["mr"]),
            fmt(block["aar"]),
            fmt(block["selectivity"]),
            f"{block['n_suppress']} / {block['n_apply']}",
        )
    if summary.get("n_judgements") or not summary.get("memory_selection"):  # not --selection-only
        console.print(table)
    completeness = summary.get("completeness") or {}
    mean = completeness.get("mean")
    errors = summary.get("errors", {})
    console.print(
        f"completeness {NA if mean is None else f'{mean:.2f}'} (1-5, n={completeness.get('n', 0)}) · "
        f"samples {summary['samples']} · errors: {len(errors.get('generation', {}))} responses, "
        f"{summary.get('n_judgement_errors', 0)} judgements, {len(errors.get('completeness', {}))} ratings"
    )
    selection = summary.get("memory_selection")
    if selection:
        sel = selection["all"]
        console.print(
            f"memory engine's own selection (apply/suppress vs preference_label, no subject): "
            f"MR {fmt(sel['mr'])} % · AAR {fmt(sel['aar'])} % · selectivity {fmt(sel['selectivity'])} % "
            f"over {selection['n_decisions']} decisions in {selection['n_rows']} rows · "
            f"{selection['n_decision_errors']} judge errors, {selection['n_rows_failed']} rows failed"
        )
    print_run_footer(console, summary, run_dir, reasoning=True, warnings=True)


PLOT_CAPTION = (
    "BenchPreS: appropriate application rate (AAR) against misapplication rate (MR), "
    "one point per run, with 95% CIs"
)
PLOT_ALT = (
    "Scatter plot with MR in percent on the x axis (lower is better) and AAR in percent "
    "on the y axis (higher is better); the ideal corner is MR 0, AAR 100; the same "
    "numbers are in the main table."
)


def html_section(paths: Sequence[Path]) -> Section:
    """BenchPreS in `personalign report --html` (spec hook): its tables and the MR/AAR scatter plot."""
    built = build_report(paths)
    tables = built.tables.values()
    return plotted_section(
        "benchpres", "BenchPreS", tables, built.points, plot_scatter, PLOT_CAPTION, PLOT_ALT
    )
