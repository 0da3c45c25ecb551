"""Answers of the scripted test model to PrefEval's JSON-schema calls (schema names ``prefeval_*``).

Deterministic rules by word overlap, so runs on the scripted model give non-trivial, reproducible
numbers: a response that shares most words with the preference follows it; the MCQ pick is the
option sharing most words with the conversation before the question.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from personalign.llm.backends.scripted import register_schema_responder
from personalign.llm.types import GenerateConfig
from personalign.types import Message

_WORD = re.compile(r"[a-z]{4,}")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _overlap(a: str, b: str) -> float:
    wa = _words(a)
    return len(wa & _words(b)) / max(1, len(wa))


def _between(text: str, start: str, end: str | None = None) -> str:
    part = text.split(start, 1)[-1]
    return part.split(end, 1)[0].strip() if end else part.strip()


def respond(messages: Sequence[Message], config: GenerateConfig) -> str:
    name = config.schema_name or ""
    user = [m.content for m in messages if m.role == "user"][-1]
    if name == "prefeval_mcq":
        context = " ".join(m.content for m in messages[:-1]) or user
        options = re.findall(r"^([A-Z])\. (.*)$", user, re.MULTILINE)
        best = max(options, key=lambda o: _overlap(o[1], context)) if options else ("A", "")
        return json.dumps({"choice": best[0]})
    response = _between(user, "Assistant's answer:", "Answer with JSON only")
    if name == "prefeval_acknowledge":
        sentences = [
            s for s in re.split(r"(?<=[.!?])\s+", response) if re.search(r"\b(you|your|prefer)\b", s, re.I)
        ]
        quote = sentences[0] if sentences else ""
        return json.dumps({"preference": quote, "answer": "Yes" if quote else "No"})
    if name == "prefeval_violation":
        preference = _between(user, "Preference:", "\n")
        violated = _overlap(preference, response) < 0.3
        return json.dumps({"explanation": "Compared by wording.", "answer": "Yes" if violated else "No"})
    if name == "prefeval_helpful":
        unhelpful = bool(re.search(r"\b(sorry|apologi[sz]e|cannot help|can.t help)\b", response, re.I))
        unhelpful = unhelpful or len(response.split()) < 5
        return json.dumps({"explanation": "Checked for refusals.", "answer": "No" if unhelpful else "Yes"})
    if name == "prefeval_hallucination":
        preference = _between(user, "Preference:", "\n")
        restatement = _between(user, "Restatement:", "\n")
        made_up = bool(restatement) and _overlap(restatement, preference) < 0.2
        return json.dumps({"explanation": "Compared by wording.", "answer": "Yes" if made_up else "No"})
    raise ValueError(f"no scripted PrefEval answer for schema {name!r}")


register_schema_responder("prefeval_", respond)
