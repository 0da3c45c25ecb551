"""Value types of the memory engine: stored sessions and memories, retrieval hits, decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MemoryKind = Literal["preference", "fact"]
MEMORY_KINDS: tuple[str, ...] = ("preference", "fact")
Decision = Literal["apply", "suppress"]


@dataclass(frozen=True)
class Turn:
    """One stored message of a session (``index`` is its 0-based position in the session)."""

    index: int
    role: str
    content: str


@dataclass(frozen=True)
class StoredSession:
    """A recorded conversation. ``seq`` orders sessions by time (then by insertion) within a user."""

    id: int
    user_id: str
    external_id: str | None
    timestamp: float
    seq: int
    metadata: dict[str, object]
    turns: tuple[Turn, ...]

    @property
    def text(self) -> str:
        """All turns, one per line, as indexed for search."""
        return "\n".join(f"{t.role}: {t.content}" for t in self.turns)


@dataclass(frozen=True)
class MemoryRecord:
    """A memory with its provenance (session, evidence turns) and its validity interval.

    ``valid_to`` is None while the memory is current; a newer memory for the same context factor
    sets it and names itself in ``superseded_by``. Superseded memories are kept, never deleted.
    """

    id: int
    user_id: str
    kind: str
    category: str
    context_factor: str
    content: str
    session_id: int | None
    evidence_turns: tuple[int, ...]
    valid_from: float
    valid_to: float | None
    superseded_by: int | None
    source: str

    @property
    def current(self) -> bool:
        return self.valid_to is None


@dataclass(frozen=True)
class RetrievedItem:
    """One retrieval result: a session or a memory, its fused score and per-channel ranks (1-based)."""

    kind: Literal["session", "memory"]
    score: float
    session: StoredSession | None = None
    memory: MemoryRecord | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    history: tuple[MemoryRecord, ...] = ()

    @property
    def session_id(self) -> int | None:
        if self.session is not None:
            return self.session.id
        return self.memory.session_id if self.memory is not None else None

    @property
    def text(self) -> str:
        if self.memory is not None:
            return self.memory.content
        assert self.session is not None
        return self.session.text


@dataclass(frozen=True)
class CommunicationContext:
    """Who the answer is for and what it must do; decides which preferences are appropriate."""

    recipient: str = ""
    task: str = ""
    formality: str = ""
    notes: str = ""

    def describe(self) -> str:
        parts = [
            f"Recipient: {self.recipient or 'the user themself'}",
            f"Task: {self.task or 'unspecified'}",
            f"Formality: {self.formality or 'unspecified'}",
        ]
        if self.notes:
            parts.append(f"Notes: {self.notes}")
        return "\n".join(parts)


@dataclass(frozen=True)
class SelectionDecision:
    """Whether one retrieved preference is applied in a context, and why (``by``: policy or judge)."""

    memory: MemoryRecord
    decision: Decision
    reason: str
    by: str
