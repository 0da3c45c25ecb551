"""`markdown_table`: the plain pipe table of the memory-eval summaries (CUPID and HiCUPID)."""

from __future__ import annotations

from personalign.report.tables import markdown_table


def test_caption_header_rule_and_rows() -> None:
    text = markdown_table("Retrieval at k=2", ["method", "n", "P"], [["bm25", 3, "0.500"], ["dense", 1, ""]])
    assert text.splitlines() == [
        "Retrieval at k=2",
        "",
        "| method | n | P |",
        "|---|---|---|",
        "| bm25 | 3 | 0.500 |",
        "| dense | 1 |  |",
    ]


def test_no_rows_leaves_the_header() -> None:
    assert markdown_table("c", ["a"], []).splitlines()[-1] == "|---|"
