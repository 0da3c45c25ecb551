"""Strict parsing of model output. Anything that does not parse raises `ParseError`, never a default."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from personalign.errors import ParseError

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def snippet(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def extract_json(text: str) -> Any:
    """Return the JSON value in `text`: the whole text, a fenced block, or the first object/list.

    Unlike a first-to-last-fence slice, this never glues two blocks together, and it rejects
    text that contains no complete JSON value.
    """
    stripped = text.strip()
    if not stripped:
        raise ParseError("empty output where JSON was expected")
    # strict=False: accept raw newlines and tabs inside strings, which small models write under a
    # JSON grammar (the value is unambiguous); otherwise the scan below finds a nested object instead.
    decoder = json.JSONDecoder(strict=False)
    try:
        return decoder.decode(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(stripped):
        try:
            return decoder.decode(block.strip())
        except json.JSONDecodeError:
            continue
    for match in re.finditer(r"[\[{]", stripped):
        try:
            value, _ = decoder.raw_decode(stripped, match.start())
            return value
        except json.JSONDecodeError:
            continue
    raise ParseError(f"no JSON value found in output: {snippet(stripped)!r}")


def require_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


# --- inline reasoning ---------------------------------------------------------------------------

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_UNOPENED_THINK_END = re.compile(r"^.*?</(?:think|thinking|reasoning)>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"<(?:think|thinking|reasoning)>.*\Z", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class SplitOutput:
    reasoning: str
    final: str


def split_reasoning(text: str) -> SplitOutput:
    """Separate inline reasoning from the final message: ``<think>...</think>`` blocks,
    everything up to a closing tag whose opening tag the chat template already sent, and an
    opening tag never closed (the model ran out of tokens while reasoning)."""
    parts: list[str] = []

    def take(match: re.Match[str]) -> str:
        parts.append(match.group(0))
        return ""

    rest = _THINK.sub(take, text)
    rest = _UNOPENED_THINK_END.sub(take, rest, count=1)
    rest = _UNCLOSED_THINK.sub(take, rest, count=1)
    return SplitOutput(reasoning="\n".join(parts).strip(), final=rest.strip())


def int_in_range(value: Any, what: str, low: int, high: int) -> int:
    """A judge's integer field (an int, a whole float or a string of ASCII digits) within
    `low..high`; anything else is a ParseError naming `what` and the value."""
    if isinstance(value, str) and value.strip().isdecimal() and value.strip().isascii():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ParseError(f"{what} {value!r} is not an integer from {low} to {high}")
    return value
