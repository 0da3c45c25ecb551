"""CUPID reports name the protocol in every title and never merge rows of different protocols."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from personalign.benchmarks.cupid.report import build_report
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig

CONFIG = CupidConfig(subject="scripted/s", decomposer="scripted/j", matcher="scripted/j", judge="scripted/j")


def test_protocol_in_titles_and_rows_marked_when_mixed(tmp_path: Path) -> None:
    settings = RunSettings(
        run_dir=tmp_path / "ours", cache_path=tmp_path / "c.sqlite", progress=False, limit=3
    )
    result = run_cupid(CONFIG, settings)
    assert result.summary["protocol"] == "personalign"
    manifest = json.loads((tmp_path / "ours" / "manifest.json").read_text())
    assert (
        manifest["protocol"] == "personalign" and manifest["identity"]["config"]["protocol"] == "personalign"
    )
    assert set(manifest["prompts"]) >= {"cupid/infer", "cupid/match"}

    alone = build_report([tmp_path / "ours"])["table1"]
    assert alone.title.endswith("[protocol: personalign]")
    assert list(alone.rows) == ["scripted/s [judged by scripted/j]"]

    # A run of the other protocol with the same models: a copy whose manifest says paper.
    shutil.copytree(tmp_path / "ours", tmp_path / "paper")
    manifest["protocol"] = "paper"
    (tmp_path / "paper" / "manifest.json").write_text(json.dumps(manifest))
    tables = build_report([tmp_path / "ours", tmp_path / "paper"])
    for table in tables.values():
        assert "[protocols: paper, personalign; each row marked]" in table.title
    assert sorted(tables["table1"].rows) == [
        "scripted/s [judged by scripted/j] [paper]",
        "scripted/s [judged by scripted/j] [personalign]",
    ]
