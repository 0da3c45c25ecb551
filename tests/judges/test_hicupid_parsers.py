from __future__ import annotations

import json
from typing import Any

import pytest

from personalign.benchmarks.hicupid.judges import (
    combine_orders,
    model_slot,
    outcome_for,
    parse_ab_verdict,
    parse_schedule_verdict,
)
from personalign.errors import ParseError


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # The original's greedy regex took the last a/b/tie on the line: these would flip.
        ("Better Response: B, because A ignores the user's dislike of cilantro.", "B"),
        ("Better Response: A (B is generic and never mentions a thing about the user)", "A"),
        ("- Personalization: A uses the persona.\n- Logical Validity: both fine.\nBetter Response: A", "A"),
        ("Better Response: Tie, both are equally good at this", "Tie"),
        ("**Better Response:** [B]", "B"),
        ("better response: tie", "Tie"),
        ("Better Response: Response A", "A"),
        (json.dumps({"personalization": "x", "logical_validity": "y", "better_response": "B"}), "B"),
        ('```json\n{"personalization": "x", "logical_validity": "y", "better_response": "Tie"}\n```', "Tie"),
        # Seen from SmolLM2 under a JSON grammar: raw newlines inside strings (not valid JSON).
        (
            '{ "personalization": "I\'m not a\n" ,"logical_validity": "Me\n" ,"better_response": "A"}',
            "A",
        ),
    ],
)
def test_ab_verdict_is_the_token_after_the_colon(text: str, verdict: str) -> None:
    assert parse_ab_verdict(text) == verdict


@pytest.mark.parametrize(
    "text",
    [
        "Answer A is better because it uses the user's information.",  # no verdict line
        "Better Response: A/B/Tie",  # the template echoed back
        "Better Response: Both are fine",  # neither A, B nor Tie
        "Better Response: A\nBetter Response: B",  # conflicting verdicts
        '{"better_response": "A", "verdict": "B"}',  # conflicting JSON fields
        json.dumps({"better_response": "C"}),
        "",
    ],
)
def test_unparseable_ab_verdicts_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse_ab_verdict(text)


@pytest.mark.parametrize(
    ("text", "yes"),
    [
        ("Satisfaction: NO, it does not mention the dinner.", False),  # original: "no" in "not" aside, ok
        ("- Personalization: names the dentist visit.\nSatisfaction: YES", True),
        ("Satisfaction: **YES** - it now flags the clash", True),
        ("Satisfaction: No. The answer books it without noticing anything", False),
        (json.dumps({"personalization": "x", "satisfaction": "NO"}), False),
        ('{"personalization": "line one\nline two", "satisfaction": "YES"}', True),
    ],
)
def test_schedule_verdict_is_the_token_after_the_colon(text: str, yes: bool) -> None:
    assert parse_schedule_verdict(text) is yes


@pytest.mark.parametrize(
    "text",
    [
        "Satisfaction: Not really",  # the original matched the "No" inside "Not"
        "Satisfaction: nowhere near",
        "The answer acknowledges the conflict.",
        "Satisfaction: YES\nSatisfaction: NO",
    ],
)
def test_unparseable_schedule_verdicts_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse_schedule_verdict(text)


def test_model_slot_is_seeded_per_question_and_balanced() -> None:
    ids = [f"test_1/{u}#{q}" for u in range(50) for q in range(10)]
    slots = [model_slot(42, i) for i in ids]
    assert slots == [model_slot(42, i) for i in ids]  # deterministic
    assert set(slots) == {"A", "B"}
    assert 0.4 < slots.count("A") / len(slots) < 0.6  # about half in each position
    assert slots != [model_slot(7, i) for i in ids]  # the seed matters


def test_outcomes_and_order_combination() -> None:
    assert outcome_for("A", "A") == "win" and outcome_for("A", "B") == "loss"
    assert outcome_for("Tie", "B") == "tie"
    assert combine_orders("win", "win") == ("win", False)
    assert combine_orders("win", "loss") == ("tie", True)
    assert combine_orders("tie", "win") == ("tie", True)


@pytest.mark.parametrize(
    ("text", "yes"),
    [
        # JSON values the key regex does not read: the parsed field, upper-cased, decides
        ('{"personalization": "x", "satisfaction": "yEs"}', True),
        ('{"verdict": " nO "}', False),
    ],
)
def test_schedule_verdict_from_a_json_field_in_any_case(text: str, yes: bool) -> None:
    assert parse_schedule_verdict(text) is yes


@pytest.mark.parametrize(
    ("text", "verdict"),
    [('{"better_response": "tIE"}', "Tie"), ('{"verdict": " B "}', "B")],
)
def test_ab_verdict_from_a_json_field(text: str, verdict: str) -> None:
    assert parse_ab_verdict(text) == verdict


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (
            parse_schedule_verdict,
            "Satisfaction: YES\nSatisfaction: NO",
            "schedule judge: conflicting verdicts ['NO', 'YES'] in 'Satisfaction: YES",
        ),
        (
            parse_schedule_verdict,
            '{"satisfaction": "maybe"}',
            "schedule judge: verdict 'MAYBE' is not YES or NO",
        ),
        (parse_schedule_verdict, '{"other": "YES"}', 'schedule judge: no verdict found in \'{"other"'),
        (parse_schedule_verdict, "no json here", "schedule judge: no verdict found in 'no json here'"),
        (
            parse_ab_verdict,
            "Better Response: A\nBetter Response: B",
            "A/B judge: conflicting verdicts ['A', 'B'] in 'Better",
        ),
        (parse_ab_verdict, '{"better_response": "C"}', "A/B judge: verdict 'C' is not A, B or Tie"),
        (parse_ab_verdict, '{"other": "A"}', 'A/B judge: no verdict found in \'{"other"'),
    ],
)
def test_unparseable_verdicts_say_which_judge_and_why(parse: Any, text: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        # JSON escapes the key regex cannot read: the parsed field decides
        ('{"verdict": "\\u0042"}', "B"),
        ('{"better_response": "\\u0074IE"}', "Tie"),
    ],
)
def test_ab_verdict_from_a_json_field_the_regex_cannot_read(text: str, verdict: str) -> None:
    assert parse_ab_verdict(text) == verdict
