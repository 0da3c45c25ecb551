"""HiCUPID reports: the paper's Table 3/4 layout per test set, the gold-vs-whole-history ablation,
W/T/L rates and retrieval Hit@k.

A row is one run: ``<subject> · <method> · <context> [judged by <judge>]``, where the method is the
paper's prompt name (``zero/system``, ``few/user/3``...). Scores are x100 with one decimal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from personalign.benchmarks.hicupid.context import is_retrieval
from personalign.benchmarks.hicupid.steps import TASK, summarize
from personalign.protocols.upstream import protocol_label
from personalign.redact import safe
from personalign.report.console import print_run_footer, run_table
from personalign.report.plots import Series, grouped_bars
from personalign.report.sections import Figure, Section, benchmark_section, ci_pair
from personalign.report.tables import NA, Cell, Table
from personalign.retrieval.dense import DEFAULT_EMBEDDER
from personalign.runs.store import load_run_summary, run_seed

SPLIT_TITLES = {
    "test_1": "Table 3: Test Set 1 (seen users, unseen questions)",
    "test_2": "Table 4: Test Set 2 (unseen users)",
    "train": "Train split",
}
TYPE_COLUMNS = {"persona": "Persona", "schedule": "Schedule", "profile": "Multi-Info"}


def load_summary(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A HiCUPID run's manifest and summary (computed from its records when it was interrupted)."""
    return load_run_summary(path, "hicupid", "HiCUPID", lambda m, rs: summarize(rs, seed=run_seed(m)))


def _method(manifest: dict[str, Any]) -> str:
    cfg = manifest["config"]
    role, shots = cfg.get("instruction_role", "system"), int(cfg.get("shots", 0))
    return f"zero/{role}" if not shots else f"few/{role}/{shots}"


def retriever_variant(config: dict[str, Any]) -> str | None:
    """The BM25 variant of a ``bm25-*`` context or the embedder of a ``dense-*`` one (None otherwise)."""
    context = str(config.get("context", ""))
    if context.startswith("bm25-"):
        return str(config.get("bm25", "lucene"))
    if context.startswith("dense-"):
        return str(config.get("embedder", DEFAULT_EMBEDDER))
    return None


def row_name(manifest: dict[str, Any], context: str | None = None) -> str:
    models = manifest["identity"]["models"]
    orders = ", both orders" if manifest["config"].get("both_orders") else ""
    ctx = manifest["config"]["context"] if context is None else context
    variant = retriever_variant(manifest["config"]) if context is None else None
    if variant is not None and variant not in ("lucene", DEFAULT_EMBEDDER):
        ctx = f"{ctx} ({variant})"
    base = f"{models['subject']} · {_method(manifest)} · {ctx} [judged by {models['judge']}{orders}]"
    return protocol_label(base, run_protocol(manifest))


def run_protocol(manifest: dict[str, Any]) -> str:
    """A run's protocol (runs made before protocols existed used our own prompts)."""
    return str(manifest.get("protocol") or manifest.get("config", {}).get("protocol") or "personalign")


def _score_cells(block: dict[str, Any]) -> dict[str, Cell]:
    cells = {
        "BLEU": Cell(block.get("bleu"), None, block.get("n")),
        "ROUGE-L": Cell(block.get("rouge_l"), None, block.get("n")),
        "Total": Cell(block.get("total"), None, block.get("n")),
    }
    for kind, column in TYPE_COLUMNS.items():
        stats = block.get("by_type", {}).get(kind)
        if stats:
            ci = tuple(stats["ci"]) if stats.get("ci") else None
            cells[column] = Cell(stats["mean"], ci, stats["n"])  # type: ignore[arg-type]
    return cells


def _wtl_cells(block: dict[str, Any]) -> dict[str, Cell]:
    cells: dict[str, Cell] = {}
    for kind, column in TYPE_COLUMNS.items():
        stats = block.get("by_type", {}).get(kind)
        if not stats:
            continue
        if kind == "schedule":
            cells["Schedule YES"] = Cell(stats["win"], None, stats["n"])
            continue
        for key, short in (("win", "W"), ("tie", "T"), ("loss", "L")):
            cells[f"{column} {short}"] = Cell(stats[key], None, stats["n"])
    return cells


def build_report(paths: Sequence[Path]) -> dict[str, Table]:
    columns = ["BLEU", "ROUGE-L", "Persona", "Schedule", "Multi-Info", "Total"]
    by_split: dict[str, Table] = {}
    wtl = Table(
        "W/T/L rates (%, all selected test questions)",
        [
            "Persona W",
            "Persona T",
            "Persona L",
            "Multi-Info W",
            "Multi-Info T",
            "Multi-Info L",
            "Schedule YES",
        ],
        digits=1,
        scale=100.0,
    )
    ablation_columns = [
        f"{ctx} {c}" for ctx in ("Whole", "Gold") for c in ("Persona", "Schedule", "Multi-Info", "Total")
    ]
    ablation = Table(
        "Gold dialogues vs whole history (S x100, all selected questions)",
        [*ablation_columns, "Total gap"],
        digits=1,
        scale=100.0,
    )
    hits = Table(
        "Retrieval Hit@k (% of questions whose gold dialogue is retrieved)",
        ["Persona", "Schedule", "Multi-Info Persona", "Multi-Info Profile", "Total"],
        digits=1,
        scale=100.0,
    )
    protocols: set[str] = set()
    for path in paths:
        manifest, summary = load_summary(path)
        protocols.add(run_protocol(manifest))
        block = summary.get(TASK, {})
        row = row_name(manifest)
        for split, split_block in sorted(block.get("by_split", {}).items()):
            table = by_split.setdefault(
                split, Table(SPLIT_TITLES.get(split, split) + " (x100)", columns, digits=1, scale=100.0)
            )
            table.rows[row] = _score_cells(split_block)
        overall = block.get("all") or {}
        if overall.get("n"):
            wtl.rows[row] = _wtl_cells(overall)
        context = manifest["config"]["context"]
        if context in ("full", "gold") and overall.get("n"):
            label = "Whole" if context == "full" else "Gold"
            cells = ablation.rows.setdefault(row_name(manifest, context="whole vs gold"), {})
            for kind, column in TYPE_COLUMNS.items():
                stats = overall.get("by_type", {}).get(kind)
                if stats:
                    cells[f"{label} {column}"] = Cell(stats["mean"], None, stats["n"])
            cells[f"{label} Total"] = Cell(overall.get("total"))
            whole, gold = cells.get("Whole Total"), cells.get("Gold Total")
            if whole and gold and whole.value is not None and gold.value is not None:
                cells["Total gap"] = Cell(gold.value - whole.value)
        hit = overall.get("hit")
        if hit and is_retrieval(context):
            variant = retriever_variant(manifest["config"])
            label = f"{context} ({variant})" if variant else context
            hits.rows[protocol_label(f"{label} (from {path.name})", run_protocol(manifest))] = {
                "Persona": Cell(hit["persona"], None, hit["n"]),
                "Schedule": Cell(hit["schedule"]),
                "Multi-Info Persona": Cell(hit["multi_info_persona"]),
                "Multi-Info Profile": Cell(hit["multi_info_profile"]),
                "Total": Cell(hit["total"]),
            }
        notes = []
        if block.get("n_errors"):
            notes.append(f"{row}: {block['n_errors']} question(s) not scored because of errors ({path}).")
        if overall.get("flip_rate") is not None:
            notes.append(
                f"{row}: the judge's verdict flipped with the answer order on "
                f"{100 * overall['flip_rate']:.1f}% of {overall['n_both_orders']} A/B questions "
                "(counted as ties)."
            )
        if summary.get("notice"):
            notes.append(f"Note: {summary['notice']}")
        for table in [*by_split.values(), wtl]:
            for note in notes:
                if note not in table.notes:
                    table.notes.append(note)
    tables: dict[str, Table] = {f"hicupid_{split}": t for split, t in sorted(by_split.items())}
    # Every title names the protocol(s); every row carries its own [protocol] marker (row_name).
    which = "protocol " + ", ".join(sorted(protocols)) if protocols else "no runs"
    for table in [*by_split.values(), wtl, ablation, hits]:
        table.title = f"{table.title} · {which}"
    tables["hicupid_wtl"] = wtl
    tables["hicupid_ablation"] = ablation
    tables["hicupid_hit_at_k"] = hits
    return tables


def print_run_summary(summary: dict[str, Any], run_dir: Path, console: Console | None = None) -> None:
    console = console or Console()
    columns = ("split", "n", "Persona", "Schedule", "Multi-Info", "Total", "BLEU", "ROUGE-L")
    table = run_table("HiCUPID", summary, summary["method"], f"context {summary['context']}", columns=columns)
    block = summary[TASK]

    def pct(value: Any) -> str:
        return NA if value is None else f"{100 * value:.1f}"

    for name, stats in [("all", block["all"]), *sorted(block["by_split"].items())]:
        types = stats["by_type"]
        table.add_row(
            name,
            str(stats["n"]),
            *(pct(types.get(k, {}).get("mean")) for k in ("persona", "schedule", "profile")),
            pct(stats["total"]),
            pct(stats["bleu"]),
            pct(stats["rouge_l"]),
        )
    console.print(table)
    overall = block["all"]
    if overall.get("hit"):
        hit = overall["hit"]
        console.print(
            f"Hit@k: persona {pct(hit['persona'])} · schedule {pct(hit['schedule'])} · multi-info "
            f"persona {pct(hit['multi_info_persona'])} / profile {pct(hit['multi_info_profile'])} · "
            f"total {pct(hit['total'])}"
        )
    if overall.get("flip_rate") is not None:
        console.print(
            f"order flips: {pct(overall['flip_rate'])}% of {overall['n_both_orders']} A/B questions"
        )
    notes = []
    if block["n_errors"]:
        first = next(iter(block["errors"].items()))
        notes.append(f"first error: {safe(first[0])}: {safe(first[1][:300])}")
    print_run_footer(console, summary, run_dir, counts=f"errors {block['n_errors']}", notes=notes)


PLOT_CAPTION = "HiCUPID score S (x100) by question type and Total, with 95% bootstrap CIs per type"
PLOT_ALT = (
    "Grouped bar chart of the HiCUPID score S times 100 for persona, schedule and "
    "multi-info questions and the total, one bar per run; the same numbers are in the "
    "tables above."
)


def html_section(paths: Sequence[Path]) -> Section:
    """HiCUPID in `personalign report --html` (spec hook): its tables and the S bars by question type."""
    tables = build_report(paths)
    kinds = list(TYPE_COLUMNS)
    groups = [*TYPE_COLUMNS.values(), "Total"]
    series: list[Series] = []
    for path in paths:
        manifest, summary = load_summary(path)
        overall = (summary.get(TASK) or {}).get("all") or {}
        if not overall.get("n"):
            continue
        by_type = overall.get("by_type", {})
        values: list[float | None] = [
            None if (by_type.get(k) or {}).get("mean") is None else 100 * by_type[k]["mean"] for k in kinds
        ]
        cis = [ci_pair((by_type.get(k) or {}).get("ci"), 100.0) for k in kinds]
        total = overall.get("total")
        values.append(None if total is None else 100 * total)
        cis.append(None)
        series.append(Series(row_name(manifest), values, cis))
    figure = None
    if series:
        svg = grouped_bars("HiCUPID S by question type", groups, series, "S x100", (0, 100))
        figure = Figure(PLOT_CAPTION, PLOT_ALT, svg)
    return benchmark_section("hicupid", "HiCUPID", tables.values(), figure)
