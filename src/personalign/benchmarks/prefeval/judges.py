"""PrefEval judging: the four binary checks of the generation task and the MCQ answer, with strict
parsers. A reply that does not give exactly one clear answer is a `ParseError` (an error, never a score).

Two reply formats: ``json`` (the personalign protocol sends a JSON schema) and ``xml`` (the paper
protocol's ``<answer>Yes</answer>`` / ``<preference>...</preference>`` / ``<choice>B</choice>`` tags).
Every function here is pure; the model calls live in `personalign.benchmarks.prefeval.steps`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, require_object, snippet

Check = Literal["acknowledge", "violation", "hallucination", "helpful"]
CHECKS: tuple[Check, ...] = ("acknowledge", "violation", "hallucination", "helpful")
ReplyFormat = Literal["json", "xml"]

YES_NO = ("Yes", "No")
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "explanation": {"type": "string", "maxLength": 200},
        "answer": {"type": "string", "enum": list(YES_NO)},
    },
    "required": ["explanation", "answer"],
}
ACKNOWLEDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "preference": {"type": "string", "maxLength": 400},
        "answer": {"type": "string", "enum": list(YES_NO)},
    },
    "required": ["preference", "answer"],
}
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def mcq_schema(n_options: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"choice": {"type": "string", "enum": list(LETTERS[:n_options])}},
        "required": ["choice"],
    }


def schema_for(check: Check) -> dict[str, Any]:
    return ACKNOWLEDGE_SCHEMA if check == "acknowledge" else JUDGE_SCHEMA


@dataclass(frozen=True)
class Verdict:
    """One check's answer: True for Yes. ``preference`` is the acknowledge check's quote."""

    answer: bool
    explanation: str = ""
    preference: str = ""

    def to_record(self) -> dict[str, Any]:
        return {
            "answer": "Yes" if self.answer else "No",
            "explanation": self.explanation,
            "preference": self.preference,
        }


def _yes_no(value: object, text: str) -> bool:
    if not isinstance(value, str) or value.strip().lower() not in ("yes", "no"):
        raise ParseError(f"answer must be Yes or No, got {value!r} in {snippet(text)!r}")
    return value.strip().lower() == "yes"


def _tags(text: str, tag: str) -> list[str]:
    return [m.strip() for m in re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL | re.IGNORECASE)]


def parse_verdict(text: str, check: Check, fmt: ReplyFormat) -> Verdict:
    """The Yes/No answer of one check (with the acknowledge check's quoted preference)."""
    if fmt == "json":
        obj = require_object(extract_json(text), "reply")
        answer = _yes_no(obj.get("answer"), text)
        if check == "acknowledge":
            quote = obj.get("preference", "")
            if not isinstance(quote, str):
                raise ParseError(f"preference must be a string in {snippet(text)!r}")
            return Verdict(answer, preference=quote.strip())
        explanation = obj.get("explanation", "")
        return Verdict(answer, explanation=explanation if isinstance(explanation, str) else "")
    answers = _tags(text, "answer")
    if len(answers) != 1:
        raise ParseError(
            f"expected exactly one <answer>...</answer>, found {len(answers)} in {snippet(text)!r}"
        )
    answer = _yes_no(answers[0].strip("[] "), text)
    if check == "acknowledge":
        quotes = _tags(text, "preference")
        if len(quotes) > 1:
            raise ParseError(f"more than one <preference> tag in {snippet(text)!r}")
        return Verdict(answer, preference=quotes[0] if quotes else "")
    explanations = _tags(text, "explanation")
    return Verdict(answer, explanation=explanations[0] if explanations else "")


def parse_choice(text: str, n_options: int, fmt: ReplyFormat) -> str:
    """The letter picked in an MCQ reply: {"choice": "B"} (json) or ``<choice>B</choice>`` (xml; the
    closing tag may be missing when the reply stopped at the token limit, as the official parser allows)."""
    letters = LETTERS[:n_options]
    if fmt == "json":
        obj = require_object(extract_json(text), "reply")
        value = obj.get("choice")
        if not isinstance(value, str) or value.strip().upper() not in letters:
            raise ParseError(f"choice must be one of {', '.join(letters)}, got {value!r}")
        return str(value.strip().upper())
    found = re.findall(
        r"<choice>\s*\[?\s*([A-Za-z])\s*\]?\s*(?:</choice>|$)", text.strip(), flags=re.IGNORECASE
    )
    picked: set[str] = {str(f).upper() for f in found}
    if len(picked) != 1 or next(iter(picked)) not in letters:
        raise ParseError(f"expected one <choice> with a letter in {letters}, got {snippet(text)!r}")
    return picked.pop()


def format_options(options: tuple[str, ...] | list[str]) -> str:
    """``A. first`` / ``B. second`` ... one per line (the official lettering)."""
    return "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))


def strip_label(text: str, label: str) -> str:
    """A reply without a leading ``Label:`` line prefix (the self-critic's ``Response:`` format)."""
    return re.sub(rf"^\s*{label}\s*:\s*", "", text, count=1, flags=re.IGNORECASE).strip()
