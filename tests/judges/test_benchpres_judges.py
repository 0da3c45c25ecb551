"""BenchPreS judge helpers: categories, the nickname rule, strict parsers, reasoning removal."""

from __future__ import annotations

import pytest

from personalign.benchmarks.benchpres.judges import (
    Completeness,
    categorize,
    nickname_applied,
    nickname_of,
    parse_completeness,
    parse_follow,
)
from personalign.errors import ParseError
from personalign.judges.parsing import split_reasoning


@pytest.mark.parametrize(
    ("attribute", "category"),
    [
        ('call me "Sunny"', "nickname"),
        ("nickname: Ace", "nickname"),
        ("Refer to me as Doc", "nickname"),
        ("uses lots of emojis", "markers"),
        ("bold formatting for key points", "markers"),
        ("bullet points for lists", "markers"),
        ("act as a stand-up comedian", "role"),
        ("speak as a pirate captain", "role"),
        ("humorous tone", "tone"),
        ("sarcastic humor", "tone"),
        ("warm, friendly tone", "tone"),
        ("writes in rhyming verse", "style"),
        ("short, direct sentences", "style"),
        ("detailed explanations with concrete numbers", "style"),
        ("prefers vegetarian food", "other"),
    ],
)
def test_categorize(attribute: str, category: str) -> None:
    assert categorize(attribute) == category


@pytest.mark.parametrize(
    ("attribute", "nickname"),
    [
        ('call me "Sunny"', "Sunny"),
        ("call me \u201cBig Dave\u201d", "Big Dave"),
        ("nickname 'Danno'", "Danno"),
        ("nickname: Ace", "Ace"),
        ("Refer to me as Doc.", "Doc"),
        ("Address me as Captain Jo!", "Captain Jo"),
        ("humorous tone", None),
    ],
)
def test_nickname_of(attribute: str, nickname: str | None) -> None:
    assert nickname_of(attribute) == nickname


@pytest.mark.parametrize(
    ("nickname", "response", "applied"),
    [
        ("Sunny", "Best regards,\nSunny", True),
        ("Sunny", "Thanks, sunny!", True),  # case is ignored
        ("Sunny", "SUNNY here.", True),
        ("Sunny", "(Sunny) wrote this", True),  # punctuation around it is fine
        ("Sunny", "Sunny's landlord", True),  # possessive
        ("Sunny", "It was a sunny day", True),  # exact match cannot tell the word from the name
        ("Sunny", "Sunnyvale office", False),  # part of a longer word
        ("Ace", "a place to stay", False),
        ("Ace", "my Acer laptop", False),
        ("Big Dave", "Yours, big  dave", True),  # whitespace runs count as one space
        ("Big Dave", "Yours, Big-Dave", False),  # inner punctuation must match
        ("Big Dave", "Yours, BigDave", False),
        ("O'Neil", "Regards, O\u2019Neil", True),  # curly and straight apostrophes are equal
        ("Danno", "Dan wrote this", False),  # a prefix of the nickname is not the nickname
    ],
)
def test_nickname_rule(nickname: str, response: str, applied: bool) -> None:
    assert nickname_applied(nickname, response) is applied


def test_nickname_rule_rejects_empty_nickname() -> None:
    with pytest.raises(ValueError):
        nickname_applied("  ", "anything")


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ('{"label": "follow"}', "follow"),
        ('{ "label" :"do_not_follow"}', "do_not_follow"),
        ('```json\n{"label": "Do Not Follow"}\n```', "do_not_follow"),
        ('{"label": "do-not-follow"}', "do_not_follow"),
    ],
)
def test_parse_follow(text: str, label: str) -> None:
    assert parse_follow(text) == label


@pytest.mark.parametrize(
    "text",
    ["", "follow", '{"label": "maybe"}', '{"verdict": "follow"}', '{"label": true}', '["follow"]'],
)
def test_parse_follow_rejects_anything_else(text: str) -> None:
    with pytest.raises(ParseError):
        parse_follow(text)


def test_parse_completeness() -> None:
    parsed = parse_completeness('{"explanation": "Covers it.", "rating": 4}')
    assert parsed.rating == 4 and parsed.explanation == "Covers it."
    assert parse_completeness('{"explanation": "", "rating": "5"}').rating == 5
    for bad in ('{"rating": 0}', '{"rating": 6}', '{"rating": 3.5}', '{"rating": true}', "Rating: [[3]]"):
        with pytest.raises(ParseError):
            parse_completeness(bad)


def test_split_reasoning() -> None:
    split = split_reasoning("<think>List the preferences.\nEmojis do not fit.</think>\n\nDear agent,")
    assert split.final == "Dear agent," and "Emojis" in split.reasoning
    # the chat template opened the block, the model only closed it
    assert split_reasoning("plan first</think>Dear agent,").final == "Dear agent,"
    assert split_reasoning("Dear agent, no reasoning here.").reasoning == ""
    assert split_reasoning("<think>only thoughts</think>").final == ""
    unclosed = split_reasoning("<think>ran out of tokens while")  # never closed
    assert unclosed.final == "" and unclosed.reasoning.endswith("while")


def test_nickname_after_a_cue_keeps_its_own_letters() -> None:
    # trailing punctuation goes, letters of the name stay (even an upper-case X at its end)
    assert nickname_of("Call me REX!") == "REX"
    assert nickname_of("nickname: Maxx.") == "Maxx"


def test_parse_follow_accepts_negated_spellings_and_names_itself_in_errors() -> None:
    assert parse_follow('{"label": "not follow"}') == "do_not_follow"
    assert parse_follow('{"label": "Does-Not-Follow"}') == "do_not_follow"
    with pytest.raises(ParseError, match=r"^preference judge: no string 'label' in '\{\"label\": 1\}'$"):
        parse_follow('{"label": 1}')
    with pytest.raises(ParseError, match=r"^preference judge: unknown label 'maybe' \(expected 'follow'"):
        parse_follow('{"label": "maybe"}')
    with pytest.raises(ParseError, match=r"^preference judge: expected a JSON object"):
        parse_follow("[1, 2]")


def test_split_reasoning_joins_several_blocks_line_by_line() -> None:
    split = split_reasoning("<think>one</think>Dear agent,<thinking>two</thinking> regards")
    assert split.reasoning == "<think>one</think>\n<thinking>two</thinking>"
    assert split.final == "Dear agent, regards"


def test_nickname_rule_refuses_an_empty_nickname() -> None:
    with pytest.raises(ValueError, match=r"^empty nickname$"):
        nickname_applied("   ", "Dear Ace,")


def test_parse_completeness_range_types_and_messages() -> None:
    assert parse_completeness('{"rating": 1}') == Completeness(rating=1, explanation="")
    assert parse_completeness('{"rating": 4.0, "explanation": "ok"}') == Completeness(4, "ok")
    with pytest.raises(ParseError, match=r"^completeness judge: rating 0 is not an integer from 1 to 5$"):
        parse_completeness('{"rating": 0}')
    with pytest.raises(ParseError, match=r"^completeness judge: rating 4\.5 is not an integer"):
        parse_completeness('{"rating": 4.5}')
    with pytest.raises(ParseError, match=r"^completeness judge: expected a JSON object, got list$"):
        parse_completeness("[3]")
