"""Report cells are the summary's numbers, in the right columns; a cell with nothing scored reads n/a."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from personalign.benchmarks.benchpres import report as benchpres_report
from personalign.benchmarks.benchpres.run import run_benchpres
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.benchmarks.cupid import report as cupid_report
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.benchmarks.hicupid import report as hicupid_report
from personalign.benchmarks.hicupid.run import HiCupidRunSettings, run_hicupid
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.errors import ModelCallError
from personalign.llm import GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.report.tables import write_tables
from personalign.types import Message

CUPID = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


def _broken(messages: Sequence[Message], config: GenerateConfig) -> str:
    raise ModelCallError("HTTP 400: bad request", retryable=False)


def _generous(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The scripted matcher, except that every item is judged Fully Covered."""
    text = default_responder(messages, config)
    if config.json_schema is not None and config.schema_name == "match_results":
        results = json.loads(text)["results"]
        return json.dumps({"results": [{**r, "label": "Fully Covered"} for r in results]})
    return text


def _failing_factory() -> ModelFactory:
    broken = ScriptedBackend(_broken)
    return ModelFactory(cache=None, backends={"scripted/s": broken, "scripted/j": broken})


def _records(out: Path, stem: str) -> tuple[str, list[dict[str, str]], dict[str, Any]]:
    markdown = (out / f"{stem}.md").read_text()
    with (out / f"{stem}.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    return markdown, rows, json.loads((out / f"{stem}.json").read_text())


def _cell(rows: list[dict[str, str]], column: str, row_prefix: str = "") -> str:
    (match,) = [r for r in rows if r["column"] == column and r["row"].startswith(row_prefix)]
    return match["value"]


def test_cupid_all_error_run_reads_na_not_zero(tmp_path: Path) -> None:
    settings = RunSettings(run_dir=tmp_path / "run", progress=False, use_cache=False, limit=3)
    result = run_cupid(CUPID, settings, factory=_failing_factory())
    assert result.outcome.status == "complete_with_errors"
    block = result.summary["inference"]
    assert block["n_scored"] == 0 and block["n_errors"] == 3
    assert (block["all"]["precision"], block["all"]["recall"], block["all"]["f1"]) == (None, None, None)
    assert block["by_type"]["consistent"]["precision"] is None  # the type is there, unmeasured

    tables = cupid_report.build_report([tmp_path / "run"])
    write_tables(tmp_path / "out", "report", tables)
    markdown, rows, payload = _records(tmp_path / "out", "report")
    row_line = next(line for line in markdown.splitlines() if line.startswith("| scripted/s"))
    cells = [c.strip() for c in row_line.strip("|").split("|")][1:]
    assert cells[:3] == ["n/a", "n/a", "n/a"] and "0.0" not in cells
    assert {_cell(rows, c) for c in ("All P", "All R", "All F1")} == {"n/a"}
    json_cells = {c["column"]: c["value"] for c in payload["table1"]["cells"]}
    assert json_cells["All P"] is None and json_cells["Consistent F1"] is None

    buffer = io.StringIO()
    cupid_report.print_run_summary(result.summary, tmp_path / "run", Console(file=buffer, width=200))
    assert "n/a / n/a / n/a" in buffer.getvalue() and "0.0 / 0.0" not in buffer.getvalue()


def test_cupid_table1_cells_are_the_summary_values_in_their_columns(tmp_path: Path) -> None:
    summaries = {}
    for context in ("full", "oracle"):
        config = CupidConfig(**{**CUPID.to_record(), "context": context})
        settings = RunSettings(run_dir=tmp_path / context, progress=False, use_cache=False)
        # the oracle run's matcher is generous, so its cells differ from the full run's
        matcher = ScriptedBackend(_generous if context == "oracle" else None)
        factory = ModelFactory(cache=None, backends={"scripted/j": matcher})
        summaries[context] = run_cupid(config, settings, factory=factory).summary["inference"]
    write_tables(
        tmp_path / "out", "report", cupid_report.build_report([tmp_path / "full", tmp_path / "oracle"])
    )
    _, rows, _ = _records(tmp_path / "out", "report")
    full, oracle = summaries["full"], summaries["oracle"]
    for prefix, key in (("P", "precision"), ("R", "recall"), ("F1", "f1")):
        assert float(_cell(rows, f"All {prefix}")) == pytest.approx(100 * full["all"][key], abs=1e-4)
        assert float(_cell(rows, f"Oracle {prefix}")) == pytest.approx(100 * oracle["all"][key], abs=1e-4)
        for kind in ("consistent", "contrastive", "changing"):
            value = _cell(rows, f"{kind.capitalize()} {prefix}")
            assert float(value) == pytest.approx(100 * full["by_type"][kind][key], abs=1e-4)
    # the columns are not interchangeable: precision is not recall, the oracle is not the full context
    assert full["all"]["precision"] != full["all"]["recall"]
    assert oracle["all"]["precision"] != full["all"]["precision"]


def test_hicupid_all_error_run_reads_na(tmp_path: Path) -> None:
    settings = HiCupidRunSettings(run_dir=tmp_path / "run", progress=False, use_cache=False, limit=4)
    result = run_hicupid(
        HiCupidConfig(subject="scripted/s", judge="scripted/j"), settings, factory=_failing_factory()
    )
    assert result.summary["qa"]["n_scored"] == 0
    tables = hicupid_report.build_report([tmp_path / "run"])
    write_tables(tmp_path / "out", "report", tables)
    markdown, rows, _ = _records(tmp_path / "out", "report")
    scored_rows = [r for r in rows if r["table"].startswith("Table")]
    assert scored_rows and {r["value"] for r in scored_rows} == {"n/a"}
    assert "| n/a |" in markdown

    buffer = io.StringIO()
    hicupid_report.print_run_summary(result.summary, tmp_path / "run", Console(file=buffer, width=200))
    assert "n/a" in buffer.getvalue()


def test_benchpres_all_error_run_reads_na(tmp_path: Path) -> None:
    config = BenchPresConfig(
        subject="scripted/s", judge="scripted/j", completeness_judge="scripted/j", samples=1
    )
    settings = RunSettings(run_dir=tmp_path / "run", progress=False, use_cache=False, limit=2)
    result = run_benchpres(config, settings, factory=_failing_factory())
    report = benchpres_report.build_report([tmp_path / "run"])
    benchpres_report.write_report(report, tmp_path / "out")
    markdown, rows, _ = _records(tmp_path / "out", "benchpres")
    main = [r for r in rows if r["column"] in ("MR", "AAR")]
    assert main and {r["value"] for r in main} == {"n/a"}
    assert "0.0" not in next(line for line in markdown.splitlines() if line.startswith("| scripted/s"))

    buffer = io.StringIO()
    benchpres_report.print_run_summary(result.summary, tmp_path / "run", Console(file=buffer, width=200))
    assert "n/a" in buffer.getvalue()
