"""Shared parsing helpers: error snippets of model output."""

from __future__ import annotations

from personalign.judges.parsing import snippet


def test_snippet_folds_whitespace_and_cuts_long_text_to_the_limit() -> None:
    assert snippet("a  b\n\nc") == "a b c"
    assert snippet("x" * 120) == "x" * 120  # exactly at the limit: kept whole
    assert snippet("x" * 121) == "x" * 117 + "..."
    assert snippet("abcdefghij", limit=8) == "abcde..."
    assert len(snippet("word " * 100)) == 120
