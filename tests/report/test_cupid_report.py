"""The CUPID report: every table cell is the summary value it stands for, in the right column."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.cupid.report import build_report
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.llm import CallCache, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.llm.types import GenerateConfig
from personalign.report.tables import Cell
from personalign.types import Message

MODELS = {"subject": "scripted/s", "decomposer": "scripted/j", "matcher": "scripted/j", "judge": "scripted/j"}


def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The scripted model, with generation scores that vary from instance to instance."""
    if config.schema_name == "generation_judgement" and config.json_schema is not None:
        score = 1 + sum(map(ord, messages[-1].content)) % 10
        return json.dumps({"analysis": "Scored by a checksum.", "label": "Partial", "score": score})
    return default_responder(messages, config)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """A full run, an oracle run (both tasks) and a gold-preference run (generation) of one subject."""
    root = tmp_path_factory.mktemp("cupid-report")
    backend = ScriptedBackend(responder)
    factory = ModelFactory(cache=CallCache(root / "c.sqlite"), backends={m: backend for m in MODELS.values()})
    out = {}
    # different instance counts, so that the runs' values differ
    for context, task, limit in (
        ("full", "both", None),
        ("oracle", "both", 7),
        ("gold-preference", "generation", 4),
        ("summaries", "inference", 2),
    ):
        config = CupidConfig(**MODELS, task=task, context=context)  # type: ignore[arg-type]
        settings = RunSettings(
            run_dir=root / context, cache_path=root / "c.sqlite", progress=False, limit=limit
        )
        out[context] = (root / context, run_cupid(config, settings, factory=factory).summary)
    return out


def assert_cell(cell: Cell, block: dict[str, Any], value_key: str, ci_key: str, n_key: str) -> None:
    assert cell.value == block[value_key]
    assert cell.ci == (tuple(block[ci_key]) if block[ci_key] else None)
    assert cell.n == block[n_key]


def test_each_cell_equals_its_summary_value(runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    tables = build_report([runs[c][0] for c in ("full", "oracle", "gold-preference")])
    full, oracle, gold = (runs[c][1] for c in ("full", "oracle", "gold-preference"))
    # The runs must differ, or a value in the wrong column would go unnoticed.
    assert full["inference"]["all"]["precision"] != full["inference"]["all"]["recall"]
    assert full["inference"]["all"] != oracle["inference"]["all"]
    assert (
        len({gold["generation"]["all"]["mean"], *(r["generation"]["all"]["mean"] for r in (full, oracle))})
        == 3
    )

    t1, t3 = tables["table1"], tables["table3"]
    assert len(t1.rows) == 1 and len(t3.rows) == 1  # the three runs share one row
    cells1 = next(iter(t1.rows.values()))
    metric_keys = {"P": "precision", "R": "recall", "F1": "f1"}
    groups = {"All": full["inference"]["all"], "Oracle": oracle["inference"]["all"]}
    groups.update({t.capitalize(): block for t, block in full["inference"]["by_type"].items()})
    assert len(groups) == 5
    for group, block in groups.items():
        for short, key in metric_keys.items():
            assert_cell(cells1[f"{group} {short}"], block, key, f"{key}_ci", "n_instances")
    assert set(cells1) == set(t1.columns)

    cells3 = next(iter(t3.rows.values()))
    means = {"All": full["generation"]["all"], "Oracle": oracle["generation"]["all"]}
    means["Preference"] = gold["generation"]["all"]
    means.update({t.capitalize(): block for t, block in full["generation"]["by_type"].items()})
    for column, block in means.items():
        assert_cell(cells3[column], block, "mean", "ci", "n")
    assert set(cells3) == set(t3.columns)


def test_tables_show_percent_and_score_scales(runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    tables = build_report([runs["full"][0]])
    t1, t3 = tables["table1"], tables["table3"]
    assert t1.title == "Table 1: preference inference (precision, recall, F1, %) [protocol: personalign]"
    assert t3.title == "Table 3: response generation (judge score 1-10) [protocol: personalign]"
    full = runs["full"][1]
    cells1, cells3 = next(iter(t1.rows.values())), next(iter(t3.rows.values()))
    assert t1.fmt(cells1["All R"]) == f"{100 * full['inference']['all']['recall']:.1f}"
    assert t3.fmt(cells3["All"]) == f"{full['generation']['all']['mean']:.2f}"
    assert f"| {t1.fmt(cells1['All P'])} |" in t1.to_markdown()


def test_rows_merge_oracle_and_gold_runs_and_keep_summaries_apart(
    runs: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    tables = build_report([path for path, _ in runs.values()])
    judged = "[judged by scripted/j]"
    assert list(tables["table1"].rows) == [f"scripted/s {judged}", f"scripted/s (summaries) {judged}"]
    assert list(tables["table3"].rows) == [f"scripted/s {judged}"]
    summaries = tables["table1"].rows[f"scripted/s (summaries) {judged}"]
    assert summaries["All F1"].value == runs["summaries"][1]["inference"]["all"]["f1"]


def test_errors_and_notice_become_notes_once(
    runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    paths = []
    for name in ("full", "oracle"):
        path = tmp_path / name
        shutil.copytree(runs[name][0], path)
        summary = json.loads((path / "summary.json").read_text())
        summary["notice"] = "A tiny model wrote these."
        summary["inference"]["n_errors"] = 2
        summary["generation"]["n_errors"] = 1
        del summary["inference"]["by_type"], summary["generation"]["by_type"]
        (path / "summary.json").write_text(json.dumps(summary))
        paths.append(path)
    tables = build_report(paths)
    row = "scripted/s [judged by scripted/j]"
    assert tables["table1"].notes == [
        f"{row}: 2 instance(s) not scored because of errors ({paths[0]}).",
        "Note: A tiny model wrote these.",
        f"{row}: 2 instance(s) not scored because of errors ({paths[1]}).",
    ]
    assert tables["table3"].notes == [
        f"{row}: 1 instance(s) not scored because of errors ({paths[0]}).",
        "Note: A tiny model wrote these.",
        f"{row}: 1 instance(s) not scored because of errors ({paths[1]}).",
    ]
    consistent = tables["table1"].rows[row].get("Consistent P")
    assert consistent is None or consistent.value is None  # no per-type block: no per-type value
