"""A deterministic in-process model for tests, dry runs and the loopback stub server.

It recognises personalign's own prompts (by JSON schema name or section headings) and
answers in the expected shape, with content derived from the prompt by word overlap, so
metrics computed over its answers are non-trivial and reproducible. Tests can inject
failures (raised before answering) and replace the responder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from personalign.errors import ModelCallError
from personalign.llm.types import BackendResponse, GenerateConfig, Usage
from personalign.types import Message

# A responder returns the reply text, or a whole `BackendResponse` to script a finish reason
# (e.g. a reply cut off at the token limit).
Responder = Callable[[Sequence[Message], GenerateConfig], "str | BackendResponse"]

_WORD = re.compile(r"[a-z]{4,}")

# Responders for prompts the core does not know, keyed by schema-name prefix (e.g. ``synth_``:
# the synthesis pipelines' dry-run answers, registered by `personalign.synth` when it is imported),
# so this backend never imports a package above the model layer.
SchemaResponder = Callable[[Sequence[Message], GenerateConfig], str]
_SCHEMA_RESPONDERS: dict[str, SchemaResponder] = {}


def register_schema_responder(prefix: str, responder: SchemaResponder) -> None:
    """Answer every JSON-schema call whose schema name starts with ``prefix`` with ``responder``."""
    if not prefix:
        raise ValueError("a schema responder needs a non-empty schema-name prefix")
    _SCHEMA_RESPONDERS[prefix] = responder


def _schema_responder(name: str) -> SchemaResponder | None:
    """The registered responder for a schema name (the longest matching prefix), if any."""
    matches = [p for p in _SCHEMA_RESPONDERS if name.startswith(p)]
    return _SCHEMA_RESPONDERS[max(matches, key=len)] if matches else None


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _overlap(a: str, b: str) -> float:
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / max(1, len(wa))


def _field(text: str, name: str) -> str:
    match = re.search(rf"^{name}:\s*(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else ""


def _numbered(text: str) -> list[str]:
    return re.findall(r"^\d+\.\s+(.*)$", text.split("Checklist:", 1)[-1], re.MULTILINE)


def _label(score: float) -> str:
    if score >= 0.5:
        return "Fully Covered"
    if score >= 0.2:
        return "Partially Covered"
    return "Not Covered"


def default_responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    system = next((m.content for m in messages if m.role == "system"), "")
    # The first user message holds the task; later ones are re-asks that refer back to it.
    user = next((m.content for m in messages if m.role == "user"), "")
    name = config.schema_name if config.json_schema is not None else ""
    registered = _schema_responder(name) if name else None
    if registered is not None:
        return registered(messages, config)
    if name == "checklist":
        preference = _field(user, "Preference")
        words = preference.rstrip(".").split()
        half = max(1, len(words) // 2)
        items = [f"Does the response follow: {' '.join(words[:half])}?"]
        if len(words) > 3:
            items.append(f"Does the response follow: {' '.join(words[half:])}?")
        return json.dumps({"checklist": items})
    if name in ("match_results", "match_list"):
        preference = _field(user, "Preference") or _field(user, "Criterion")
        entries = [
            {"index": i, "reasoning": "Compared by wording.", "label": _label(_overlap(item, preference))}
            for i, item in enumerate(_numbered(user), start=1)
        ]
        if name == "match_list":
            return json.dumps([{"index": e["index"], "label": e["label"]} for e in entries])
        return json.dumps({"results": entries})
    if name == "benchpres_preference" or (not name and '"do_not_follow"' in system):
        attribute = _field(user, "Preference")
        message = user.split("Message:", 1)[-1]
        return json.dumps({"label": "follow" if _overlap(attribute, message) >= 0.5 else "do_not_follow"})
    if name == "benchpres_completeness" or (not name and "Rating: [[" in system):
        # The message with memory against the reference without it, rated by relative length.
        after = user.split("(with memory):", 1)[-1]
        with_memory, _, reference = after.partition("(without memory, the reference):")
        ratio = len(with_memory.split()) / max(1, len(reference.split()))
        rating = max(1, min(5, round(1 + 4 * min(1.0, ratio))))
        if not name:
            return f"Message A covers the request about as fully as the reference.\nRating: [[{rating}]]"
        return json.dumps({"explanation": "Rated by relative length.", "rating": rating})
    if "User Knowledge Memories" in user:
        # Apply every stored preference, or with the mitigation instruction only the stated ones.
        cues = (
            ("i prefer",)
            if "Leave out any preference" in user
            else ("i prefer", "i like", "i love", "call me")
        )
        applied = [
            line for line in user.splitlines() if line.lower().startswith(cues) or "call me" in line.lower()
        ]
        if "Leave out any preference" in user:
            applied = [line for line in applied if line.lower().startswith("i prefer")]
        text = "Dear recipient,\n" + "\n".join(applied) + "\nI am writing about my request.\nRegards"
        return ("<think>First list the stored preferences.</think>\n" + text) if config.reasoning else text
    if name == "generation_judgement":
        response = user.split("## AI assistant's response", 1)[-1]
        score = 1 + round(9 * min(1.0, 2 * _overlap(system, response)))
        return json.dumps({"analysis": "Scored by wording overlap.", "label": "Partial", "score": score})
    if name == "ab_verdict":  # HiCUPID A/B judge: the answer sharing more words with the user info wins
        info = user.split("## The user's question", 1)[0]
        answer_a = user.split("## Answer A", 1)[-1].split("## Answer B", 1)[0]
        answer_b = user.split("## Answer B", 1)[-1]
        a, b = _overlap(info, answer_a), _overlap(info, answer_b)
        verdict = "Tie" if abs(a - b) < 1e-9 else ("A" if a > b else "B")
        return json.dumps(
            {
                "personalization": "Compared by wording.",
                "logical_validity": "Both read fine.",
                "better_response": verdict,
            }
        )
    if name == "schedule_verdict":  # HiCUPID schedule judge: YES when the answer names the existing event
        event = user.split("## The user's existing event", 1)[-1].split("## The user's request", 1)[0]
        answer = user.split("## The assistant's answer", 1)[-1]
        yes = _overlap(event, answer) >= 0.5
        return json.dumps({"personalization": "Checked by wording.", "satisfaction": "YES" if yes else "NO"})
    if "Most Likely Preference" in user:
        feedback = [line for line in user.splitlines() if line.strip() and not line.startswith("#")]
        guess = feedback[1] if len(feedback) > 1 else "The user prefers concise answers."
        return f"### Analysis\nRead the earlier sessions.\n\n### Most Likely Preference\n{guess[:200]}"
    if "condense one conversation" in system:
        return "The user asked for help and gave feedback: " + " ".join(user.split()[:40])
    return "Here is a response that follows what you asked: " + " ".join(user.split()[-40:])


class ScriptedBackend:
    supports_json_schema = True
    supports_reasoning = True

    def __init__(self, responder: Responder | None = None, failures: Sequence[ModelCallError] = ()) -> None:
        self.responder = responder or default_responder
        self.failures = list(failures)
        self.calls = 0

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        reply = self.responder(messages, config)
        prompt_tokens = sum(len(m.content.split()) for m in messages)
        if isinstance(reply, BackendResponse):
            return reply.model_copy(
                update={
                    "usage": Usage(prompt_tokens=prompt_tokens, completion_tokens=len(reply.text.split()))
                }
            )
        return BackendResponse(
            text=reply,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=len(reply.split())),
            finish_reason="stop",
        )

    async def aclose(self) -> None:
        return None
