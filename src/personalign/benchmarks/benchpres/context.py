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
recipient and task with a judge model; see `personalign.benchmarks.benchpres.memory`).
"""

from __future__ import annotations

import re

from personalign.benchmarks.benchpres.memory import memory_strategy
from personalign.benchmarks.benchpres.prompt import (
    MEMORY_HEADER,
    MEMORY_TEMPLATE,
    ContextResult,
    ContextStrategy,
    MemoryPrompt,
    StrategyEnv,
    StrategyFactory,
    compose_memory_prompt,
    render_memory_block,
    replace_memory_statements,
    split_memory_prompt,
)
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.errors import ConfigError

# The strategy interface and the memory prompt layout live in benchpres_prompt; importers keep
# using this module.
__all__ = [
    "MEMORY_HEADER",
    "MEMORY_TEMPLATE",
    "ContextResult",
    "ContextStrategy",
    "MemoryPrompt",
    "StrategyEnv",
    "StrategyFactory",
    "compose_memory_prompt",
    "context_strategies",
    "full_memory",
    "get_context_strategy",
    "needs_judge",
    "register_context_strategy",
    "register_context_strategy_factory",
    "render_memory_block",
    "replace_memory_statements",
    "split_memory_prompt",
]


async def full_memory(row: BenchPresRow) -> str:
    """The paper's setting: every memory statement, as the row's prompt holds them."""
    return row.prompt


_STRATEGIES: dict[str, ContextStrategy] = {"full": full_memory}
_FACTORIES: dict[str, StrategyFactory] = {"memory": memory_strategy}


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
