"""The personalization memory engine: record conversations, retrieve and apply what matters.

Quick use::

    engine = MemoryEngine("memory.sqlite")  # or "postgresql://user@host:5432/db"
    engine.add_user("ana")
    engine.add_session("ana", [{"role": "user", "content": "..."}, ...])
    found = engine.retrieve("ana", "Draft the update for Professor Okafor")
    block = asyncio.run(engine.personalize("ana", "Draft the update for Professor Okafor")).text

See docs/memory.md for the full API.
"""

from personalign.memory.backend import DEFAULT_TENANT, MemoryBackend
from personalign.memory.engine import MemoryBlock, MemoryEngine, Retrieval, RetrievalConfig
from personalign.memory.extract import BackgroundExtractor, ExtractionReport, extract_pending
from personalign.memory.select import SelectionPolicy, render_memory_block, select_memories
from personalign.memory.store import Limits, MemoryStore, NewSession, UnknownUserError
from personalign.memory.stores import open_store
from personalign.memory.strategy import (
    retrieve_sessions,
    sessions_memory_block,
    statements_memory_block,
)
from personalign.memory.supersession import factor_key
from personalign.memory.types import (
    CommunicationContext,
    MemoryRecord,
    RetrievedItem,
    SelectionDecision,
    StoredSession,
    Turn,
)

__all__ = [
    "DEFAULT_TENANT",
    "BackgroundExtractor",
    "CommunicationContext",
    "ExtractionReport",
    "Limits",
    "MemoryBackend",
    "MemoryBlock",
    "MemoryEngine",
    "MemoryRecord",
    "MemoryStore",
    "NewSession",
    "Retrieval",
    "RetrievalConfig",
    "RetrievedItem",
    "SelectionDecision",
    "SelectionPolicy",
    "StoredSession",
    "Turn",
    "UnknownUserError",
    "extract_pending",
    "factor_key",
    "open_store",
    "render_memory_block",
    "retrieve_sessions",
    "select_memories",
    "sessions_memory_block",
    "statements_memory_block",
]
