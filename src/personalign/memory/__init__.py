"""The personalization memory engine: record conversations, retrieve and apply what matters.

Quick use::

    engine = MemoryEngine("memory.sqlite")
    engine.add_user("ana")
    engine.add_session("ana", [{"role": "user", "content": "..."}, ...])
    found = engine.retrieve("ana", "Draft the update for Professor Okafor")
    block = render_memory_block(found)

See docs/memory.md for the full API.
"""

from personalign.memory.engine import MemoryEngine, Retrieval, RetrievalConfig
from personalign.memory.store import Limits, MemoryStore, UnknownUserError, factor_key
from personalign.memory.types import (
    CommunicationContext,
    MemoryRecord,
    RetrievedItem,
    SelectionDecision,
    StoredSession,
    Turn,
)

__all__ = [
    "CommunicationContext",
    "Limits",
    "MemoryEngine",
    "MemoryRecord",
    "MemoryStore",
    "Retrieval",
    "RetrievalConfig",
    "RetrievedItem",
    "SelectionDecision",
    "StoredSession",
    "Turn",
    "UnknownUserError",
    "factor_key",
]
