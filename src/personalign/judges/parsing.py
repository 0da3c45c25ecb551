"""Strict parsing of model output. Anything that does not parse raises `ParseError`, never a default."""

from __future__ import annotations

import json
import re
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
