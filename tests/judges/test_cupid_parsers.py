"""Adversarial subject and judge outputs for the CUPID parsers: strict, never a silent default."""

from __future__ import annotations

import json
from typing import Any

import pytest

from personalign.benchmarks.cupid.judges import (
    CHECKLIST_SCHEMA,
    GENERATION_JUDGE_SCHEMA,
    LABEL_SCORES,
    MissingSection,
    format_checklist,
    match_schema,
    parse_checklist,
    parse_generation_judgement,
    parse_inferred_preference,
    parse_match,
)
from personalign.errors import ParseError
from personalign.judges.parsing import extract_json

PREF = "Updates for Professor Lin should lead with the raw counts."


# --- parse_inferred_preference ------------------------------------------------------------


def test_preference_under_markdown_header() -> None:
    text = f"### Analysis\nShe asked for numbers first.\n\n### Most Likely Preference\n{PREF}"
    assert parse_inferred_preference(text) == PREF


def test_preference_bold_inline_header() -> None:
    assert parse_inferred_preference(f"Some analysis.\n\n**Most Likely Preference:** {PREF}") == PREF


def test_preference_bold_header_on_its_own_line() -> None:
    assert parse_inferred_preference(f"**Most Likely Preference:**\n{PREF}") == PREF


def test_preference_hash_header_with_inline_colon() -> None:
    assert parse_inferred_preference(f"## Most likely preference: {PREF}") == PREF


def test_preference_repeated_header_last_wins() -> None:
    text = (
        "### Most Likely Preference\nA first draft of the preference.\n\n"
        "### Analysis\nOn reflection the later sessions matter more.\n\n"
        f"### Most Likely Preference\n{PREF}"
    )
    assert parse_inferred_preference(text) == PREF


def test_preference_blank_lines_after_header() -> None:
    assert parse_inferred_preference(f"### Most Likely Preference\n\n\n   \n{PREF}\n") == PREF


def test_preference_trailing_section_not_included() -> None:
    text = f"### Most Likely Preference\n{PREF}\n### Notes\nThis is only a guess."
    result = parse_inferred_preference(text)
    assert result == PREF
    assert "guess" not in result


def test_preference_second_paragraph_not_included() -> None:
    text = f"### Most Likely Preference\n{PREF}\n\nI hope this helps!"
    assert parse_inferred_preference(text) == PREF


@pytest.mark.parametrize("prefix", ["- ", "* ", "> ", "1. ", "1) "])
def test_preference_bullet_and_quote_prefixes_stripped(prefix: str) -> None:
    assert parse_inferred_preference(f"### Most Likely Preference\n{prefix}{PREF}") == PREF


def test_preference_bold_and_quotes_removed() -> None:
    assert parse_inferred_preference(f'### Most Likely Preference\n**"{PREF}"**') == PREF


def test_preference_nested_quote_and_bullet_prefix_stripped() -> None:
    assert parse_inferred_preference(f"### Most Likely Preference\n> - {PREF}") == PREF


def test_preference_multi_line_block_quote() -> None:
    text = "### Most Likely Preference\n> Updates for Professor Lin should lead\n> with the raw counts."
    assert parse_inferred_preference(text) == PREF


def test_preference_multi_line_paragraph_joined() -> None:
    text = "### Most Likely Preference\nUpdates for Professor Lin should lead\nwith the raw counts."
    assert parse_inferred_preference(text) == PREF


@pytest.mark.parametrize(
    "text",
    [
        "### Most Likely Preference\n",
        "### Most Likely Preference",
        "### Most Likely Preference\n\n   \n",
        "### Most Likely Preference\n### Notes\nNothing to add.",
        "**Most Likely Preference:**",
    ],
)
def test_preference_header_present_but_empty(text: str) -> None:
    assert parse_inferred_preference(text) == ""


def test_preference_missing_header_raises_with_last_paragraph_fallback() -> None:
    text = "I read the sessions carefully.\n\nThe user wants the raw counts first."
    with pytest.raises(MissingSection) as info:
        parse_inferred_preference(text)
    assert isinstance(info.value, ParseError)
    assert str(info.value) == "no 'Most Likely Preference' section in the output"
    assert info.value.fallback == "The user wants the raw counts first."
    assert MissingSection("no section").fallback == ""


def test_preference_missing_header_fallback_skips_markdown_headings() -> None:
    text = "### Analysis\nShe wants numbers.\n\n- Lead with raw counts.\n\n### Conclusion"
    with pytest.raises(MissingSection) as info:
        parse_inferred_preference(text)
    assert info.value.fallback == "Lead with raw counts."


def test_preference_missing_header_empty_output_has_empty_fallback() -> None:
    with pytest.raises(MissingSection) as info:
        parse_inferred_preference("   \n\n  ")
    assert info.value.fallback == ""


@pytest.mark.parametrize(
    "prose",
    [
        "The most likely preference is that updates lead with the raw counts.",
        "Most likely preference is that updates lead with the raw counts.",
        "most likely preference would be raw counts first",
    ],
)
def test_preference_prose_mention_is_not_a_header(prose: str) -> None:
    with pytest.raises(MissingSection) as info:
        parse_inferred_preference(f"Some reasoning.\n\n{prose}")
    assert info.value.fallback == prose


def test_preference_prose_mention_before_real_header_is_ignored() -> None:
    text = (
        "### Analysis\nThe most likely preference is about tone, or maybe not.\n"
        "Most likely preference is hard to say.\n\n"
        f"### Most Likely Preference\n{PREF}"
    )
    assert parse_inferred_preference(text) == PREF


# --- parse_checklist ------------------------------------------------------------------------


def test_checklist_valid() -> None:
    text = json.dumps({"checklist": ["Does it lead with counts?", "  Are counts per transect?  "]})
    assert parse_checklist(text) == ["Does it lead with counts?", "Are counts per transect?"]


def test_checklist_fenced_block_with_prose_around() -> None:
    text = (
        "**Analysis**\nThe preference has two parts.\n\n"
        '```json\n{"checklist": ["Does it lead with counts?", "Does it skip interpretation?"]}\n```\n'
        "Let me know if you need more."
    )
    assert parse_checklist(text) == ["Does it lead with counts?", "Does it skip interpretation?"]


def test_checklist_four_items_allowed() -> None:
    items = [f"Item number {i}?" for i in range(1, 5)]
    assert parse_checklist(json.dumps({"checklist": items})) == items


def test_checklist_five_items_rejected_not_truncated() -> None:
    items = [f"Item number {i}?" for i in range(1, 6)]
    with pytest.raises(ParseError, match="5"):
        parse_checklist(json.dumps({"checklist": items}))


@pytest.mark.parametrize(
    "value",
    [
        {"checklist": []},
        {"checklist": ["Fine item?", 3]},
        {"checklist": ["Fine item?", None]},
        {"checklist": ["Fine item?", "   "]},
        {"checklist": "Does it lead with counts?"},
        {"items": ["Does it lead with counts?"]},
        ["Does it lead with counts?"],
    ],
)
def test_checklist_bad_shapes_rejected(value: Any) -> None:
    with pytest.raises(ParseError):
        parse_checklist(json.dumps(value))


@pytest.mark.parametrize("text", ["", "I cannot help with that.", "{checklist: [oops", "```json\n```"])
def test_checklist_garbage_rejected(text: str) -> None:
    with pytest.raises(ParseError):
        parse_checklist(text)


# --- parse_match ------------------------------------------------------------------------------


def results(*entries: dict[str, Any]) -> str:
    return json.dumps({"results": list(entries)})


def test_match_in_order() -> None:
    text = results(
        {"index": 1, "reasoning": "same", "label": "Fully Covered"},
        {"index": 2, "reasoning": "part", "label": "Partially Covered"},
        {"index": 3, "reasoning": "no", "label": "Not Covered"},
    )
    assert parse_match(text, 3) == ["Fully Covered", "Partially Covered", "Not Covered"]


def test_match_out_of_order_indices_reordered() -> None:
    text = results(
        {"index": 3, "label": "Fully Covered"},
        {"index": 1, "label": "Not Covered"},
        {"index": 2, "label": "Partially Covered"},
    )
    assert parse_match(text, 3) == ["Not Covered", "Partially Covered", "Fully Covered"]


def test_match_missing_index_uses_position_and_string_index_accepted() -> None:
    text = results({"label": "Not Covered"}, {"index": "2", "label": "Fully Covered"})
    assert parse_match(text, 2) == ["Not Covered", "Fully Covered"]


def test_match_label_variants_normalized() -> None:
    text = results(
        {"index": 1, "label": "fully_covered"},
        {"index": 2, "label": "NOT COVERED"},
        {"index": 3, "label": "  partially   covered "},
    )
    labels = parse_match(text, 3)
    assert labels == ["Fully Covered", "Not Covered", "Partially Covered"]
    assert all(label in LABEL_SCORES for label in labels)


@pytest.mark.parametrize("label", ["Mostly Covered", "Covered", "", None, 1])
def test_match_unknown_label_rejected(label: Any) -> None:
    with pytest.raises(ParseError):
        parse_match(results({"index": 1, "label": label}), 1)


def test_match_missing_label_rejected() -> None:
    with pytest.raises(ParseError):
        parse_match(results({"index": 1, "reasoning": "forgot the label"}), 1)


@pytest.mark.parametrize("n_items", [1, 3])
def test_match_wrong_count_rejected(n_items: int) -> None:
    text = results({"index": 1, "label": "Not Covered"}, {"index": 2, "label": "Not Covered"})
    with pytest.raises(ParseError):
        parse_match(text, n_items)


def test_match_duplicate_index_rejected() -> None:
    text = results({"index": 1, "label": "Not Covered"}, {"index": 1, "label": "Fully Covered"})
    with pytest.raises(ParseError, match="twice"):
        parse_match(text, 2)


@pytest.mark.parametrize("index", [0, 3, -1, True, 1.5, "two"])
def test_match_index_out_of_range_rejected(index: Any) -> None:
    text = results({"index": index, "label": "Not Covered"}, {"index": 2, "label": "Fully Covered"})
    with pytest.raises(ParseError):
        parse_match(text, 2)


def test_match_superscript_digit_index_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_match(results({"index": "²", "label": "Not Covered"}), 1)


def test_match_non_object_entry_rejected() -> None:
    with pytest.raises(ParseError):
        parse_match(json.dumps({"results": ["Fully Covered"]}), 1)


def test_match_prefmatcher_bare_list_accepted() -> None:
    text = json.dumps([{"index": 2, "label": "Not Covered"}, {"index": 1, "label": "Fully Covered"}])
    assert parse_match(text, 2, "prefmatcher") == ["Fully Covered", "Not Covered"]


def test_match_bare_list_rejected_in_default_format() -> None:
    text = json.dumps([{"index": 1, "label": "Fully Covered"}])
    with pytest.raises(ParseError):
        parse_match(text, 1)


def test_match_object_without_results_list_rejected() -> None:
    with pytest.raises(ParseError):
        parse_match(json.dumps({"results": {"index": 1, "label": "Fully Covered"}}), 1)
    with pytest.raises(ParseError):
        parse_match(json.dumps({"labels": [{"index": 1, "label": "Fully Covered"}]}), 1, "prefmatcher")


def test_match_first_fenced_block_invalid_second_valid() -> None:
    text = (
        'Draft:\n```json\n{"results": [{"index": 1, "label": "Fully Covered",}\n```\n'
        "Corrected:\n```json\n"
        + results({"index": 1, "label": "Partially Covered"}, {"index": 2, "label": "Not Covered"})
        + "\n```\n"
    )
    assert parse_match(text, 2) == ["Partially Covered", "Not Covered"]


# --- parse_generation_judgement ---------------------------------------------------------------


@pytest.mark.parametrize("score", [8, "8", " 8 ", 8.0])
def test_judgement_integral_scores_accepted(score: Any) -> None:
    text = json.dumps({"analysis": "Meets most items.", "label": "Good", "score": score})
    judgement = parse_generation_judgement(text)
    assert judgement.score == 8
    assert type(judgement.score) is int
    assert judgement.label == "Very Good"
    assert judgement.analysis == "Meets most items."


@pytest.mark.parametrize("score", [1, 10])
def test_judgement_bounds_inclusive(score: int) -> None:
    assert parse_generation_judgement(json.dumps({"score": score})).score == score


@pytest.mark.parametrize("score", [7.5, 0, 11, 1000, -3, True, False, None, "8.0", "eight", [8]])
def test_judgement_bad_scores_rejected(score: Any) -> None:
    with pytest.raises(ParseError):
        parse_generation_judgement(json.dumps({"analysis": "x", "label": "Good", "score": score}))


def test_judgement_label_is_the_paper_level_of_the_score() -> None:
    judgement = parse_generation_judgement(json.dumps({"analysis": "x", "label": "Excellent", "score": 3}))
    assert judgement.label == "Poor"
    assert GENERATION_JUDGE_SCHEMA["properties"]["label"]["enum"] == [
        "Unacceptable", "Very Poor", "Poor", "Below Average", "Acceptable",
        "Above Average", "Good", "Very Good", "Excellent", "Exceptional",
    ]  # fmt: skip


def test_checklist_schema_asks_for_an_analysis_first() -> None:
    assert list(CHECKLIST_SCHEMA["properties"]) == ["analysis", "checklist"]
    assert CHECKLIST_SCHEMA["required"] == ["analysis", "checklist"]


def test_judgement_missing_score_rejected() -> None:
    with pytest.raises(ParseError):
        parse_generation_judgement(json.dumps({"analysis": "x", "label": "Good"}))


def test_judgement_non_object_rejected() -> None:
    with pytest.raises(ParseError):
        parse_generation_judgement("[8]")


def test_judgement_superscript_digit_score_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_generation_judgement(json.dumps({"score": "²"}))


def test_judgement_json_embedded_after_prose() -> None:
    text = (
        "### Evaluation\nThe response leads with counts but adds interpretation.\n\n"
        'Final verdict: {"analysis": "One gap.", "label": "Good", "score": 7} -- end.'
    )
    judgement = parse_generation_judgement(text)
    assert (judgement.score, judgement.label, judgement.analysis) == (7, "Good", "One gap.")


# --- extract_json -----------------------------------------------------------------------------


def test_extract_json_does_not_glue_two_fenced_blocks() -> None:
    text = 'First:\n```json\n{"a": 1}\n```\nSecond:\n```json\n{"b": 2}\n```'
    assert extract_json(text) == {"a": 1}


def test_extract_json_plain_fence_without_language() -> None:
    assert extract_json("Here:\n```\n[1, 2]\n```") == [1, 2]


def test_extract_json_whole_text_and_embedded_value() -> None:
    assert extract_json('  {"a": [1, 2]}  ') == {"a": [1, 2]}
    assert extract_json('The answer is {"a": 1} as requested.') == {"a": 1}


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_extract_json_empty_text_rejected(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        extract_json(text)


@pytest.mark.parametrize("text", ["no json here", '{"a": 1', "```json\n{broken\n```"])
def test_extract_json_no_value_rejected(text: str) -> None:
    with pytest.raises(ParseError):
        extract_json(text)


# --- match_schema -----------------------------------------------------------------------------


@pytest.mark.parametrize("n_items", [1, 3, 4])
def test_match_schema_enumerates_indices_and_fixes_length(n_items: int) -> None:
    schema = match_schema(n_items)
    assert schema["type"] == "object"
    assert schema["required"] == ["results"]
    array = schema["properties"]["results"]
    assert array["type"] == "array"
    assert array["minItems"] == array["maxItems"] == n_items
    entry = array["items"]
    assert entry["properties"]["index"]["enum"] == list(range(1, n_items + 1))
    assert set(entry["properties"]["label"]["enum"]) == {"Fully Covered", "Partially Covered", "Not Covered"}
    assert set(entry["required"]) == {"index", "reasoning", "label"}


def test_match_schema_prefmatcher_is_an_array() -> None:
    schema = match_schema(2, "prefmatcher")
    assert schema["type"] == "array"
    assert schema["minItems"] == schema["maxItems"] == 2
    assert schema["items"]["properties"]["index"]["enum"] == [1, 2]
    assert "reasoning" not in schema["items"]["properties"]


def test_generation_judgement_defaults_and_error_messages() -> None:
    judgement = parse_generation_judgement('{"score": 5}')
    # no label given: the label is the named level of the score (the scale's fifth level)
    assert (judgement.score, judgement.label, judgement.analysis) == (5, "Acceptable", "")
    with pytest.raises(ParseError, match=r"^generation judge: score 11 is not an integer from 1 to 10$"):
        parse_generation_judgement('{"score": 11}')
    with pytest.raises(ParseError, match=r"^generation judge: expected a JSON object, got list$"):
        parse_generation_judgement("[5]")


def test_checklist_is_numbered_from_one() -> None:
    assert format_checklist(["Opens with counts?", "Ends with a question?"]) == (
        "1. Opens with counts?\n2. Ends with a question?"
    )


def test_match_schemas_in_full() -> None:
    index = {"type": "integer", "enum": [1, 2]}
    label = {"type": "string", "enum": ["Fully Covered", "Partially Covered", "Not Covered"]}
    assert match_schema(2, "prefmatcher") == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"index": index, "label": label},
            "required": ["index", "label"],
        },
        "minItems": 2,
        "maxItems": 2,
    }
    entry = {
        "type": "object",
        "properties": {"index": index, "reasoning": {"type": "string", "maxLength": 300}, "label": label},
        "required": ["index", "reasoning", "label"],
    }
    assert match_schema(2) == {
        "type": "object",
        "properties": {"results": {"type": "array", "items": entry, "minItems": 2, "maxItems": 2}},
        "required": ["results"],
    }


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_checklist, '{"checklist": []}', "decomposer: 'checklist' must be a non-empty list"),
        (
            parse_checklist,
            '{"checklist": ["ok", " "]}',
            "decomposer: checklist item 2 is not a non-empty string",
        ),
        (parse_checklist, "[1]", "decomposer: expected a JSON object, got list"),
        (
            lambda t: parse_match(t, 1),
            '{"results": [{"index": 1, "label": 3}]}',
            "matcher: label 3 is not a string",
        ),
        (
            lambda t: parse_match(t, 1),
            '{"results": [{"index": 1, "label": "Mostly"}]}',
            "matcher: unknown label 'Mostly' "
            "(expected one of ['Fully Covered', 'Partially Covered', 'Not Covered'])",
        ),
        (
            lambda t: parse_match(t, 1),
            "[1]",
            "matcher: expected a JSON object with a \"results\" list, got '[1]'",
        ),
        (
            lambda t: parse_match(t, 1, "prefmatcher"),
            '{"x": 1}',
            "matcher: expected a JSON list, got \"{'x': 1}\"",
        ),
        (
            lambda t: parse_match(t, 2),
            '{"results": [{"label": "Not Covered"}]}',
            "matcher: 1 labels for 2 checklist items",
        ),
        (lambda t: parse_match(t, 1), '{"results": ["Not Covered"]}', "matcher: entry 1 is not an object"),
        (
            lambda t: parse_match(t, 1),
            '{"results": [{"index": 3, "label": "Not Covered"}]}',
            "matcher: entry 1 has index 3, outside 1..1",
        ),
    ],
)
def test_judge_parse_errors_say_which_role_and_what(parse: Any, text: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "text",
    [
        "Most likely preference: Lead with counts.",  # a colon marks the header
        "Most Likely Preference**: Lead with counts.",  # a colon after a closing emphasis
        '## Most Likely Preference\n"__Lead__ with counts."',  # quotes and underscores go
    ],
)
def test_preference_header_variants_and_cleaning(text: str) -> None:
    assert parse_inferred_preference(text) == "Lead with counts."
    assert parse_inferred_preference("Most Likely Preference: Call me REX") == "Call me REX"


def test_only_the_bundled_matcher_gets_the_short_reasoning_budget_and_the_prompt_is_the_same() -> None:
    from personalign.benchmarks.cupid.config import (
        EMBEDDED_MATCHER_REASONING_CHARS,
        MATCHER_REASONING_CHARS,
        CupidConfig,
    )
    from personalign.benchmarks.cupid.steps import CupidPrompts

    def call(matcher: str) -> Any:
        config = CupidConfig(subject="s", decomposer="j", matcher=matcher, judge="j")
        return CupidPrompts(config).match("Short emails.", ["Is it short?", "Is it polite?"])

    bundled, hosted = call("local/smollm2"), call("openai/gpt-4o-2024-11-20")

    def bound(c: Any) -> int:
        entry = c.config.json_schema["properties"]["results"]["items"]
        return int(entry["properties"]["reasoning"]["maxLength"])

    assert (bound(bundled), bound(hosted)) == (EMBEDDED_MATCHER_REASONING_CHARS, MATCHER_REASONING_CHARS)
    assert EMBEDDED_MATCHER_REASONING_CHARS < MATCHER_REASONING_CHARS
    assert bundled.messages == hosted.messages and bundled.prompt.sha256 == hosted.prompt.sha256
