"""BenchPreS context strategies: how a user's persistent memory reaches the subject model.

A strategy is an async function from a row to the subject's prompt text (before any
mitigation instruction is added). The built-in ``full`` strategy sends the row's own prompt,
which already holds every memory statement, as in the paper. Other strategies, such as a
retrieval-based memory engine, register themselves under a name with
`register_context_strategy` and typically rebuild the prompt from `split_memory_prompt`
(the memory statements) through `compose_memory_prompt` with a different memory block.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from personalign.prompts import load_template
from personalign.types import BenchPresRow

ContextStrategy = Callable[[BenchPresRow], Awaitable[str]]

MEMORY_TEMPLATE = "benchpres/memory_prompt"
MEMORY_HEADER = "User Knowledge Memories"


def render_memory_block(statements: Sequence[str]) -> str:
    """The memory statements, one per line, in the given order."""
    lines = [" ".join(s.split()) for s in statements]
    if any(not line for line in lines):
        raise ValueError("a memory statement is empty")
    return "\n".join(lines)


def compose_memory_prompt(statements: Sequence[str], recipient: str, task: str) -> str:
    """The persistent-memory prompt: header, memory statements, then the task instruction."""
    messages = load_template(MEMORY_TEMPLATE).render(
        memories=render_memory_block(statements), recipient=recipient.strip(), task=task.strip()
    )
    return messages[-1].content


@dataclass(frozen=True)
class MemoryPrompt:
    """A persistent-memory prompt taken apart: its memory statements and the instruction."""

    statements: tuple[str, ...]
    instruction: str


_HEADER_LINE = re.compile(rf"^\s*#*\s*{MEMORY_HEADER}\s*:?\s*$", re.IGNORECASE | re.MULTILINE)


def split_memory_prompt(prompt: str) -> MemoryPrompt | None:
    """Undo `compose_memory_prompt` (and prompts of the same layout): the lines between the
    header's intro line and the last paragraph are the memories. None if there is no header."""
    header = _HEADER_LINE.search(prompt)
    if header is None:
        return None
    body = prompt[header.end() :].strip()
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    if len(paragraphs) < 3:
        return None
    intro, *memory_paragraphs, instruction = paragraphs
    del intro
    statements = tuple(line.strip() for p in memory_paragraphs for line in p.splitlines() if line.strip())
    return MemoryPrompt(statements=statements, instruction=instruction) if statements else None


async def full_memory(row: BenchPresRow) -> str:
    """The paper's setting: every memory statement, as the row's prompt holds them."""
    return row.prompt


_STRATEGIES: dict[str, ContextStrategy] = {"full": full_memory}


def register_context_strategy(name: str, strategy: ContextStrategy) -> None:
    """Make `strategy` selectable as ``--context NAME`` (e.g. the memory engine as ``memory``)."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise ValueError(f"strategy name {name!r} must be lowercase letters, digits, '-' or '_'")
    _STRATEGIES[name] = strategy


def context_strategies() -> tuple[str, ...]:
    return tuple(_STRATEGIES)


def get_context_strategy(name: str) -> ContextStrategy:
    try:
        return _STRATEGIES[name]
    except KeyError:
        raise KeyError(
            f"unknown BenchPreS context strategy {name!r} (known: {', '.join(_STRATEGIES)})"
        ) from None
