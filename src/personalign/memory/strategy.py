"""The `memory` context strategy as plain functions, for any benchmark.

- :func:`retrieve_sessions`: a store built from a list of prior sessions; the positions of the
  ``k`` sessions the engine retrieves for a request (CUPID, HiCUPID: map positions to your ids).
- :func:`statements_memory_block`: a store built from memory statements (facts and preferences,
  as in BenchPreS profiles); the block of facts plus the preferences that apply in a communication
  context, decided per preference by a judge model or a per-category policy.
- :func:`sessions_memory_block`: retrieval plus optional extraction and selection over sessions.

Each call builds a throwaway in-memory store, so instances never share memories.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from personalign.llm import Model
from personalign.memory.engine import MemoryBlock, MemoryEngine, Retrieval, RetrievalConfig
from personalign.memory.extract import extract_pending
from personalign.memory.select import (
    SelectionPolicy,
    applied,
    memories_of,
    render_memory_block,
    select_memories,
)
from personalign.memory.store import NewSession
from personalign.memory.types import CommunicationContext, RetrievedItem
from personalign.retrieval import DEFAULT_EMBEDDER, Embedder, load_embedder

USER = "instance"
_EMBEDDERS: dict[str, Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def shared_embedder(spec: str = DEFAULT_EMBEDDER) -> Embedder:
    """One embedder per spec for the whole process (loading MiniLM takes a fraction of a second)."""
    with _EMBEDDERS_LOCK:
        if spec not in _EMBEDDERS:
            _EMBEDDERS[spec] = load_embedder(spec)
        return _EMBEDDERS[spec]


def build_engine(
    sessions: Sequence[Sequence[Any]],
    *,
    embedder: Embedder | str | None = "minilm",
    config: RetrievalConfig | None = None,
) -> MemoryEngine:
    """An in-memory engine holding ``sessions`` (oldest first; each a list of role/content messages)."""
    engine = MemoryEngine(":memory:", embedder=embedder, config=config)
    engine.add_user(USER)
    engine.add_sessions(
        USER,
        [NewSession(m, timestamp=float(i), metadata={"position": i}) for i, m in enumerate(sessions)],
    )
    return engine


def retrieve_sessions(
    sessions: Sequence[Sequence[Any]],
    request: str,
    *,
    k: int = 3,
    embedder: Embedder | str | None = "minilm",
    config: RetrievalConfig | None = None,
) -> list[int]:
    """Positions (into ``sessions``) of the ``k`` sessions retrieved for ``request``, best first."""
    engine = build_engine(sessions, embedder=embedder, config=config)
    try:
        found = engine.retrieve(USER, request, k_sessions=k, k_memories=0)
        return [int(str(item.session.metadata["position"])) for item in found.sessions if item.session]
    finally:
        engine.close()


async def sessions_memory_block(
    sessions: Sequence[Sequence[Any]],
    request: str,
    context: CommunicationContext | None = None,
    *,
    k: int = 3,
    extractor: Model | None = None,
    judge: Model | None = None,
    policy: SelectionPolicy | None = None,
    embedder: Embedder | str | None = "minilm",
) -> MemoryBlock:
    """The memory block for ``request``: retrieved sessions, or (with ``extractor``) the extracted
    memories that apply in ``context``. Extraction errors leave those sessions as raw sessions."""
    engine = build_engine(sessions, embedder=embedder, config=RetrievalConfig(k_sessions=k))
    try:
        if extractor is not None:
            await extract_pending(engine.store, USER, extractor)
        return await engine.personalize(USER, request, context, judge=judge, policy=policy)
    finally:
        engine.close()


async def statements_memory_block(
    request: str,
    context: CommunicationContext,
    *,
    facts: Sequence[str] = (),
    preferences: Sequence[str | tuple[str, str]] = (),
    judge: Model | None = None,
    policy: SelectionPolicy | None = None,
    k_facts: int | None = None,
    embedder: Embedder | str | None = "minilm",
) -> MemoryBlock:
    """A block from memory statements: the facts (all, or the ``k_facts`` most relevant to the
    request) and the preferences that apply in ``context``. A preference may be ``(category, text)``."""
    engine = MemoryEngine(":memory:", embedder=embedder if k_facts is not None else None)
    try:
        engine.add_user(USER)
        for i, fact in enumerate(facts):
            engine.add_memory(USER, fact, kind="fact", category="fact", valid_from=float(i), supersede=False)
        for i, pref in enumerate(preferences):
            category, text = pref if isinstance(pref, tuple) else ("general", pref)
            engine.add_memory(
                USER, text, category=category, valid_from=float(len(facts) + i), supersede=False
            )
        stored = engine.memories(USER)  # in stored order: the facts, then the preferences
        if k_facts is None:  # every statement
            items = [RetrievedItem("memory", 0.0, memory=m) for m in stored]
            found = Retrieval(USER, request, memories=items)
        else:  # the k_facts most relevant facts; every preference is still decided
            found = engine.retrieve(USER, request, k_sessions=0, k_memories=len(stored))
            ranked = [i for i in found.memories if i.memory is not None and i.memory.kind == "fact"][:k_facts]
            keep = {i.memory.id for i in ranked if i.memory is not None}
            items = [i for i in found.memories if i.memory is not None and i.memory.id in keep]
            hits = {i.memory.id for i in found.memories if i.memory is not None}
            items += [
                next(i for i in found.memories if i.memory is not None and i.memory.id == m.id)
                if m.id in hits
                else RetrievedItem("memory", 0.0, memory=m)
                for m in stored
                if m.kind == "preference"
            ]
            found = replace(found, memories=items)
        decisions = await select_memories(memories_of(found.memories), context, judge=judge, policy=policy)
        return MemoryBlock(render_memory_block(memories=applied(decisions)), found, decisions)
    finally:
        engine.close()
