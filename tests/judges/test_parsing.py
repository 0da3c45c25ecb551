"""Shared parsing helpers: finding the JSON in a model's output, and error snippets of it."""

from __future__ import annotations

import pytest

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, int_in_range, snippet


def test_snippet_folds_whitespace_and_cuts_long_text_to_the_limit() -> None:
    assert snippet("a  b\n\nc") == "a b c"
    assert snippet("x" * 120) == "x" * 120  # exactly at the limit: kept whole
    assert snippet("x" * 121) == "x" * 117 + "..."
    assert snippet("abcdefghij", limit=8) == "abcde..."
    assert len(snippet("word " * 100)) == 120


def test_extract_json_tries_every_fence_then_every_bracket() -> None:
    fenced = '```\n{bad\n```\nprose [1, 2]\n```json\n{"a": 1}\n```'
    assert extract_json(fenced) == {"a": 1}  # the second fence, not the bracket in the prose
    assert extract_json('Here {not json} and then {"a": 1}') == {"a": 1}


def test_extract_json_errors_say_what_was_missing() -> None:
    with pytest.raises(ParseError, match=r"^empty output where JSON was expected$"):
        extract_json("  \n ")
    with pytest.raises(ParseError, match=r"^no JSON value found in output: 'just prose \{'$"):
        extract_json("just prose {")


def test_extract_json_reads_raw_newlines_inside_strings() -> None:
    # SmolLM2 under a JSON grammar wrote this matcher reply; strict JSON rejects the raw newlines,
    # and the old scan then returned the first nested entry instead of the whole object.
    text = (
        '{"results": [{"index": 1, "reasoning": "Same opening.", "label": "Partially Covered"},'
        ' {"index": 2, "reasoning": "Part of it}}\n\nPreference: x\nChecklist:\n1", "label": "Not Covered"}]}'
    )
    value = extract_json(text)
    assert [entry["label"] for entry in value["results"]] == ["Partially Covered", "Not Covered"]
    assert value["results"][1]["reasoning"] == "Part of it}}\n\nPreference: x\nChecklist:\n1"
    assert extract_json('```json\n{"a": "line one\nline two"}\n```') == {"a": "line one\nline two"}


@pytest.mark.parametrize(("value", "expected"), [(3, 3), (3.0, 3), (" 4 ", 4), ("1", 1)])
def test_int_in_range_accepts_whole_numbers_in_range(value: object, expected: int) -> None:
    assert int_in_range(value, "judge: score", 1, 5) == expected


@pytest.mark.parametrize("value", [0, 6, 2.5, True, "٣", "three", None, [3]])
def test_int_in_range_rejects_with_the_field_and_range(value: object) -> None:
    with pytest.raises(ParseError, match=r"^judge: score .* is not an integer from 1 to 5$"):
        int_in_range(value, "judge: score", 1, 5)
