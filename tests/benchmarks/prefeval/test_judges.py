"""PrefEval parsers: the four checks and the MCQ answer, strict in both reply formats."""

from __future__ import annotations

import pytest

from personalign.benchmarks.prefeval.judges import format_options, parse_choice, parse_verdict, strip_label
from personalign.errors import ParseError


def test_json_verdicts() -> None:
    v = parse_verdict('{"explanation": "Names a dog hotel.", "answer": "No"}', "violation", "json")
    assert v.answer is False and v.explanation == "Names a dog hotel."
    ack = parse_verdict(
        '{"preference": "since you travel with a dog", "answer": "yes"}', "acknowledge", "json"
    )
    assert ack.answer is True and ack.preference == "since you travel with a dog"


@pytest.mark.parametrize(
    "reply",
    ['{"explanation": "x", "answer": "Maybe"}', '{"explanation": "x"}', "Yes", "", '["Yes"]'],
)
def test_json_verdict_without_a_clear_answer_is_an_error(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_verdict(reply, "helpful", "json")


def test_xml_verdicts() -> None:
    v = parse_verdict("<explanation>Refuses.</explanation>\n<answer>No</answer>", "helpful", "xml")
    assert v.answer is False and v.explanation == "Refuses."
    ack = parse_verdict(
        "<preference>you love quiet hotels</preference>\n<answer>[Yes]</answer>", "acknowledge", "xml"
    )
    assert ack.answer is True and ack.preference == "you love quiet hotels"
    empty = parse_verdict("<preference></preference><answer>No</answer>", "acknowledge", "xml")
    assert empty.preference == "" and empty.answer is False


@pytest.mark.parametrize(
    "reply",
    [
        "The answer is yes.",  # no tag (the official parser would read "" and count it as No)
        "<answer>Yes</answer><answer>No</answer>",  # two answers
        "<answer>Not sure</answer>",
        "<answer>Yes",  # unclosed
    ],
)
def test_xml_verdict_without_exactly_one_yes_or_no_is_an_error(reply: str) -> None:
    with pytest.raises(ParseError):
        parse_verdict(reply, "violation", "xml")


def test_choice_parsers() -> None:
    assert parse_choice('{"choice": "c"}', 4, "json") == "C"
    assert parse_choice("<choice>B</choice>", 4, "xml") == "B"
    assert parse_choice("<choice>[D]</choice>", 4, "xml") == "D"
    assert parse_choice("<choice>A", 4, "xml") == "A"  # cut off at the official 5-token budget
    for reply, fmt in [
        ('{"choice": "E"}', "json"),
        ("I pick B", "xml"),
        ("<choice>A</choice> or <choice>B</choice>", "xml"),
        ("<choice>E</choice>", "xml"),
    ]:
        with pytest.raises(ParseError):
            parse_choice(reply, 4, fmt)  # type: ignore[arg-type]


def test_option_lettering_and_label_strip() -> None:
    assert format_options(["x", "y"]) == "A. x\nB. y"
    assert strip_label("Response: Stay at the Riverside.", "Response") == "Stay at the Riverside."
    assert strip_label("No label here.", "Response") == "No label here."
