"""The storage interface of the memory engine: what a store must do, whatever database holds it.

:class:`MemoryBackend` is implemented by the SQLite store (:class:`personalign.memory.store.MemoryStore`)
and the PostgreSQL store (:class:`personalign.memory.store_pg.PostgresStore`); both share one set of
queries (:mod:`personalign.memory.sqlbase`), so their behaviour is the same by construction and the same
test suite runs against both. A handle is bound to one tenant; user ids are opaque data, unique per tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from personalign.errors import PersonalignError
from personalign.memory.types import MemoryRecord, StoredSession

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Limits:
    """Bounds on one session; anything larger is rejected with a DataError rather than stored."""

    max_turns: int = 1000
    max_chars_per_turn: int = 50_000
    max_chars_per_session: int = 500_000
    max_user_id_chars: int = 200


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class NewSession:
    """A session to store: its messages and optional time, metadata, id and embeddings."""

    messages: Sequence[Any]
    timestamp: float | None = None
    metadata: Mapping[str, Any] | None = None
    external_id: str | None = None
    vectors: Mapping[str, npt.NDArray[np.float32]] | None = None


@dataclass(frozen=True)
class CatchUp:
    """What an index needs to catch up with a user's rows, read in one snapshot
    (:meth:`MemoryBackend.catch_up`; one round trip on a database server).

    ``version`` is the user's (internal id, revision). When it equals the ``known`` version the
    caller passed, nothing else was read: ``count`` and ``last`` are -1, the lists empty and
    ``memories`` None.
    """

    version: tuple[int, int]
    count: int  # the user's sessions
    last: int  # their largest session id (0: none)
    sessions: list[StoredSession]  # ids above ``after_id``, oldest first
    memories: list[MemoryRecord] | None  # every memory, superseded ones included, oldest first
    vectors: dict[tuple[str, int], npt.NDArray[np.float32]]  # (unit, id): those sessions' and every
    # memory's stored embedding under the embedder asked for (absent: not stored)


@dataclass(frozen=True)
class Recorded:
    """What one write of sessions stored (:meth:`MemoryBackend.record_sessions`), so that an index
    holding the user at ``before`` can take the sessions in without reading them back.

    ``before`` and ``version`` are the user's (internal id, revision) just before and just after the
    write; nothing else wrote in between (the write held the user's row).
    """

    before: tuple[int, int]
    version: tuple[int, int]
    sessions: list[StoredSession]  # as stored (ids, seq, timestamps, metadata), in the order given
    vectors: dict[str, dict[int, npt.NDArray[np.float32]]]  # embedder name -> session id -> vector


class UnknownUserError(PersonalignError):
    """A read or write named a user id the store does not hold (for this tenant)."""

    def __init__(self, user_id: str, where: str | Path) -> None:
        shown = user_id if len(user_id) <= 200 else user_id[:200] + "..."
        super().__init__(f"unknown user id {shown!r} in memory store {where} (add it with add_user first)")
        self.user_id = user_id


@runtime_checkable
class MemoryBackend(Protocol):
    """A memory store bound to one tenant: users, sessions, turns, memories, vectors, bookkeeping.

    Every write is one transaction; every read and write names a user id and touches only that
    user's rows of this handle's tenant.
    """

    url: str
    tenant: str
    limits: Limits

    def tenant_view(self, tenant: str) -> MemoryBackend: ...
    def close(self) -> None: ...

    def add_user(self, user_id: str, *, exist_ok: bool = True) -> None: ...
    def has_user(self, user_id: str) -> bool: ...
    def users(self) -> list[str]: ...
    def revision(self, user_id: str) -> int: ...
    def user_version(self, user_id: str) -> tuple[int, int]: ...
    def delete_user(self, user_id: str) -> dict[str, int]: ...
    def export_user(self, user_id: str) -> dict[str, Any]: ...

    def add_session(
        self,
        user_id: str,
        messages: Sequence[Any],
        *,
        timestamp: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        vectors: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> int: ...
    def add_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> list[int]: ...
    def record_sessions(self, user_id: str, sessions: Sequence[NewSession]) -> Recorded: ...
    def sessions(
        self, user_id: str, *, after_id: int = 0, until_id: int | None = None
    ) -> list[StoredSession]: ...
    def session_span(self, user_id: str) -> tuple[int, int]: ...
    def catch_up(
        self, user_id: str, *, after_id: int, known: tuple[int, int], embedder: str | None
    ) -> CatchUp: ...
    def session(self, user_id: str, session_id: int) -> StoredSession: ...
    def count_sessions(self, user_id: str | None = None) -> int: ...

    def vectors(
        self, user_id: str, unit: str, embedder: str, ids: Iterable[int]
    ) -> dict[int, npt.NDArray[np.float32]]: ...
    def put_vectors(
        self, user_id: str, unit: str, embedder: str, vectors: Mapping[int, npt.NDArray[np.float32]]
    ) -> None: ...
    def search_vectors(
        self, user_id: str, unit: str, embedder: str, query: npt.NDArray[np.float32], k: int
    ) -> list[tuple[int, float]]: ...

    def add_memory(
        self,
        user_id: str,
        content: str,
        *,
        kind: str = "preference",
        category: str = "general",
        context_factor: str = "",
        session_id: int | None = None,
        evidence_turns: Sequence[int] = (),
        valid_from: float | None = None,
        source: str = "manual",
        supersede: bool = True,
    ) -> MemoryRecord: ...
    def add_memories(
        self,
        user_id: str,
        items: Sequence[Mapping[str, Any]],
        *,
        session_id: int | None = None,
        valid_from: float | None = None,
        source: str = "manual",
        supersede: bool = True,
        extractor: str | None = None,
    ) -> list[MemoryRecord]: ...
    def memories(
        self, user_id: str, *, include_superseded: bool = False, kind: str | None = None
    ) -> list[MemoryRecord]: ...
    def correct_memory(self, user_id: str, memory_id: int, content: str) -> MemoryRecord: ...
    def delete_memory(self, user_id: str, memory_id: int) -> None: ...
    def memory_chain(self, user_id: str, memory_id: int) -> list[MemoryRecord]: ...
    def history(self, user_id: str) -> list[dict[str, Any]]: ...

    def pending_extraction(self, user_id: str, extractor: str) -> list[int]: ...
    def record_extraction_error(self, user_id: str, session_id: int, extractor: str, error: str) -> None: ...
    def extraction_errors(self, user_id: str, extractor: str) -> dict[int, str]: ...

    def check(self) -> list[str]: ...
    def row_counts(self) -> dict[str, int]: ...
    def schema_version(self) -> int: ...
