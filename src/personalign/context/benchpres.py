"""BenchPreS context strategies: how a user's persistent memory reaches the subject model.

A strategy is an async function from a row to the subject's prompt text (before any
mitigation instruction is added), or to a `ContextResult`: the prompt plus details that the
run records in the sample's ``context`` step (e.g. the memory engine's apply/suppress decisions).
The built-in ``full`` strategy sends the row's own prompt, which already holds every memory
statement, as in the paper. Other strategies register themselves under a name with
`register_context_strategy`, or, when they need the run's models (a judge), with
`register_context_strategy_factory`; they typically rebuild the prompt from `split_memory_prompt`
(the memory statements) with `replace_memory_statements` or `compose_memory_prompt`.

``memory`` is built in as a factory (the memory engine selects the preferences that suit the
recipient and task with a judge model; see `personalign.memory.benchpres`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from personalign.errors import ConfigError
from personalign.llm.model import Model
from personalign.prompts import load_template
from personalign.types import BenchPresRow


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


async def full_memory(row: BenchPresRow) -> str:
    """The paper's setting: every memory statement, as the row's prompt holds them."""
    return row.prompt


def _memory_factory(env: StrategyEnv) -> ContextStrategy:
    from personalign.memory.benchpres import memory_strategy

    return memory_strategy(env)


_STRATEGIES: dict[str, ContextStrategy] = {"full": full_memory}
_FACTORIES: dict[str, StrategyFactory] = {"memory": _memory_factory}


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise ValueError(f"strategy name {name!r} must be lowercase letters, digits, '-' or '_'")


def register_context_strategy(name: str, strategy: ContextStrategy) -> None:
    """Make `strategy` selectable as ``--context NAME``."""
    _check_name(name)
    _FACTORIES.pop(name, None)
    _STRATEGIES[name] = strategy


def register_context_strategy_factory(name: str, factory: StrategyFactory) -> None:
    """Make a strategy that needs the run's models selectable as ``--context NAME``."""
    _check_name(name)
    _STRATEGIES.pop(name, None)
    _FACTORIES[name] = factory


def context_strategies() -> tuple[str, ...]:
    return (*_STRATEGIES, *_FACTORIES)


def needs_judge(name: str) -> bool:
    """Whether the strategy is built per run from its models (e.g. ``memory``'s selection judge)."""
    return name in _FACTORIES


def get_context_strategy(name: str, env: StrategyEnv | None = None) -> ContextStrategy:
    if name in _STRATEGIES:
        return _STRATEGIES[name]
    if name in _FACTORIES:
        if env is None:
            raise ConfigError(f"context strategy {name!r} needs the run's models (a StrategyEnv)")
        return _FACTORIES[name](env)
    raise KeyError(f"unknown BenchPreS context strategy {name!r} (known: {', '.join(context_strategies())})")
