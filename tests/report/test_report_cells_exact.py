"""Report cells from summary blocks: each value, CI and n lands in its own column, scaled as shown."""

from __future__ import annotations

from personalign.benchmarks.benchpres.report import _rate_cell
from personalign.benchmarks.cupid.report import _mean_cell, _prf_cells
from personalign.benchmarks.hicupid.report import _score_cells, _wtl_cells
from personalign.report.tables import Cell, Table


def test_cupid_prf_cells_take_each_metric_with_its_own_ci() -> None:
    block = {
        "precision": 0.5,
        "recall": 0.25,
        "f1": 1 / 3,
        "n_instances": 7,
        "precision_ci": [0.4, 0.6],
        "recall_ci": [0.1, 0.3],
        "f1_ci": None,
    }
    assert _prf_cells(block, "Oracle") == {
        "Oracle P": Cell(0.5, (0.4, 0.6), 7),
        "Oracle R": Cell(0.25, (0.1, 0.3), 7),
        "Oracle F1": Cell(1 / 3, None, 7),
    }
    assert _mean_cell({"mean": 6.5, "ci": [5.0, 8.0], "n": 4}) == Cell(6.5, (5.0, 8.0), 4)


def test_hicupid_score_and_wtl_cells() -> None:
    block = {
        "bleu": 0.12,
        "rouge_l": 0.34,
        "total": 0.41,
        "n": 9,
        "by_type": {
            "persona": {"mean": 0.5, "ci": [0.3, 0.7], "n": 5, "win": 0.4, "tie": 0.2, "loss": 0.4},
            "schedule": {"mean": 0.75, "ci": None, "n": 4, "win": 0.75, "tie": 0.0, "loss": 0.25},
        },
    }
    cells = _score_cells(block)
    assert cells["BLEU"] == Cell(0.12, None, 9)
    assert cells["ROUGE-L"] == Cell(0.34, None, 9)
    assert cells["Total"] == Cell(0.41, None, 9)
    assert cells["Persona"] == Cell(0.5, (0.3, 0.7), 5)
    assert cells["Schedule"] == Cell(0.75, None, 4)
    assert cells.get("Multi-Info") is None or cells["Multi-Info"].value is None
    wtl = _wtl_cells(block)
    assert wtl["Persona W"] == Cell(0.4, None, 5)
    assert wtl["Persona T"] == Cell(0.2, None, 5)
    assert wtl["Persona L"] == Cell(0.4, None, 5)
    assert wtl["Schedule YES"] == Cell(0.75, None, 4)  # YES/NO: the win rate is the YES rate
    assert not any(column.startswith("Schedule ") and column != "Schedule YES" for column in wtl)
    assert all(wtl.get(f"Multi-Info {s}") is None or wtl[f"Multi-Info {s}"].value is None for s in "WTL")


def test_benchpres_rate_cells_are_percentages() -> None:
    block = {"mr": 0.25, "mr_ci": [0.125, 0.5], "n_suppress": 12, "aar": None, "aar_ci": None, "n_apply": 0}
    assert _rate_cell(block, "mr", "n_suppress") == Cell(25.0, (12.5, 50.0), 12)
    assert _rate_cell(block, "aar", "n_apply") == Cell(None, None, 0)


def test_table_scales_rounds_and_lists_cells() -> None:
    table = Table("T", ["A", "B", "C"], digits=2, scale=100.0, notes=["a note"])
    table.rows["row 1"] = {"A": Cell(0.12345, (0.1, 0.15), 3), "C": Cell(0.5)}
    assert table.fmt(table.rows["row 1"]["A"]) == "12.35"
    lines = table.to_markdown().splitlines()
    assert lines[:4] == ["### T", "", "| Model | A | B | C |", "|---|---:|---:|---:|"]
    assert lines[4].startswith("| row 1 | 12.35 | ") and lines[4].endswith(" | 50.00 |")
    assert lines[-1] == "a note"
    assert table.to_records() == [
        {
            "table": "T",
            "row": "row 1",
            "column": "A",
            "value": 12.345,
            "ci_low": 10.0,
            "ci_high": 15.0,
            "n": 3,
        },
        {
            "table": "T",
            "row": "row 1",
            "column": "C",
            "value": 50.0,
            "ci_low": None,
            "ci_high": None,
            "n": None,
        },
    ]


def test_hicupid_cells_for_blocks_without_some_types() -> None:
    assert set(_score_cells({"bleu": 0.1, "rouge_l": 0.2, "total": None, "n": 0})) >= {"BLEU", "ROUGE-L"}
    assert all(cell.value is None for cell in _wtl_cells({"n": 0}).values())
    # no persona questions: the schedule and multi-info columns are still filled
    block = {
        "by_type": {
            "schedule": {"mean": 1.0, "n": 2, "win": 1.0, "tie": 0.0, "loss": 0.0},
            "profile": {"mean": 0.5, "n": 3, "win": 0.0, "tie": 1.0, "loss": 0.0},
        }
    }
    wtl = _wtl_cells(block)
    assert wtl["Schedule YES"] == Cell(1.0, None, 2)
    assert wtl["Multi-Info T"] == Cell(1.0, None, 3)
    assert _score_cells(block)["Multi-Info"] == Cell(0.5, None, 3)


def test_table_records_round_to_four_decimals() -> None:
    table = Table("T", ["A"], scale=100.0)
    table.rows["r"] = {"A": Cell(0.12345678, (0.11111111, 0.18888888), 2)}
    record = table.to_records()[0]
    assert (record["value"], record["ci_low"], record["ci_high"]) == (12.3457, 11.1111, 18.8889)
