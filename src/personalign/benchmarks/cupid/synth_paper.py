"""`personalign synth cupid --protocol paper`: the official synthesis prompts, read at run time.

The official decomposer, user simulator and assistant simulator prompts come from kixlab/CUPID at
the pinned commit (`protocol.SOURCE`, sha256 per file; `personalign protocol fetch cupid`); nothing
of their text is stored here. This module renders the messages the official code sends for those
three roles (the decomposer's system/user pair; the simulators' multi-turn chats, with the roles
flipped for the user simulator) and parses their answers by the official rules, except that an
answer they cannot read is an error. Persona, context factors and sessions keep our prompts under
both protocols (docs/synthesis.md says why).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.protocol import (
    ASSISTANT_SIMULATOR_YAML,
    DECOMPOSER_YAML,
    SOURCE,
    USER_SIMULATOR_YAML,
    PaperPrompt,
    paper_prompt,
)
from personalign.errors import ParseError
from personalign.judges.parsing import snippet
from personalign.prompts import PromptTemplate
from personalign.protocols.upstream import ProtocolError, UpstreamFiles, UpstreamSource, open_upstream
from personalign.types import Message

# The section headers of the user simulator's answer (the output format its prompt asks for); the
# official code splits its answer on them and opens each chat with an answer in the same layout.
EVALUATION = "#### Evaluation of AI Assistant's Response"
SCORE = "#### Evaluation Score"
CONTINUE_OR_END = "#### Continue or End?"
SELECTED = "#### Selected Checklist Items"
THINKING = "#### Thinking"
YOUR_MESSAGE = "#### Your Message"


@dataclass(frozen=True)
class PaperSynthPrompts:
    """The official texts a `--protocol paper` synthesis sends, verified against their pins."""

    decomposer: PaperPrompt
    user_simulator: str  # a system prompt template ({user_profile}, {context_factor}, ...)
    assistant_simulator: str  # a system prompt, formatted with no values as upstream does
    user_simulator_sha256: str
    assistant_simulator_sha256: str
    source: Mapping[str, Any]

    def hashes(self) -> dict[str, str]:
        return dict(self.source["files"])


def _system(files: UpstreamFiles, path: str) -> str:
    value = files.yaml_mapping(path, "system_prompt")["system_prompt"]
    if not isinstance(value, str):
        raise ProtocolError(f"{files.source.name} protocol file {path}: system_prompt must be a string")
    return value


def load_paper_synth_prompts(
    protocol_dir: Path | str | None = None, source: UpstreamSource = SOURCE
) -> PaperSynthPrompts:
    """Read and verify the official synthesis prompts (checkout, $PERSONALIGN_PROTOCOL_DIR_CUPID or cache)."""
    files = open_upstream(source, protocol_dir)
    decomposer = paper_prompt(files, DECOMPOSER_YAML)
    if decomposer.system is None:
        raise ProtocolError(f"cupid protocol file {DECOMPOSER_YAML}: no system_prompt")
    user = _system(files, USER_SIMULATOR_YAML)
    assistant = _system(files, ASSISTANT_SIMULATOR_YAML)
    return PaperSynthPrompts(
        decomposer=decomposer,
        user_simulator=user,
        assistant_simulator=assistant,
        user_simulator_sha256=files.used[USER_SIMULATOR_YAML],
        assistant_simulator_sha256=files.used[ASSISTANT_SIMULATOR_YAML],
        source=files.manifest(),
    )


# --- rendering ------------------------------------------------------------------------------


def numbered(checklist: Sequence[str]) -> str:
    """The checklist as the official user simulator receives it: ``1. item`` lines."""
    return "\n".join(f"{k + 1}. {item}" for k, item in enumerate(checklist))


def opening_answer(request: str) -> str:
    """The user simulator's first turn as the official code seeds its chat: every section empty
    ("N/A"), CONTINUE, and the opening request as its message."""
    sections = [
        (EVALUATION, "N/A"),
        (SCORE, "N/A"),
        (CONTINUE_OR_END, "CONTINUE"),
        (SELECTED, "N/A"),
        (THINKING, "N/A"),
        (YOUR_MESSAGE, request),
    ]
    return "\n\n".join(f"{header}\n\n{body}" for header, body in sections)


def paper_opening(session: Mapping[str, Any]) -> str:
    """The dialogue's first message as the official simulator builds it: the request without the
    preference, its ``[resource]`` placeholder replaced by the resource. Our session prompt asks for
    the resource apart, so a resource with no placeholder is appended, as under our protocol."""
    request = str(session["request_with_factor"])
    resource = session.get("resource")
    if resource is None:
        return request
    if "[resource]" in request:
        return request.replace("[resource]", str(resource))
    return f"{request}\n\n{resource}"


def paper_assistant_messages(prompts: PaperSynthPrompts, chat: Sequence[Mapping[str, str]]) -> list[Message]:
    """The assistant simulator's call: its system prompt, then the dialogue so far (it answers the
    last user message)."""
    system = prompts.assistant_simulator.format()
    return [
        Message(role="system", content=system),
        *(Message(role=m["role"], content=m["content"]) for m in chat),  # type: ignore[arg-type]
    ]


def paper_user_messages(
    prompts: PaperSynthPrompts,
    *,
    persona: str,
    factor: str,
    preference: str,
    checklist: Sequence[str],
    chat: Sequence[Mapping[str, str]],
    raw_turns: Sequence[str],
) -> list[Message]:
    """The user simulator's call, roles flipped as upstream: its own earlier answers (the opening
    one, then `raw_turns`, each whole) are the assistant's turns, the assistant's replies are the user's."""
    system = prompts.user_simulator.format(
        user_profile=persona, context_factor=factor, preference=preference, checklist=numbered(checklist)
    )
    own = [opening_answer(chat[0]["content"].strip()), *raw_turns]
    replies = [m["content"] for m in chat if m["role"] == "assistant"]
    if len(replies) != len(own):
        raise ValueError(f"{len(replies)} assistant replies for {len(own)} user simulator turns")
    messages = [Message(role="system", content=system)]
    for answer, reply in zip(own, replies, strict=True):
        messages += [Message(role="assistant", content=answer), Message(role="user", content=reply)]
    return messages


# --- parsing --------------------------------------------------------------------------------


def parse_paper_user_turn(text: str, n_items: int) -> dict[str, Any]:
    """The official reading of a user simulator answer: the status between ``Continue or End?`` and
    ``Selected Checklist Items`` (END ends the dialogue), the message after ``Your Message``. Also
    read, for the records: the score (1-10, None when unreadable) and the selected item numbers."""
    try:
        status_part, rest = text.split(CONTINUE_OR_END)[1].split(SELECTED)[:2]
        message = rest.split(YOUR_MESSAGE)[1].strip()
    except IndexError:
        raise ParseError(
            f"user simulator: no '{CONTINUE_OR_END}' / '{SELECTED}' / '{YOUR_MESSAGE}' sections: "
            f"{snippet(text)!r}"
        ) from None
    if not message:
        raise ParseError(f"user simulator: empty '{YOUR_MESSAGE}' section")
    status = status_part.strip()
    score = None
    if SCORE in text:
        found = re.search(r"\d+", text.split(SCORE)[1].split(CONTINUE_OR_END)[0])
        score = int(found.group()) if found and 1 <= int(found.group()) <= 10 else None
    selected_part = rest.split(THINKING)[0] if THINKING in rest else rest.split(YOUR_MESSAGE)[0]
    selected = sorted(
        {
            int(n)
            for n in re.findall(r"^\s*[-*]\s*(\d+)\.", selected_part, re.MULTILINE)
            if 1 <= int(n) <= n_items
        }
    )
    return {"message": message, "end": status == "END", "score": score, "hinted_items": selected}


def paper_decomposer_messages(prompts: PaperSynthPrompts, preference: str) -> list[Message]:
    """The official decomposer call: both templates filled with the preference (`{preferences}`)."""
    assert prompts.decomposer.system is not None  # checked at load time
    return [
        Message(role="system", content=prompts.decomposer.system.format(preferences=preference)),
        Message(role="user", content=prompts.decomposer.user.format(preferences=preference)),
    ]


def label(path: str, sha256: str) -> PromptTemplate:
    """A name and hash for step records (the official texts are never rendered as our templates)."""
    return PromptTemplate(name=f"{SOURCE.repo}:{path}", system="", user="", sha256=sha256)


def paper_pins() -> dict[str, str]:
    """The pinned sha256 of each official file a `--protocol paper` synthesis reads (its identity)."""
    return {p: SOURCE.files[p] for p in (DECOMPOSER_YAML, USER_SIMULATOR_YAML, ASSISTANT_SIMULATOR_YAML)}
