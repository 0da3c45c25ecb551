"""HiCUPID judges: the A/B comparison (persona and multi-info questions) and the YES/NO schedule
check, with strict parsers anchored on the verdict token.

The original parsed ``Better Response:.*(A|B|Tie)`` with a greedy ``.*`` and IGNORECASE, so it took
the *last* a/b/tie on the line ("B, because A ignores..." became A), and ``Satisfaction:.*(YES|NO)``
matched the "no" inside "not". Here the verdict is the token right after the colon; an output
without a readable verdict (or with conflicting verdict lines) raises `ParseError`, so it is
recorded as an error and never scored as a tie or a NO.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, snippet

Verdict = Literal["A", "B", "Tie"]
Outcome = Literal["win", "tie", "loss"]
JudgeFormat = Literal["json", "text"]
JUDGE_FORMATS: tuple[str, ...] = ("json", "text")
OUTCOME_SCORES: dict[str, float] = {"win": 1.0, "tie": 0.5, "loss": 0.0}

AB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "personalization": {"type": "string", "maxLength": 240},
        "logical_validity": {"type": "string", "maxLength": 240},
        "better_response": {"type": "string", "enum": ["A", "B", "Tie"]},
    },
    "required": ["personalization", "logical_validity", "better_response"],
}
SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "personalization": {"type": "string", "maxLength": 240},
        "satisfaction": {"type": "string", "enum": ["YES", "NO"]},
    },
    "required": ["personalization", "satisfaction"],
}

# Decorations a judge may put around a label or its value: markdown bold/italics, brackets, quotes.
_DECOR = r"[\s*_`\[\(\"']*"
_AB_LINE = re.compile(
    rf"(?im:^[\s>#*_-]*better[\s_]+response{_DECOR}:){_DECOR}(?i:(?:response|answer)\s+)?(A|B|[Tt][Ii][Ee])(?![A-Za-z0-9/])"
)
_YESNO_LINE = re.compile(
    rf"(?im:^[\s>#*_-]*satisfaction{_DECOR}:){_DECOR}(YES|NO|Yes|No|yes|no)(?![A-Za-z0-9/])"
)

# The verdict field of a JSON answer, read by its key: this also reads answers that are not valid
# JSON elsewhere (small models under a grammar sometimes put raw newlines inside the rationale).
_AB_KEY = re.compile(r'"(?:better_response|verdict)"\s*:\s*"\s*(A|B|[Tt][Ii][Ee])\s*"')
_YESNO_KEY = re.compile(r'"(?:satisfaction|verdict)"\s*:\s*"\s*(YES|NO|Yes|No|yes|no)\s*"')


def _single(found: list[str], what: str, text: str) -> str:
    distinct = sorted(set(found))
    if len(distinct) > 1:
        raise ParseError(f"{what}: conflicting verdicts {distinct} in {snippet(text)!r}")
    return distinct[0]


def _json_field(text: str, keys: tuple[str, ...], what: str) -> str:
    try:
        value = extract_json(text)
    except ParseError:
        raise ParseError(f"{what}: no verdict found in {snippet(text)!r}") from None
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), str):
                return str(value[key]).strip()
    raise ParseError(f"{what}: no verdict found in {snippet(text)!r}")


def parse_ab_verdict(text: str) -> Verdict:
    """The A/B judge's verdict: from a ``Better Response: X`` line, or the JSON field
    ``better_response``. Raises `ParseError` when there is none or they conflict."""
    found = [m.group(1) for m in _AB_LINE.finditer(text)] or [m.group(1) for m in _AB_KEY.finditer(text)]
    if found:
        token = _single([f.capitalize() if f.lower() == "tie" else f for f in found], "A/B judge", text)
    else:
        token = _json_field(text, ("better_response", "verdict"), "A/B judge")
        token = "Tie" if token.lower() == "tie" else token
    if token not in ("A", "B", "Tie"):
        raise ParseError(f"A/B judge: verdict {token!r} is not A, B or Tie")
    return token  # type: ignore[return-value]


def parse_schedule_verdict(text: str) -> bool:
    """The schedule judge's verdict (True = YES): from a ``Satisfaction: YES|NO`` line, or the
    JSON field ``satisfaction``. Raises `ParseError` when there is none or they conflict."""
    found = [m.group(1).upper() for m in _YESNO_LINE.finditer(text)] or [
        m.group(1).upper() for m in _YESNO_KEY.finditer(text)
    ]
    if found:
        token = _single(found, "schedule judge", text)
    else:
        token = _json_field(text, ("satisfaction", "verdict"), "schedule judge").upper()
    if token not in ("YES", "NO"):
        raise ParseError(f"schedule judge: verdict {token!r} is not YES or NO")
    return token == "YES"


def model_slot(seed: int, instance_id: str) -> Literal["A", "B"]:
    """Where the model's answer goes in the single-order A/B comparison.

    Drawn per question from (seed, instance id), so it is 50/50 over questions and does not change
    with --limit, resume or the order of evaluation.
    """
    return "A" if random.Random(f"{seed}:{instance_id}").random() < 0.5 else "B"


def outcome_for(verdict: Verdict, slot: Literal["A", "B"]) -> Outcome:
    """The model's outcome when its answer sat in `slot`."""
    if verdict == "Tie":
        return "tie"
    return "win" if verdict == slot else "loss"


def combine_orders(first: Outcome, second: Outcome) -> tuple[Outcome, bool]:
    """The outcome over both orders, and whether the two orders disagreed (a flip).

    Agreeing orders keep their outcome; disagreeing ones count as a tie.
    """
    if first == second:
        return first, False
    return "tie", True
