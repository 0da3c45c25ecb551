"""Context strategies for HiCUPID: which part of a user's history the subject model sees.

Each strategy is a named entry of a registry (`HICUPID_CONTEXTS`), built by `make_context`:

- ``full``: the whole history, every dialogue in order (the paper's default, ~17K tokens per user);
- ``gold``: only the question's gold dialogues (the paper's ablation, `--relevant`);
- ``bm25-utterance-K`` / ``dense-utterance-K`` (K in 5, 15, 25): the K best rounds, found by
  indexing the *user* turns only and returning each (user, assistant) round;
- ``bm25-dialogue-K`` / ``dense-dialogue-K`` (K in 1, 3, 5): the K best whole dialogues;
- ``memory`` / ``memory-K``: the K dialogues the memory engine retrieves (K = 3 for ``memory``; see
  :mod:`personalign.benchmarks.hicupid.memory`).

Retrieved units are always re-sorted chronologically before they are shown. Any positive K is
accepted; the paper's values are the registered names. Other strategies (e.g. the memory engine)
plug in with `register_context(name, factory)`: a factory takes `ContextOptions` and returns an
object with a ``name`` and an async ``select(history, qa) -> ContextSelection``.
"""

from __future__ import annotations

import re
from typing import Any

from personalign.benchmarks.hicupid.history import (
    BM25_VARIANTS,
    PAPER_K,
    BM25Variant,
    ContextFactory,
    ContextOptions,
    ContextSelection,
    FullHistory,
    GoldDialogues,
    HistoryContext,
    HistoryUnit,
    Index,
    Method,
    Retrieval,
    Unit,
    chronological,
    dialogue_units,
    flatten,
    hit_at_k,
    hit_groups,
    hits_by_type,
    retrieval_hits,
    utterance_units,
)
from personalign.benchmarks.hicupid.memory import MEMORY_K, MemoryContext, memory_settings
from personalign.errors import ConfigError

# The history units and plain strategies live in hicupid_history; importers keep using this module.
__all__ = [
    "BM25_VARIANTS",
    "HICUPID_CONTEXTS",
    "PAPER_K",
    "BM25Variant",
    "ContextFactory",
    "ContextOptions",
    "ContextSelection",
    "FullHistory",
    "GoldDialogues",
    "HistoryContext",
    "HistoryUnit",
    "Index",
    "Method",
    "Retrieval",
    "Unit",
    "check_context",
    "chronological",
    "context_names",
    "context_settings",
    "dialogue_units",
    "flatten",
    "hit_at_k",
    "hit_groups",
    "hits_by_type",
    "is_retrieval",
    "make_context",
    "memory_k",
    "register_context",
    "retrieval_hits",
    "utterance_units",
]


def _memory(k: int | None) -> ContextFactory:
    def factory(options: ContextOptions) -> HistoryContext:
        return MemoryContext(MEMORY_K if k is None else k, options)

    return factory


HICUPID_CONTEXTS: dict[str, ContextFactory] = {
    "full": lambda options: FullHistory(),
    "gold": lambda options: GoldDialogues(),
    "memory": _memory(None),
}


def _retrieval_factory(method: Method, unit: Unit, k: int) -> ContextFactory:
    return lambda options: Retrieval(method, unit, k, options)


for _method in ("bm25", "dense"):
    for _unit, _ks in PAPER_K.items():
        for _k in _ks:
            HICUPID_CONTEXTS[f"{_method}-{_unit}-{_k}"] = _retrieval_factory(_method, _unit, _k)  # type: ignore[arg-type]

_RETRIEVAL_NAME = re.compile(r"^(bm25|dense)-(utterance|dialogue)-([1-9][0-9]*)$")
_MEMORY_NAME = re.compile(r"^memory(?:-([1-9][0-9]*))?$")


def register_context(name: str, factory: ContextFactory) -> None:
    """Add a context strategy (e.g. ``memory``) under ``name``."""
    if name in HICUPID_CONTEXTS:
        raise ConfigError(f"context strategy {name!r} is already registered")
    HICUPID_CONTEXTS[name] = factory


def is_retrieval(name: str) -> bool:
    """Strategies that rank dialogues (their runs report Hit@k)."""
    return bool(_RETRIEVAL_NAME.match(name) or _MEMORY_NAME.match(name))


def memory_k(name: str) -> int | None:
    """K of a ``memory``/``memory-K`` name (None for other strategies)."""
    match = _MEMORY_NAME.match(name)
    if match is None:
        return None
    if match.group(1) is None:
        return MEMORY_K
    return int(match.group(1))


def context_settings(name: str, options: ContextOptions) -> dict[str, Any] | None:
    """Settings of a strategy beyond its name that define its results (None when there are none);
    the memory strategy's k, embedder and retrieval configuration."""
    k = memory_k(name)
    if k is None:
        return None
    return memory_settings(k, options.embedder)


def context_names() -> list[str]:
    return list(HICUPID_CONTEXTS)


def check_context(name: str) -> None:
    if name not in HICUPID_CONTEXTS and not _RETRIEVAL_NAME.match(name) and not _MEMORY_NAME.match(name):
        raise ConfigError(
            f"unknown HiCUPID context {name!r} (known: {', '.join(HICUPID_CONTEXTS)}, "
            "bm25|dense-utterance|dialogue-K or memory-K)"
        )


def make_context(name: str, options: ContextOptions | None = None) -> HistoryContext:
    """Build the strategy registered as ``name`` (or a retrieval name with any K)."""
    check_context(name)
    options = options or ContextOptions()
    if name in HICUPID_CONTEXTS:
        return HICUPID_CONTEXTS[name](options)
    if _MEMORY_NAME.match(name):
        return _memory(memory_k(name))(options)
    match = _RETRIEVAL_NAME.match(name)
    assert match is not None
    return Retrieval(match.group(1), match.group(2), int(match.group(3)), options)  # type: ignore[arg-type]
