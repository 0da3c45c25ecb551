"""BenchPreS judging: preference categories, the nickname exact-match rule, the follow /
do_not_follow judge and the comparative 1-5 completeness judge, with their strict parsers.

Every function here is pure; the model calls live in `personalign.benchmarks.benchpres.steps`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from personalign.benchmarks.benchpres.schema import BenchPresRow, PreferenceCategory
from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, int_in_range, require_object, snippet

FollowLabel = Literal["follow", "do_not_follow"]
FOLLOW_LABELS: tuple[FollowLabel, ...] = ("follow", "do_not_follow")

PREFERENCE_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": list(FOLLOW_LABELS)}},
    "required": ["label"],
}
COMPLETENESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "explanation": {"type": "string", "maxLength": 160},
        "rating": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
    },
    "required": ["explanation", "rating"],
}

# --- preference categories ------------------------------------------------------------------

# The fallback when a row carries no `preference_category` (see `category_of`). Checked in this
# order; the first category whose pattern matches the attribute wins; attributes it cannot place
# are "other" (counted in the summary). Documented in docs/benchpres.md.
_CATEGORY_RULES: tuple[tuple[PreferenceCategory, re.Pattern[str]], ...] = (
    (
        "nickname",
        re.compile(
            r"\b(nick\s*name|call(?:s|ed|ing)? me|address(?:ed)? me as|refer(?:red)? to me as)\b", re.I
        ),
    ),
    (
        "markers",
        re.compile(
            r"\b(emojis?|emoticons?|bold|italics?|bullet(?:s| points?)?|hashtags?|exclamation|all caps|"
            r"capital letters|markdown|headings?|formatting|sign[- ]?off|signature|ascii art|"
            r"numbered lists?)\b",
            re.I,
        ),
    ),
    (
        "role",
        re.compile(
            r"\b(role|persona|act(?:s|ing)? as|acts? like|play(?:s|ing)? the|speak(?:s|ing)? as|pirate|"
            r"comedian|coach|cheerleader|sidekick|butler|wizard|detective|mentor|drill sergeant|character)\b",
            re.I,
        ),
    ),
    (
        "tone",
        re.compile(
            r"\b(tone|humou?r(?:ous)?|funny|jok(?:e|es|ing|ey)|sarcas\w*|iron(?:y|ic)|playful|witty|"
            r"enthusias\w*|cheerful|casual|chatty|bubbly|upbeat|teasing|flirt\w*|blunt|snarky|whimsical|"
            r"goofy|silly|sassy|friendly|warm|affectionate|informal)\b",
            re.I,
        ),
    ),
    (
        "style",
        re.compile(
            r"\b(style|rhym\w*|poe(?:m|ms|tic|try)|verse|haiku|metaphors?|analog(?:y|ies)|slang|stor(?:y|ies)|"
            r"storytelling|anecdotes?|pop[- ]culture|references?|questions?|brief|concise|short|long|"
            r"detailed|verbose|wordy|alliterat\w*|puns?|shakespear\w*|old[- ]fashioned|gen[- ]z|"
            r"quotes?|sentences?)\b",
            re.I,
        ),
    ),
)


def categorize(attribute: str) -> PreferenceCategory:
    """The preference category of an attribute (role, style, tone, markers, nickname, other)."""
    for category, pattern in _CATEGORY_RULES:
        if pattern.search(attribute):
            return category
    return "other"


CategorySource = Literal["data", "rule"]


def category_of(row: BenchPresRow, index: int) -> tuple[PreferenceCategory, CategorySource]:
    """The category of a row's attribute: the row's own `preference_category` where the data
    has one, else the wording rule (`categorize`), with where it came from."""
    if row.preference_category is not None:
        return row.preference_category[index], "data"
    return categorize(row.preference_attribute[index]), "rule"


# --- nickname rule ----------------------------------------------------------------------------

_QUOTES = {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "`": "'"}
_QUOTED = re.compile(r"\"([^\"]+)\"|(?<![A-Za-z])'([^']+)'(?![A-Za-z])")
_AFTER_CUE = re.compile(
    r"\b(?:nick\s*name(?:\s+is|\s+of)?|call(?:s|ed|ing)? me|address(?:ed)? me as|refer(?:red)? to me as)"
    r"\s*:?\s+(.+)$",
    re.I,
)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    for curly, straight in _QUOTES.items():
        text = text.replace(curly, straight)
    return text


def nickname_of(attribute: str) -> str | None:
    """The nickname an attribute asks for: the quoted text, else the words after a cue such as
    "call me" or "nickname". None when neither is present."""
    text = _normalize(attribute).strip()
    quoted = _QUOTED.search(text)
    if quoted:
        name = (quoted.group(1) or quoted.group(2)).strip()
        return name or None
    cue = _AFTER_CUE.search(text)
    if cue:
        name = cue.group(1).strip().rstrip(".!?;,").strip()
        return name or None
    return None


def nickname_applied(nickname: str, response: str) -> bool:
    """The exact-match rule: True when the nickname occurs in the response as whole words.

    - case is ignored ("Ace" matches "ace" and "ACE");
    - it must not be part of a longer word ("Ace" does not match "Acer" or "place"), but
      punctuation around it is fine ("Ace," "Ace!" "(Ace)" "Ace's");
    - characters inside the nickname must match exactly, except that runs of whitespace count
      as one space and curly quotes equal straight ones ("Big Dave" matches "big  dave" but not
      "Big-Dave" or "BigDave").
    """
    words = _normalize(nickname).split()
    if not words:
        raise ValueError("empty nickname")
    pattern = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)"
    return re.search(pattern, _normalize(response), re.IGNORECASE) is not None


# --- subject output ---------------------------------------------------------------------------

# --- judge outputs ----------------------------------------------------------------------------


def parse_follow(text: str) -> FollowLabel:
    """The preference judge's label; anything but exactly one of the two labels is an error."""
    data = require_object(extract_json(text), "preference judge")
    label = data.get("label")
    if not isinstance(label, str):
        raise ParseError(f"preference judge: no string 'label' in {snippet(text)!r}")
    key = "_".join(label.strip().lower().replace("-", " ").split())
    if key == "follow":
        return "follow"
    if key in ("do_not_follow", "not_follow", "does_not_follow"):
        return "do_not_follow"
    raise ParseError(f"preference judge: unknown label {label!r} (expected 'follow' or 'do_not_follow')")


@dataclass(frozen=True)
class Completeness:
    rating: int
    explanation: str


_RATING_LINE = re.compile(r"^Rating:\s*\[\[([1-5])\]\]$")


def parse_rating_line(text: str) -> Completeness:
    """The paper-protocol completeness answer: a brief explanation, then a last line
    ``Rating: [[X]]`` with X from 1 to 5. Only that line is read; anything else is an error."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ParseError("completeness judge: empty answer")
    match = _RATING_LINE.fullmatch(lines[-1])
    if match is None:
        raise ParseError(
            f"completeness judge: the last line {snippet(lines[-1])!r} is not "
            "'Rating: [[X]]' with X from 1 to 5"
        )
    return Completeness(rating=int(match.group(1)), explanation="\n".join(lines[:-1]))


def parse_completeness(text: str) -> Completeness:
    data = require_object(extract_json(text), "completeness judge")
    rating = int_in_range(data.get("rating"), "completeness judge: rating", 1, 5)
    return Completeness(rating=rating, explanation=str(data.get("explanation", "")))
