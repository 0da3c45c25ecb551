"""BenchPreS report tables, the scatter plot, and the CLI end to end on the scripted model."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from personalign.benchmarks.benchpres.report import build_report, write_report
from personalign.benchmarks.benchpres.run import run_benchpres
from personalign.benchmarks.benchpres.steps import BenchPresConfig
from personalign.benchmarks.cupid.run import RunSettings
from personalign.cli import app

CONFIG = BenchPresConfig(subject="scripted/s", judge="scripted/j", completeness_judge="scripted/j", samples=2)


def make_runs(tmp_path: Path) -> list[Path]:
    paths = []
    for name, config in (
        ("plain", CONFIG),
        ("mitigated", replace(CONFIG, mitigation=True)),
        ("other", replace(CONFIG, subject="scripted/t")),
    ):
        settings = RunSettings(run_dir=tmp_path / name, cache_path=tmp_path / "c.sqlite", progress=False)
        run_benchpres(config, settings)
        paths.append(tmp_path / name)
    return paths


def test_main_table_pairs_default_and_mitigated_runs_and_plot_is_written(tmp_path: Path) -> None:
    paths = make_runs(tmp_path)
    report = build_report(paths)
    rows = report.main.rows
    assert len(rows) == 2  # scripted/s (both conditions in one row) and scripted/t
    s_row = next(cells for name, cells in rows.items() if name.startswith("scripted/s"))
    assert {"MR", "AAR", "MR (mitigated)", "AAR (mitigated)"} <= set(s_row)
    assert s_row["MR (mitigated)"].value < s_row["MR"].value  # type: ignore[operator]
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert s_row["MR"].value == 100 * summary["all"]["mr"]
    assert len(report.points) == 3
    assert "finance/legal MR" in report.domains.columns
    assert "other MR" not in report.categories.columns  # no run has an uncategorised attribute

    out = tmp_path / "report"
    markdown = write_report(report, out)
    assert "BenchPreS main table" in markdown and "mitigated" in markdown
    png, svg = out / "benchpres_scatter.png", out / "benchpres_scatter.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "<svg" in svg.read_text()[:500]
    with (out / "benchpres.csv").open() as handle:
        cells = list(csv.DictReader(handle))
    assert any(c["column"] == "AAR (mitigated)" for c in cells)


def test_cli_run_then_report(tmp_path: Path) -> None:
    runner = CliRunner()
    cache = str(tmp_path / "c.sqlite")
    common = ["--judge", "scripted/j", "--limit", "3", "--samples", "2", "--cache", cache, "--no-progress"]
    for extra, name in (([], "a"), (["--mitigation", "--reasoning", "on"], "b")):
        result = runner.invoke(
            app,
            ["run", "benchpres", "--model", "scripted/s", *common, *extra, "--run-dir", str(tmp_path / name)],
        )
        assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["config"]["mitigation"] and manifest["config"]["reasoning"] == "on"
    assert manifest["config"]["samples"] == 2 and manifest["config"]["subject_max_tokens"] == 4096
    assert manifest["config"]["judge_max_tokens"] == 4096 and manifest["protocol"] == "personalign"

    out = tmp_path / "rep"
    result = runner.invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "BenchPreS main table" in result.output
    assert (out / "benchpres_scatter.png").exists() and not (out / "report.md").exists()

    # `rescore` reads the benchmark from the manifest and refuses other benchmarks' options.
    result = runner.invoke(app, ["rescore", str(tmp_path / "a"), "--judge", "scripted/k", "--both-orders"])
    assert result.exit_code == 2 and "--both-orders does not apply" in " ".join(result.output.split())
    result = runner.invoke(
        app,
        ["rescore", str(tmp_path / "a"), "--judge", "scripted/k", "--run-dir", str(tmp_path / "r"),
         "--cache", cache, "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rescored = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert rescored["config"]["judge"] == "scripted/k" and rescored["config"]["subject"] == "scripted/s"


def test_cli_refuses_model_without_judge_and_validates_and_builds(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["run", "benchpres", "--model", "scripted/s"])
    assert result.exit_code == 2 and "--judge is required" in result.output
    result = runner.invoke(app, ["validate", "--benchmark", "benchpres", "fixture"])
    assert result.exit_code == 0
    info = json.loads(result.output)
    assert info["rows"] == 24 and info["profiles"] == 3 and info["apply"] + info["suppress"] == 120
    source = Path(__file__).resolve().parents[2] / "fixtures_src" / "benchpres_profiles.json"
    out = tmp_path / "rows.jsonl"
    result = runner.invoke(app, ["benchpres", "build", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 24
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p"}\n')
    result = runner.invoke(app, ["validate", "-b", "benchpres", str(bad)])
    assert result.exit_code == 2 and "row 0" in result.output
