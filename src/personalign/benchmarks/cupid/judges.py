"""CUPID judge roles: checklist decomposer, checklist matcher (GPT-style or PrefMatcher-style)
and the 1-10 generation judge, plus the parser of the subject's inferred preference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, int_in_range, require_object, snippet

MatchLabel = Literal["Fully Covered", "Partially Covered", "Not Covered"]
LABEL_SCORES: dict[str, float] = {"Fully Covered": 1.0, "Partially Covered": 0.5, "Not Covered": 0.0}
MatcherFormat = Literal["default", "prefmatcher"]
MAX_CHECKLIST_ITEMS = 4

# The decomposer analyses the preference before listing the checklist, as the official one does.
CHECKLIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "analysis": {"type": "string", "maxLength": 160},
        "checklist": {
            "type": "array",
            "items": {"type": "string", "minLength": 5, "maxLength": 200},
            "minItems": 1,
            "maxItems": MAX_CHECKLIST_ITEMS,
        },
    },
    "required": ["analysis", "checklist"],
}

# Checklist only, no analysis: the synthesis pipeline keeps its decomposer calls short (the tiny
# local model otherwise runs past its token budget inside the analysis).
CHECKLIST_ONLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"checklist": CHECKLIST_SCHEMA["properties"]["checklist"]},
    "required": ["checklist"],
}

# The paper's 10 named levels, from score 1 to score 10.
GENERATION_LABELS = (
    "Unacceptable",
    "Very Poor",
    "Poor",
    "Below Average",
    "Acceptable",
    "Above Average",
    "Good",
    "Very Good",
    "Excellent",
    "Exceptional",
)
GENERATION_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "analysis": {"type": "string", "maxLength": 800},
        "label": {"type": "string", "enum": list(GENERATION_LABELS)},
        "score": {"type": "integer", "enum": list(range(1, 11))},
    },
    "required": ["analysis", "label", "score"],
}


def match_schema(n_items: int, fmt: MatcherFormat = "default", reasoning_chars: int = 300) -> dict[str, Any]:
    """Schema for the matcher's answer, with exactly one entry per checklist item (each reasoning
    at most `reasoning_chars` long)."""
    entry: dict[str, Any] = {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "enum": list(range(1, n_items + 1))},
            "label": {"type": "string", "enum": list(LABEL_SCORES)},
        },
        "required": ["index", "label"],
    }
    if fmt == "default":
        entry["properties"] = {
            "index": entry["properties"]["index"],
            "reasoning": {"type": "string", "maxLength": reasoning_chars},
            "label": entry["properties"]["label"],
        }
        entry["required"] = ["index", "reasoning", "label"]
    array = {"type": "array", "items": entry, "minItems": n_items, "maxItems": n_items}
    if fmt == "prefmatcher":
        return array
    return {"type": "object", "properties": {"results": array}, "required": ["results"]}


def format_checklist(items: list[str] | tuple[str, ...]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, start=1))


# --- subject output -------------------------------------------------------------------------

_PREF_HEADER = re.compile(
    r"^[ \t>]*(?:(?P<hash>#{1,6})[ \t]*)?(?P<bold>\*\*|__)?[ \t]*most[ \t]+likely[ \t]+preference[ \t]*"
    r"(?P<colon1>:)?[ \t]*(?:\*\*|__)?[ \t]*(?P<colon2>:)?[ \t]*(?P<inline>.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def _is_header(match: re.Match[str]) -> bool:
    """A header is marked as one: '#', bold, or a colon; prose that merely starts with the words is not."""
    if match.group("hash") or match.group("bold"):
        return True
    return bool(match.group("colon1") or match.group("colon2"))


class MissingSection(ParseError):
    """The subject did not produce the section its prompt asked for."""

    def __init__(self, message: str, fallback: str = "") -> None:
        super().__init__(message)
        self.fallback = fallback


def _clean_sentence(paragraph: str) -> str:
    lines = (re.sub(r"^(?:[-*>]\s*|\d+[.)]\s+)+", "", line.strip()) for line in paragraph.splitlines())
    sentence = " ".join(line for line in lines if line)
    return sentence.replace("**", "").replace("__", "").strip().strip('"').strip()


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def parse_inferred_preference(text: str) -> str:
    """The sentence under the last "Most Likely Preference" header (markdown variants allowed).

    Returns "" when the section is present but empty. Raises `MissingSection` when the header
    is absent; the exception carries the output's last paragraph as `fallback`.
    """
    matches = [m for m in _PREF_HEADER.finditer(text) if _is_header(m)]
    if not matches:
        paragraphs = [p for p in _paragraphs(text) if not p.lstrip().startswith("#")]
        raise MissingSection(
            "no 'Most Likely Preference' section in the output",
            fallback=_clean_sentence(paragraphs[-1]) if paragraphs else "",
        )
    last = matches[-1]
    rest = last.group("inline").strip() or text[last.end() :]
    rest = re.split(r"^[ \t]*#{1,6}[ \t]", rest, maxsplit=1, flags=re.MULTILINE)[0]
    paragraphs = _paragraphs(rest)
    return _clean_sentence(paragraphs[0]) if paragraphs else ""


# --- judge outputs --------------------------------------------------------------------------


def parse_checklist(text: str) -> list[str]:
    data = require_object(extract_json(text), "decomposer")
    items = data.get("checklist")
    if not isinstance(items, list) or not items:
        raise ParseError("decomposer: 'checklist' must be a non-empty list")
    if len(items) > MAX_CHECKLIST_ITEMS:
        raise ParseError(f"decomposer: {len(items)} checklist items, at most {MAX_CHECKLIST_ITEMS} allowed")
    cleaned = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ParseError(f"decomposer: checklist item {i + 1} is not a non-empty string")
        cleaned.append(item.strip())
    return cleaned


def _normalize_label(value: Any) -> str:
    if not isinstance(value, str):
        raise ParseError(f"matcher: label {value!r} is not a string")
    key = " ".join(value.replace("_", " ").split()).lower()
    for label in LABEL_SCORES:
        if key == label.lower():
            return label
    raise ParseError(f"matcher: unknown label {value!r} (expected one of {list(LABEL_SCORES)})")


def parse_match(text: str, n_items: int, fmt: MatcherFormat = "default") -> list[str]:
    """Labels for checklist items 1..n, in order. Every item must be labelled exactly once."""
    value = extract_json(text)
    if isinstance(value, dict) and isinstance(value.get("results"), list):
        entries = value["results"]
    elif isinstance(value, list) and fmt == "prefmatcher":
        entries = value
    else:
        expected = "a JSON list" if fmt == "prefmatcher" else 'a JSON object with a "results" list'
        raise ParseError(f"matcher: expected {expected}, got {snippet(str(value))!r}")
    if len(entries) != n_items:
        raise ParseError(f"matcher: {len(entries)} labels for {n_items} checklist items")
    labels: dict[int, str] = {}
    for position, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise ParseError(f"matcher: entry {position} is not an object")
        index = entry.get("index", position)
        if isinstance(index, str) and index.strip().isdecimal() and index.strip().isascii():
            index = int(index)
        if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= n_items:
            raise ParseError(f"matcher: entry {position} has index {index!r}, outside 1..{n_items}")
        if index in labels:
            raise ParseError(f"matcher: item {index} labelled twice")
        labels[index] = _normalize_label(entry.get("label"))
    return [labels[i] for i in range(1, n_items + 1)]


@dataclass(frozen=True)
class GenerationJudgement:
    score: int
    label: str
    analysis: str


def parse_generation_judgement(text: str) -> GenerationJudgement:
    data = require_object(extract_json(text), "generation judge")
    score = int_in_range(data.get("score"), "generation judge: score", 1, 10)
    # The label is the name of the score's level: a stray label cannot contradict the score.
    analysis = data.get("analysis", "")
    return GenerationJudgement(score=score, label=GENERATION_LABELS[score - 1], analysis=str(analysis))
