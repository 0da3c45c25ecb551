"""The BenchPreS context strategy interface and the memory prompt's layout: what a strategy returns,
what a strategy factory may use, and how the memory statements are split out of and put back into a
row's prompt.

Split from :mod:`personalign.benchmarks.benchpres.context` (the registry of named strategies) so the memory
adapter (:mod:`personalign.benchmarks.benchpres.memory`) and the data builder can use these without importing
the registry that lists the adapter.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.llm.model import Model
from personalign.prompts import load_template


@dataclass(frozen=True)
class ContextResult:
    """A strategy's prompt and what it decided on the way (recorded in the sample record)."""

    prompt: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StrategyEnv:
    """What a strategy factory may use: the run's model for context decisions, and options."""

    judge: Model | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


ContextStrategy = Callable[[BenchPresRow], Awaitable[str | ContextResult]]
StrategyFactory = Callable[[StrategyEnv], ContextStrategy]

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


def replace_memory_statements(prompt: str, statements: Sequence[str]) -> str | None:
    """``prompt`` with its memory statements replaced by ``statements`` (one per line), keeping the
    header, the intro line and the instruction exactly as they were. None if it cannot be split."""
    split = split_memory_prompt(prompt)
    header = _HEADER_LINE.search(prompt)
    if split is None or header is None:
        return None
    body = prompt[header.end() :].strip()
    intro = re.split(r"\n\s*\n", body, maxsplit=1)[0].strip()
    memories = render_memory_block(statements) if statements else "(no memories apply here)"
    return f"{prompt[: header.end()].strip()}\n{intro}\n\n{memories}\n\n{split.instruction}"
